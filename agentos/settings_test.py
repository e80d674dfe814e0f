"""Test settings: the product settings on a separate embedded database, with fast hashing."""

from __future__ import annotations

import os
from pathlib import Path

# Tests never touch the owner's data: their embedded server lives in its own folder.
os.environ.setdefault(
    "AGENTOS_DATA_DIR", str(Path(__file__).resolve().parent.parent / ".data" / "test")
)
# Parallel test workers (pytest-xdist) each get a data dir of their own, so their own embedded
# server, memory repositories and worktrees: run ids restart in every test database, and two runs
# numbered alike must not share a folder.
# Once: the processes a test starts (workers, daphne) inherit both variables, and must share
# their test's folder.
worker = os.environ.get("PYTEST_XDIST_WORKER")
if worker and not os.environ["AGENTOS_DATA_DIR"].endswith(f"-{worker}"):
    os.environ["AGENTOS_DATA_DIR"] = f"{os.environ['AGENTOS_DATA_DIR']}-{worker}"

from agentos.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# In-process tests use the in-memory layer: channels-postgres opens its own connection to the
# database named in its CONFIG, which is not the test database. The browser tests run the real
# stack (daphne, workers, PostgreSQL layer) in subprocesses against the test database.
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
# The in-memory layer's queues belong to the caller's event loop: send from the caller's thread.
DOORBELLS_IN_BACKGROUND = False

# django-otp refuses a correct token sent within 2^(n-1) s of n failures; tests that are not about
# throttling must not sleep for it. Our own sign-in limiter still applies.
OTP_TOTP_THROTTLE_FACTOR = 0
OTP_STATIC_THROTTLE_FACTOR = 0

# Unit tests call task bodies inline; the worker pool itself is exercised by the browser tests.
HUEY = {**HUEY, "immediate": True}  # noqa: F405
