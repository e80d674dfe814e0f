import unittest

from versions import latest, ordered


class TestVersions(unittest.TestCase):
    def test_latest(self):
        self.assertEqual(latest(["1.9.0", "1.10.0", "1.2.3"]), "1.10.0")

    def test_prefix(self):
        self.assertEqual(latest(["v2.0.1", "v2.0.10", "v2.0.9"]), "v2.0.10")

    def test_ordered(self):
        self.assertEqual(ordered(["10.0.0", "9.1.0", "9.0.12"]), ["9.0.12", "9.1.0", "10.0.0"])


if __name__ == "__main__":
    unittest.main()
