import unittest

from fields import truncate_utf8


class TruncateTest(unittest.TestCase):
    def test_ascii(self):
        self.assertEqual(truncate_utf8("hello world", 5), "hello")

    def test_fits_whole(self):
        self.assertEqual(truncate_utf8("naïve café", 100), "naïve café")

    def test_never_cuts_a_character_in_half(self):
        self.assertEqual(truncate_utf8("héllo", 2), "h")

    def test_cjk(self):
        self.assertEqual(truncate_utf8("日本語", 7), "日本")

    def test_result_fits(self):
        for limit in range(12):
            self.assertLessEqual(len(truncate_utf8("Grüße, Zoë", limit).encode()), limit)


if __name__ == "__main__":
    unittest.main()
