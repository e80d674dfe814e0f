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
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
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
    data_dir: Path | None = None  # its AGENTOS_DATA_DIR, when `running_stack` started it

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
def running_stack(
    data_dir: Path,
    *,
    workers: int = 1,
    demo: bool = False,
    extra_env: dict[str, str] | None = None,
) -> Iterator[Stack]:
    """Start `manage.py serve` on a free port; stop it with Ctrl-C (SIGINT) on exit.

    Without `demo`, the first start creates no demo mission. A stack kept across tests
    (`KeptStack`) is stopped first: two stacks on one database would claim each other's runs.

    The caller's data must be committed (transactional tests): the stack runs in other processes.
    """
    KeptStack.stop_current()
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.live_settings",  # the product's, with the chaos programs
        "DATABASE_URL": database.build_url(connection.settings_dict),
        "AGENTOS_DATA_DIR": str(data_dir),
        "PYTHONUNBUFFERED": "1",
        **(extra_env or {}),
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
    stack = Stack(url=f"http://127.0.0.1:{port}", process=process, data_dir=data_dir)
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


class KeptStack:
    """One stack kept from test to test (the browser tests'), instead of one started (~8 s) and
    stopped (~3 s) for each: each test's rows are its own, flushed after it, and the stack keeps
    none of them. Started on first use, from a test whose owner is committed (`serve` would
    otherwise create one); stopped by `close()`, or as soon as a test starts a stack of its own
    (`running_stack`), whose environment or data directory this one does not have."""

    # At most one per process: the one `running_stack` stops.
    _current: KeptStack | None = None
    # Its workers beat every 2 s, not every 15: after the flush that ends a test has deleted
    # their beats, health says "up" again within 2 s (`Stack.wait_for_workers`).
    ENV = {"AGENTOS_WORKER_BEAT": "2"}

    def __init__(self, data_dirs: Callable[[], Path]) -> None:
        self._data_dirs = data_dirs
        self._running: ExitStack | None = None
        self._stack: Stack | None = None

    def get(self) -> Stack:
        """The running stack, started if need be, its workers beating on this test's database."""
        if self._stack is not None and self._stack.process.poll() is not None:
            said = self._stack.log()
            self.close()
            pytest.fail(f"the stack kept across tests died:\n{said}")
        if self._stack is None:
            running = ExitStack()
            self._stack = running.enter_context(
                running_stack(self._data_dirs(), extra_env=self.ENV)
            )
            self._running = running
            KeptStack._current = self
        self._stack.wait_for_workers()
        return self._stack

    def close(self) -> None:
        running, self._running, self._stack = self._running, None, None
        if KeptStack._current is self:
            KeptStack._current = None
        if running is not None:
            running.close()

    @classmethod
    def stop_current(cls) -> None:
        if cls._current is not None:
            cls._current.close()


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
