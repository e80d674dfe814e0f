import unittest

from users import display_name


class DisplayNameTest(unittest.TestCase):
    def test_nickname_wins(self):
        user = {"first": "Ada", "last": "Lovelace", "nickname": " ada "}
        self.assertEqual(display_name(user), "ada")

    def test_blank_nickname(self):
        user = {"first": "Ada", "last": "Lovelace", "nickname": "   "}
        self.assertEqual(display_name(user), "Ada Lovelace")

    def test_none_nickname(self):
        user = {"first": "Alan", "last": "Turing", "nickname": None}
        self.assertEqual(display_name(user), "Alan Turing")

    def test_missing_nickname(self):
        self.assertEqual(display_name({"first": "Grace", "last": "Hopper"}), "Grace Hopper")


if __name__ == "__main__":
    unittest.main()
