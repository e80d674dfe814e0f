import unittest

from tags import add_tag


class AddTagTest(unittest.TestCase):
    def test_new_list_each_time(self):
        self.assertEqual(add_tag("Red"), ["red"])
        self.assertEqual(add_tag("Blue"), ["blue"])

    def test_given_list(self):
        self.assertEqual(add_tag(" Green ", ["red"]), ["red", "green"])

    def test_no_leak_after_a_given_list(self):
        add_tag("x", ["a"])
        self.assertEqual(add_tag("y"), ["y"])


if __name__ == "__main__":
    unittest.main()
