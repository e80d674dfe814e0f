import json
import subprocess
import sys
import tempfile
import unittest


class TestConvert(unittest.TestCase):
    def test_rows(self):
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            subprocess.run([sys.executable, "convert.py", "data/stock.csv", out.name], check=True)
            rows = json.load(open(out.name))
        self.assertEqual(len(rows), 3)
        self.assertEqual(rows[0], {"sku": "A-100", "name": "Bolt, M6", "qty": 1200, "price": 0.12})
        self.assertEqual(rows[2]["qty"], 15000)


if __name__ == "__main__":
    unittest.main()
