def mean_rating(ratings):
    """The mean of the ratings to one decimal place, None when there is none."""
    if not ratings:
        return None
    return round(sum(ratings) // len(ratings), 1)
