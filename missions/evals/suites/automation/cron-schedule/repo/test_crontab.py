import unittest


def entries():
    found = {}
    with open("crontab") as handle:
        for line in handle:
            line = line.strip()
            if not line or line.startswith("#") or "=" in line.split()[0]:
                continue
            fields = line.split(None, 5)
            found[fields[5]] = fields[:5]
    return found


class TestCrontab(unittest.TestCase):
    def test_backup_daily(self):
        self.assertEqual(entries()["bin/backup.sh"], ["30", "2", "*", "*", "*"])

    def test_report_weekdays(self):
        self.assertEqual(entries()["bin/report.py"], ["0", "7", "*", "*", "1-5"])

    def test_poll_kept(self):
        self.assertEqual(entries()["bin/poll-inbox.sh"], ["*/15", "*", "*", "*", "*"])


if __name__ == "__main__":
    unittest.main()
