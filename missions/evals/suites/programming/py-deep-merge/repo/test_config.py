import unittest

from config import merge

DEFAULTS = {"db": {"host": "localhost", "port": 5432}, "debug": False}


class TestMerge(unittest.TestCase):
    def test_nested(self):
        got = merge(DEFAULTS, {"db": {"host": "db.internal"}})
        self.assertEqual(got, {"db": {"host": "db.internal", "port": 5432}, "debug": False})

    def test_untouched(self):
        merge(DEFAULTS, {"db": {"port": 1}})
        self.assertEqual(DEFAULTS["db"]["port"], 5432)

    def test_scalar(self):
        self.assertEqual(merge({"a": 1}, {"a": 2, "b": 3}), {"a": 2, "b": 3})


if __name__ == "__main__":
    unittest.main()
