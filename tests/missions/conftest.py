from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _catalog(seeded_catalog: None) -> None:
    """Every engine test prices its steps."""
