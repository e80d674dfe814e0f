"""The product settings, plus the proving workloads: what the processes of a live stack a test
starts (`tests.live.running_stack`) run with, so its workers know the chaos programs too."""

from __future__ import annotations

from agentos.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "kernel.proving.apps.ProvingConfig"]  # noqa: F405
