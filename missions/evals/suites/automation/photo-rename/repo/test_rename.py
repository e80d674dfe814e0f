import pathlib
import subprocess
import sys
import tempfile
import unittest


class TestRename(unittest.TestCase):
    def test_names(self):
        with tempfile.TemporaryDirectory() as folder:
            for name in ("IMG_20240312_101500.jpg", "IMG_20231231_235959.jpg", "notes.txt"):
                pathlib.Path(folder, name).write_text(name)
            subprocess.run([sys.executable, "rename.py", folder], check=True)
            names = sorted(p.name for p in pathlib.Path(folder).iterdir())
        self.assertEqual(names, ["2023-12-31_235959.jpg", "2024-03-12_101500.jpg", "notes.txt"])


if __name__ == "__main__":
    unittest.main()
