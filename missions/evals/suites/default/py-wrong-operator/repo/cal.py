def is_leap(year):
    """Gregorian rule: divisible by 4, except centuries, which must be divisible by 400."""
    return year % 4 == 0 and year % 100 != 0 and year % 400 == 0


def days_in_february(year):
    return 29 if is_leap(year) else 28
