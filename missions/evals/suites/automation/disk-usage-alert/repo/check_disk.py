"""check_disk.py DF_OUTPUT THRESHOLD: alert on filesystems at or above THRESHOLD % used."""

import sys


def alerts(text, threshold):
    found = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        use = fields[4]
        if use == threshold:
            found.append(f"ALERT {fields[5]} {fields[4].rstrip('%')}%")
    return found


if __name__ == "__main__":
    lines = alerts(open(sys.argv[1]).read(), int(sys.argv[2]))
    for line in lines:
        print(line)
    sys.exit(1 if lines else 0)
