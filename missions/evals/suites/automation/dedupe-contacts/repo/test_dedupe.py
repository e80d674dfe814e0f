import csv
import subprocess
import sys
import tempfile
import unittest


class TestDedupe(unittest.TestCase):
    def test_one_per_address(self):
        with tempfile.NamedTemporaryFile(suffix=".csv") as out:
            subprocess.run([sys.executable, "dedupe.py", "contacts.csv", out.name], check=True)
            rows = list(csv.DictReader(open(out.name, newline="")))
        self.assertEqual([row["name"] for row in rows], ["Ann Lee", "Bo Chen", "Cy Diaz"])


if __name__ == "__main__":
    unittest.main()
