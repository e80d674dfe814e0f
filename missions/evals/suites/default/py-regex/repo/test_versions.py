import unittest

from versions import parse_version


class ParseTest(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(parse_version("1.2.3"), (1, 2, 3))

    def test_many_digits(self):
        self.assertEqual(parse_version("10.20.300"), (10, 20, 300))

    def test_other_separators(self):
        with self.assertRaises(ValueError):
            parse_version("1x2y3")

    def test_trailing_parts(self):
        for text in ("1.2.3.4", "1.2.3-beta", "1.2.3 "):
            with self.assertRaises(ValueError):
                parse_version(text)


if __name__ == "__main__":
    unittest.main()
