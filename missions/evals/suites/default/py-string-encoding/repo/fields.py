def truncate_utf8(text, limit):
    """The longest prefix of `text` whose UTF-8 encoding is at most `limit` bytes."""
    data = text.encode("utf-8")[:limit]
    return data.decode("latin-1")
