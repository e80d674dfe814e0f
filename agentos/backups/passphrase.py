"""The owner's passphrase: from `AGENTOS_BACKUP_PASSPHRASE`, else asked in a terminal, never
on the command line (every user of the machine reads argv)."""

from __future__ import annotations

import getpass
import os
import sys

from agentos.backups.schedule import PASSPHRASE_ENV


def obtain(*, confirm: bool) -> str | None:
    given = os.environ.get(PASSPHRASE_ENV)
    if given:
        return given
    if not sys.stdin.isatty():
        return None
    first = getpass.getpass("Backup passphrase: ")
    if confirm and first and getpass.getpass("Again: ") != first:
        return None
    return first
