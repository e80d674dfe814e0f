from __future__ import annotations

import pytest
from django.test import Client
from pytest_django import DjangoDbBlocker

from missions import catalog
from missions.models import ModelInfo, ModelPrice, RoleRoute
from tests.factories import Owner, make_owner, verified_client


@pytest.fixture
def owner(db: None) -> Owner:
    return make_owner()


@pytest.fixture
def owner_client(owner: Owner) -> Client:
    return verified_client(owner)


@pytest.fixture
def seeded_catalog(django_db_blocker: DjangoDbBlocker) -> None:
    """Prices, catalog and routes as the migration seeds them: transactional tests flush every
    table, data migrations' rows included, so tests that need them seed again (idempotent)."""
    with django_db_blocker.unblock():
        catalog.seed(ModelPrice, ModelInfo, RoleRoute)
