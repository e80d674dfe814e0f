import subprocess
import sys
import unittest


def check(threshold):
    return subprocess.run([sys.executable, "check_disk.py", "samples/df.txt", str(threshold)],
                          capture_output=True, text=True)


class TestCheckDisk(unittest.TestCase):
    def test_alerts(self):
        done = check(80)
        self.assertEqual(done.returncode, 1)
        self.assertEqual(done.stdout.splitlines(), ["ALERT / 90%", "ALERT /run 80%"])

    def test_quiet(self):
        done = check(95)
        self.assertEqual((done.returncode, done.stdout), (0, ""))


if __name__ == "__main__":
    unittest.main()
