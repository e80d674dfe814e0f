from collections import OrderedDict


class LRUCache:
    """A mapping of at most `capacity` entries; the least recently used goes first."""

    def __init__(self, capacity):
        self.capacity = capacity
        self._data = OrderedDict()

    def get(self, key, default=None):
        if key not in self._data:
            return default
        self._data.move_to_end(key)
        return self._data[key]

    def put(self, key, value):
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self.capacity:
            self._data.popitem(last=True)

    def __len__(self):
        return len(self._data)
