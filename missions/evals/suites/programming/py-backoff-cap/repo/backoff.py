def delay(attempt, base=0.5, cap=30.0):
    """Seconds to wait before retry number `attempt` (0 for the first)."""
    if attempt < 0:
        raise ValueError("attempt >= 0")
    return max(cap, base * 2 ** attempt)
