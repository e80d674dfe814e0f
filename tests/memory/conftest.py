from __future__ import annotations

from pathlib import Path

import pytest
from pytest_django.fixtures import Settings


@pytest.fixture(autouse=True)
def memory_dir(settings: Settings, tmp_path: Path) -> Path:
    """Each test its own memory repositories: the database is rolled back after a test, the
    repositories must go with it."""
    settings.MEMORY_DIR = tmp_path / "memory"
    return tmp_path / "memory"
