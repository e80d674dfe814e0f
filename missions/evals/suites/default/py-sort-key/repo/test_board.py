import unittest

from board import leaderboard


class BoardTest(unittest.TestCase):
    def test_highest_first(self):
        self.assertEqual(leaderboard({"ann": 3, "bob": 9, "cy": 5}), ["bob", "cy", "ann"])

    def test_ties_by_name(self):
        self.assertEqual(leaderboard({"zed": 7, "amy": 7, "kim": 1}), ["amy", "zed", "kim"])

    def test_empty(self):
        self.assertEqual(leaderboard({}), [])


if __name__ == "__main__":
    unittest.main()
