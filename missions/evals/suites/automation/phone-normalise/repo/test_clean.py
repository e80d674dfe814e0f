import unittest

from clean import e164


class TestE164(unittest.TestCase):
    def test_national(self):
        self.assertEqual(e164("07700 900123"), "+447700900123")
        self.assertEqual(e164("(020) 7946-0018"), "+442079460018")

    def test_international(self):
        self.assertEqual(e164("+33 1 23 45 67 89"), "+33123456789")
        self.assertEqual(e164("0049 30 123456"), "+4930123456")


if __name__ == "__main__":
    unittest.main()
