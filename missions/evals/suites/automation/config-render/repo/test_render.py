import json
import subprocess
import sys
import tempfile
import unittest


def run(values):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(values, handle)
    return subprocess.run([sys.executable, "render.py", "nginx.conf.tmpl", handle.name],
                          capture_output=True, text=True)


class TestRender(unittest.TestCase):
    def test_all_values(self):
        done = run({"port": 8080, "host": "shop.example", "root": "/srv/shop"})
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("listen 8080;", done.stdout)
        self.assertIn("server_name shop.example;", done.stdout)

    def test_missing_value_fails(self):
        done = run({"port": 8080})
        self.assertEqual(done.returncode, 1)
        self.assertIn("host", done.stderr)
        self.assertIn("root", done.stderr)
        self.assertEqual(done.stdout, "")


if __name__ == "__main__":
    unittest.main()
