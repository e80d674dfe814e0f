"""The customers export."""


def to_csv(rows, header):
    lines = [",".join(header)]
    for row in rows:
        lines.append(",".join(str(row[name]) for name in header))
    return "\n".join(lines) + "\n"
