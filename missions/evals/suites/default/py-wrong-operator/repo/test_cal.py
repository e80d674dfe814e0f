import unittest

from cal import days_in_february, is_leap


class LeapTest(unittest.TestCase):
    def test_ordinary_leap_years(self):
        for year in (1996, 2004, 2024):
            self.assertTrue(is_leap(year), year)

    def test_common_years(self):
        for year in (2019, 2023, 2025):
            self.assertFalse(is_leap(year), year)

    def test_centuries(self):
        self.assertFalse(is_leap(1900))
        self.assertFalse(is_leap(2100))
        self.assertTrue(is_leap(2000))

    def test_february(self):
        self.assertEqual(days_in_february(2024), 29)
        self.assertEqual(days_in_february(2023), 28)


if __name__ == "__main__":
    unittest.main()
