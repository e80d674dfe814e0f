import unittest
from datetime import date

from due import add_business_days


class DueTest(unittest.TestCase):
    def test_within_the_week(self):
        self.assertEqual(add_business_days(date(2024, 3, 4), 2), date(2024, 3, 6))

    def test_friday_to_monday(self):
        self.assertEqual(add_business_days(date(2024, 3, 1), 1), date(2024, 3, 4))

    def test_two_weeks(self):
        self.assertEqual(add_business_days(date(2024, 3, 4), 10), date(2024, 3, 18))

    def test_across_a_month(self):
        self.assertEqual(add_business_days(date(2024, 1, 29), 5), date(2024, 2, 5))

    def test_zero(self):
        self.assertEqual(add_business_days(date(2024, 3, 2), 0), date(2024, 3, 2))


if __name__ == "__main__":
    unittest.main()
