import unittest

from intervals import merge


class TestMerge(unittest.TestCase):
    def test_overlap(self):
        self.assertEqual(merge([[1, 4], [2, 6], [8, 9]]), [[1, 6], [8, 9]])

    def test_touching(self):
        self.assertEqual(merge([[12, 14], [9, 12]]), [[9, 14]])

    def test_empty(self):
        self.assertEqual(merge([]), [])


if __name__ == "__main__":
    unittest.main()
