import unittest

from slug import slugify


class TestSlug(unittest.TestCase):
    def test_words(self):
        self.assertEqual(slugify("Hello World"), "hello-world")

    def test_punctuation(self):
        self.assertEqual(slugify("Hello,  World!"), "hello-world")
        self.assertEqual(slugify("  -- Q3 report (final) --"), "q3-report-final")


if __name__ == "__main__":
    unittest.main()
