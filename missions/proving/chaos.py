"""The lab of the workspace chaos cases: coding runs (the agent program, the scripted model, a real
git worktree in the sandbox) whose worker processes SIGKILL themselves at crash points.

The cases, each in its module:

- `chaos_runs.shell_append_case`: a shell append killed after its effect and before its result
  leaves one line after the resume (the worktree is put back to its checkpoint before the
  replay);
- `chaos_runs.fork_case`: a fork from step N works in a worktree of its own equal to the
  checkpoint after step N (its worker killed right after making it, then mid-write), and the
  source's worktree is untouched;
- `chaos_runs.engine_bump_case`: the engine version bumped while a coding run is in flight (its
  worker killed mid-step): the new deployment parks it as "needs migration", a later one
  declaring the old journal compatible resumes it; never is it left unclaimed;
- `chaos_nodes.node_runner_case`: shell steps on three SSH nodes whose runners are SIGKILLed
  mid-step: each step is placed again elsewhere once its first attempt's writes are undone,
  applied once;
- `chaos_supervisor.supervisor_case`: the supervisor scenario (`missions.proving.scenarios`:
  readers, writers merged, a definition of done) killed at every step of its supervisor and
  inside its children ends as its crash-free twin did: no child spawned or run twice, no merge
  doubled.

They live above the kernel (they start missions and read worktrees, which the kernel must not
import); `manage.py chaos` finds them through `settings.CHAOS_CASES` and adds their kills and
violations to its report; tests/chaos/test_quick_matrix.py runs each on its own.

Each crash target is aimed by seq, and seqs depend on the engine's step layout: each case learns
them from a crash-free twin of its run (the program is deterministic), never from a constant.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.db import connection

from agentos.core import database, vault
from kernel import programs
from kernel.models import Run, RunStatus, Step
from kernel.proving.chaos import Report
from missions import demo, launch, projects
from tools import workspace

APPEND = "echo appended >> log.txt; wc -l < log.txt"
FINISH = {"text": "Finished."}
SCRIPTED = {"executor": {"provider": "scripted", "model": "scripted"}}
# The crash workers' lease: short, though a killed worker's runs are taken at once anyway (its
# death is proven, `kernel.holders`).
WORKER_OPTIONS = ("--lease", "2", "--poll", "0.2")
RUN_SECONDS = 90.0  # a coding run of a few scripted turns, from claim to end
PARK_SECONDS = 15.0  # a deployment's first claim cycles, from its start


class CaseFailed(Exception):
    """The case cannot go on (a deadline passed, a worker died unasked): one violation."""


def calls(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """One model turn calling these tools in order."""
    return {"tool_calls": [{"name": name, "arguments": args} for name, args in pairs]}


def shell(command: str) -> dict[str, Any]:
    return calls(("shell", {"command": command}))


@dataclass
class Lab:
    """One case's world: a fresh demo repository, the worker processes it started (stopped at
    the end, whatever happened), the runs it made, its report."""

    name: str
    report: Report
    say: Callable[[str], None]
    base: Path  # the demo repositories, where the sandbox users can reach them
    data: Path  # the workers' data dir: crash plans, fired markers, logs
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    run_ids: list[int] = field(default_factory=list)
    repo: Path = field(init=False)

    def __post_init__(self) -> None:
        self.repo = demo.create_repositories(self.base)

    def start(self, turns: list[dict[str, Any]]) -> Run:
        """A coding mission on the repository, its run playing `turns` (queued, not claimed)."""
        project = projects.create_project(
            name=f"chaos {self.name} {uuid.uuid4().hex[:8]}", repository=str(self.repo)
        )
        _, run = launch.create_mission(
            project=project,
            goal="Do as told.",
            routes=SCRIPTED,
            trigger="chaos",
            script={"turns": turns},
        )
        self.run_ids.append(run.pk)
        return run

    def worker(
        self,
        targets: Sequence[tuple[Run, str, int]] = (),
        *,
        engine: str | None = None,
        compatible: dict[str, list[str]] | None = None,
    ) -> subprocess.Popen[bytes]:
        """A kernel worker process that SIGKILLs itself at `targets` (run, crash point, seq);
        with `engine`, a worker of another deployment: that engine version, and `compatible`
        the earlier versions its programs declare they resume."""
        number = len(self.workers) + 1
        plan = self.data / f"plan-{number}.json"
        plan.write_text(
            json.dumps(
                {
                    "targets": [{"run": r.pk, "point": p, "seq": s} for r, p, s in targets],
                    "fired_dir": str(self.data / "fired"),
                }
            )
        )
        env = {
            **{k: v for k, v in os.environ.items() if k != "AGENTOS_LEASE_SECONDS"},
            "DJANGO_SETTINGS_MODULE": "agentos.settings",
            "DATABASE_URL": database.build_url(connection.settings_dict),
            "AGENTOS_DATA_DIR": str(self.data),
            # The worktrees are this process's (the command's or the test's), not the data dir's.
            "AGENTOS_WORKSPACES_DIR": str(workspace.root()),
            "KERNEL_CRASHPLAN": str(plan),
        }
        if engine is None:
            argv = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "kernel_worker"]
        else:
            declared = json.dumps({"engine": engine, "compatible": compatible or {}})
            argv = [sys.executable, "-c", DEPLOYMENT, declared]
        with (self.data / f"worker-{number}.log").open("wb") as log:
            process = subprocess.Popen(  # noqa: S603  # this interpreter, our arguments
                [*argv, *WORKER_OPTIONS],
                cwd=settings.BASE_DIR,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.workers.append(process)
        return process

    def killed(self, process: subprocess.Popen[bytes], where: str) -> None:
        """Wait for `process` to SIGKILL itself at its crash point: one kill."""
        try:
            code = process.wait(timeout=RUN_SECONDS)
        except subprocess.TimeoutExpired:
            raise CaseFailed(f"no worker died {where} within {RUN_SECONDS:.0f} s") from None
        if code != -signal.SIGKILL:
            raise CaseFailed(f"the worker meant to die {where} exited {code}{self.log(process)}")
        self.report.kills += 1

    def finish(
        self, run: Run, process: subprocess.Popen[bytes], *, seconds: float = RUN_SECONDS
    ) -> Run:
        """Wait for `run` to end on `process`, then stop the worker."""
        self.until(
            f"run {run.pk} to end",
            lambda: Run.objects.filter(pk=run.pk, finished_at__isnull=False).exists(),
            process,
            timeout=seconds,
        )
        self.stop(process)
        run.refresh_from_db()
        return run

    def until(
        self,
        what: str,
        condition: Callable[[], bool],
        process: subprocess.Popen[bytes],
        *,
        timeout: float,
    ) -> None:
        """Poll the database (there is no event to await across processes) until `condition`,
        while `process` lives, for at most `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while not condition():
            if process.poll() is not None:
                raise CaseFailed(
                    f"waiting for {what}: the worker exited {process.returncode}{self.log(process)}"
                )
            if time.monotonic() >= deadline:
                raise CaseFailed(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.05)

    def stop(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def log(self, process: subprocess.Popen[bytes]) -> str:
        path = self.data / f"worker-{self.workers.index(process) + 1}.log"
        tail = path.read_text(errors="replace")[-1500:] if path.exists() else ""
        return f"; its log ends:\n{tail}" if tail else ""

    def expect(self, condition: bool, violation: str) -> None:
        if not condition:
            self.report.violations.append(violation)


@contextmanager
def lab(name: str, say: Callable[[str], None]) -> Iterator[Lab]:
    """A case's `Lab`; a failure to go on is one violation, and every worker is stopped."""
    report = Report()
    data = Path(tempfile.mkdtemp(prefix=f"agentos-chaos-{name.replace(' ', '-')}-"))
    (data / "fired").mkdir()
    # The workers read what this process's vault encrypted (the cluster's SSH key): same keys,
    # made now if this data dir has none yet (else each worker would make keys of its own).
    vault.ensure()
    keys = Path(settings.DATA_DIR) / vault.FILE_NAME
    if keys.exists():
        shutil.copy2(keys, data / vault.FILE_NAME)
    base = workspace.root() / "chaos" / uuid.uuid4().hex[:8]
    case = Lab(name=name, report=report, say=say, base=base, data=data)
    started = time.monotonic()
    try:
        yield case
    except CaseFailed as failure:
        report.violations.append(str(failure))
    except Exception as error:  # a case that broke is a violation: make chaos reports the rest
        report.violations.append(f"the case broke: {error!r}")
    finally:
        for process in case.workers:
            case.stop(process)
        report.runs = len(case.run_ids)
        report.steps = Step.objects.filter(run_id__in=case.run_ids).count()
        # Every step of a run that ended has its result: nothing was left half-recorded.
        for step in Step.objects.filter(
            run_id__in=case.run_ids, run__status=RunStatus.DONE, finished_at__isnull=True
        ):
            report.violations.append(f"run {step.run_id} step {step.seq} has no result")
        say(f"{name}: {report.line()} ({time.monotonic() - started:.0f} s)")
        shutil.rmtree(base, ignore_errors=True)  # the runs ended: their repository can go
        if report.violations:
            say(f"{name}: the workers' plans and logs are kept in {data}")
        else:
            shutil.rmtree(data, ignore_errors=True)


def seqs(run: Run, name: str) -> list[int]:
    return list(
        Step.objects.filter(run=run, name=name).order_by("seq").values_list("seq", flat=True)
    )


def tool_outputs(run: Run, name: str) -> list[str]:
    results = (
        Step.objects.filter(run=run, name=name).order_by("seq").values_list("result", flat=True)
    )
    return [str(r.get("output", "")) if isinstance(r, dict) else "" for r in results]


# --- Workers of another engine version (`chaos_runs.engine_bump_case`) ---------------------------

# A worker of another deployment: `python -c DEPLOYMENT '{"engine": ..., "compatible": ...}'
# <kernel_worker options>` (the engine version is code, not configuration: only a process of its
# own can run another one).
DEPLOYMENT = (
    "import sys, django; django.setup(); from missions.proving import chaos;"
    " chaos.deployment_worker(sys.argv[1:])"
)


def deployment_worker(argv: list[str]) -> None:
    """The kernel loop of the deployment `argv[0]` declares (JSON: its engine version, and the
    earlier versions each program resumes); `argv[1:]` are kernel_worker's options."""
    declared = json.loads(argv[0])
    programs.ENGINE_VERSION = str(declared["engine"])
    for name, versions in declared["compatible"].items():
        # What that deployment's `programs.COMPATIBLE.add(...)` would say.
        programs.COMPATIBLE.add(name, frozenset(versions))
    call_command("kernel_worker", *argv[1:])
