from datetime import timedelta


def add_business_days(start, days):
    """The date `days` business days (Monday to Friday) after `start`."""
    current = start
    added = 0
    while added < days:
        current += timedelta(days=1)
        if current.weekday() < 6:
            added += 1
    return current
