import unittest

from backoff import delay


class TestDelay(unittest.TestCase):
    def test_grows(self):
        self.assertEqual([delay(n) for n in range(4)], [0.5, 1.0, 2.0, 4.0])

    def test_capped(self):
        self.assertEqual(delay(20), 30.0)
        self.assertEqual(delay(7, base=1, cap=60), 60)


if __name__ == "__main__":
    unittest.main()
