import re


def slugify(text):
    """A URL slug: lowercase letters and digits, words joined by single dashes."""
    return re.sub(r"[^a-z0-9]", "-", text.lower())
