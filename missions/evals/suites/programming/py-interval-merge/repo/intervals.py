def merge(intervals):
    """The union of [start, end] intervals, sorted, none overlapping or touching."""
    merged = []
    for start, end in sorted(intervals):
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged
