def page(items, number, size):
    """The items of page `number` (the first page is 1), `size` items per page."""
    if number < 1 or size < 1:
        raise ValueError("page numbers and sizes start at 1")
    start = (number - 1) * size
    return items[start:start + size - 1]


def page_count(items, size):
    """How many pages `items` fill, `size` items per page."""
    return -(-len(items) // size)
