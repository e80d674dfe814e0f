def leaderboard(scores):
    """Player names by score, highest first; equal scores by name, alphabetically."""
    ranked = sorted(scores.items(), key=lambda item: (item[0], -item[1]))
    return [name for name, _ in ranked]
