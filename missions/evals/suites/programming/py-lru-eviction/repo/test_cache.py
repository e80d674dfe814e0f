import unittest

from cache import LRUCache


class TestLRU(unittest.TestCase):
    def test_evicts_least_recently_used(self):
        cache = LRUCache(2)
        cache.put("a", 1)
        cache.put("b", 2)
        cache.get("a")
        cache.put("c", 3)
        self.assertEqual(cache.get("a"), 1)
        self.assertIsNone(cache.get("b"))
        self.assertEqual(cache.get("c"), 3)

    def test_capacity(self):
        cache = LRUCache(3)
        for n in range(10):
            cache.put(n, n)
        self.assertEqual(len(cache), 3)
        self.assertEqual(cache.get(9), 9)


if __name__ == "__main__":
    unittest.main()
