import json
import subprocess
import sys
import unittest


class TestSummary(unittest.TestCase):
    def test_counts(self):
        subprocess.run([sys.executable, "summarize.py"], check=True)
        with open("out/summary.json") as handle:
            counts = json.load(handle)
        self.assertEqual(
            {k: v for k, v in counts.items() if v},
            {"DEBUG": 1, "INFO": 3, "WARNING": 1, "ERROR": 2, "CRITICAL": 1},
        )


if __name__ == "__main__":
    unittest.main()
