"""The real product stack (`manage.py serve`: daphne + huey workers) against the test database."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from agentos.core import database
from tests.polling import wait_for

BASE_DIR = Path(settings.BASE_DIR)
READY_LINE = "agentos is up at"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Stack:
    url: str
    process: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)

    def pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            if READY_LINE in line:
                self.ready.set()
        self.ready.set()  # the process ended: stop waiting

    def health(self) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/health", timeout=5) as answer:  # noqa: S310
                return json.loads(answer.read())  # type: ignore[no-any-return]
        except urllib.error.HTTPError as error:  # 503 while degraded still carries the report
            return json.loads(error.read())  # type: ignore[no-any-return]

    def wait_for_workers(self, timeout: float = 60) -> dict[str, Any]:
        """Poll health until a worker has beaten; workers report as soon as they start."""
        try:
            return wait_for(
                lambda: (report := self.health())["workers"]["state"] == "up" and report,
                timeout=timeout,
                message="a worker to beat",
                interval=0.2,
            )
        except pytest.fail.Exception as failed:  # what the stack said is why
            pytest.fail(f"{failed}\n{self.log()}")

    def log(self) -> str:
        return "".join(self.output[-200:])


@contextmanager
def running_stack(data_dir: Path, *, workers: int = 1, demo: bool = False) -> Iterator[Stack]:
    """Start `manage.py serve` on a free port; stop it with Ctrl-C (SIGINT) on exit.

    Without `demo`, the first start creates no demo mission.

    The caller's data must be committed (transactional tests): the stack runs in other processes.
    """
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.live_settings",  # the product's, with the chaos programs
        "DATABASE_URL": database.build_url(connection.settings_dict),
        "AGENTOS_DATA_DIR": str(data_dir),
        "PYTHONUNBUFFERED": "1",
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "serve",
            "--port",
            str(port),
            "--workers",
            str(workers),
            *([] if demo else ["--no-demo"]),
        ],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    stack = Stack(url=f"http://127.0.0.1:{port}", process=process)
    threading.Thread(target=stack.pump, daemon=True).start()
    try:
        if not stack.ready.wait(timeout=90) or process.poll() is not None:
            raise RuntimeError(f"the stack did not start:\n{stack.log()}")
        yield stack
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise RuntimeError(f"the stack did not stop on SIGINT:\n{stack.log()}") from None


def crash_env(tmp_path: Path, targets: list[dict[str, Any]], **extra: str) -> dict[str, str]:
    """The environment of a worker process that SIGKILLs itself at `targets` (`run`, `point`,
    `seq`: see `kernel.crashpoints`), on this test's database, with `extra` variables."""
    plan = tmp_path / "plan.json"
    (tmp_path / "fired").mkdir(exist_ok=True)
    plan.write_text(json.dumps({"targets": targets, "fired_dir": str(tmp_path / "fired")}))
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentos.settings",
        "DATABASE_URL": database.build_url(connection.settings_dict),
        "AGENTOS_DATA_DIR": str(tmp_path),
        "KERNEL_CRASHPLAN": str(plan),
        **extra,
    }
