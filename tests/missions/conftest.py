from __future__ import annotations

import pytest
from pytest_django import DjangoDbBlocker

from missions import catalog
from missions.models import ModelInfo, ModelPrice, RoleRoute


@pytest.fixture(autouse=True)
def seeded_catalog(django_db_blocker: DjangoDbBlocker) -> None:
    """Transactional tests flush every table, data migrations' rows included: seed again."""
    with django_db_blocker.unblock():
        catalog.seed(ModelPrice, ModelInfo, RoleRoute)
