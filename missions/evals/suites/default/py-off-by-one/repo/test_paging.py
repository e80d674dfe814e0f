import unittest

from paging import page, page_count


class PageTest(unittest.TestCase):
    def test_first_page(self):
        self.assertEqual(page(list(range(10)), 1, 3), [0, 1, 2])

    def test_middle_page(self):
        self.assertEqual(page(list(range(10)), 2, 4), [4, 5, 6, 7])

    def test_last_page_is_short(self):
        self.assertEqual(page(list(range(10)), 4, 3), [9])

    def test_past_the_end(self):
        self.assertEqual(page(list(range(10)), 5, 3), [])

    def test_count(self):
        self.assertEqual(page_count(list(range(10)), 3), 4)

    def test_zero_is_refused(self):
        with self.assertRaises(ValueError):
            page([1], 0, 3)


if __name__ == "__main__":
    unittest.main()
