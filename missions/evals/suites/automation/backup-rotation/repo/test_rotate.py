import pathlib
import subprocess
import sys
import tempfile
import unittest

DAYS = ["2024-01-30", "2024-02-01", "2024-02-02", "2024-02-03", "2024-01-31"]


class TestRotate(unittest.TestCase):
    def test_keeps_newest(self):
        with tempfile.TemporaryDirectory() as folder:
            for day in DAYS:
                pathlib.Path(folder, f"backup-{day}.tar.gz").write_text(day)
            pathlib.Path(folder, "notes.txt").write_text("keep me")
            subprocess.run([sys.executable, "rotate.py", folder, "3"], check=True)
            left = sorted(p.name for p in pathlib.Path(folder).iterdir())
            self.assertEqual(left, [
                "backup-2024-02-01.tar.gz", "backup-2024-02-02.tar.gz",
                "backup-2024-02-03.tar.gz", "notes.txt",
            ])


if __name__ == "__main__":
    unittest.main()
