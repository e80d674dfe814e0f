"""dedupe.py IN.csv OUT.csv: one row per e-mail address, the first seen."""

import csv
import sys


def dedupe(source, target):
    seen = set()
    with open(source, newline="") as handle:
        reader = csv.DictReader(handle)
        fields = reader.fieldnames
        rows = []
        for row in reader:
            key = row["email"]
            if key in seen:
                continue
            seen.add(key)
            rows.append(row)
    with open(target, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    dedupe(sys.argv[1], sys.argv[2])
