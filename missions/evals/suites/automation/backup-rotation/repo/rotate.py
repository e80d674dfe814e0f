"""rotate.py DIR KEEP: keep the KEEP newest backups in DIR, delete the rest."""

import pathlib
import sys


def rotate(folder, keep):
    folder = pathlib.Path(folder)
    names = sorted(p.name for p in folder.glob("backup-*.tar.gz"))
    for name in names[keep:]:
        (folder / name).unlink()


if __name__ == "__main__":
    rotate(sys.argv[1], int(sys.argv[2]))
