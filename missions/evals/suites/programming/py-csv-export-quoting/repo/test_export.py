import csv
import io
import unittest

from export import to_csv


class TestExport(unittest.TestCase):
    def test_round_trip(self):
        rows = [{"name": "Smith, Jane", "city": "Leeds"}, {"name": 'Bob "B" Ray', "city": "York"}]
        text = to_csv(rows, ["name", "city"])
        back = list(csv.DictReader(io.StringIO(text)))
        self.assertEqual(back, rows)

    def test_plain(self):
        self.assertEqual(to_csv([{"a": 1}], ["a"]), "a\n1\n")


if __name__ == "__main__":
    unittest.main()
