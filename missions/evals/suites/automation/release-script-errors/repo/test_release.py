import os
import subprocess
import unittest


def release(**env):
    return subprocess.run(["sh", "release.sh"], env={"PATH": os.environ["PATH"], **env},
                          capture_output=True, text=True)


class TestRelease(unittest.TestCase):
    def test_success(self):
        done = release(CHANNEL="stable")
        self.assertEqual(done.returncode, 0, done.stderr)
        with open("out/release.txt") as handle:
            self.assertEqual(handle.read(), "release 2.4.1 for stable\n")

    def test_failed_check_stops(self):
        done = release(CHANNEL="stable", CHECK_FAILS="1")
        self.assertNotEqual(done.returncode, 0)
        self.assertFalse(os.path.exists("out/release.txt"))

    def test_unset_variable_stops(self):
        done = release()
        self.assertNotEqual(done.returncode, 0)
        self.assertFalse(os.path.exists("out/release.txt"))


if __name__ == "__main__":
    unittest.main()
