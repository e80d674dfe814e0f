from __future__ import annotations

import pytest
from django.test import Client

from tests.factories import Owner, make_owner, verified_client


@pytest.fixture
def owner(db: None) -> Owner:
    return make_owner()


@pytest.fixture
def owner_client(owner: Owner) -> Client:
    return verified_client(owner)
