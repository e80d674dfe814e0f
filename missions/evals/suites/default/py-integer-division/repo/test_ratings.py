import unittest

from ratings import mean_rating


class MeanTest(unittest.TestCase):
    def test_half_star(self):
        self.assertEqual(mean_rating([4, 5]), 4.5)

    def test_thirds(self):
        self.assertEqual(mean_rating([5, 4, 4]), 4.3)

    def test_whole(self):
        self.assertEqual(mean_rating([3, 3]), 3)

    def test_none(self):
        self.assertIsNone(mean_rating([]))


if __name__ == "__main__":
    unittest.main()
