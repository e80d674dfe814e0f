import re

VERSION = re.compile(r"(\d+).(\d+).(\d+)")


def parse_version(text):
    """(major, minor, patch) of "MAJOR.MINOR.PATCH"; ValueError for anything else."""
    found = VERSION.match(text)
    if found is None:
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(part) for part in found.groups())
