def add_tag(tag, tags=[]):
    """`tags` (a new list when none is given) with `tag` added at the end."""
    tags.append(tag.strip().lower())
    return tags
