"""rename.py DIR: IMG_20240312_101500.jpg -> 2024-03-12_101500.jpg; other files untouched."""

import pathlib
import re
import sys

CAMERA = re.compile(r"^IMG_(\d{4})(\d{2})(\d{2})_(\d{6})\.jpg$")


def rename(folder):
    for path in sorted(pathlib.Path(folder).iterdir()):
        m = CAMERA.match(path.name)
        if m:
            path.rename(path.with_name(f"{m[1]}-{m[3]}-{m[2]}_{m[4]}.jpg"))


if __name__ == "__main__":
    rename(sys.argv[1])
