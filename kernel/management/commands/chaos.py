"""`manage.py chaos` (`make chaos`): the long chaos run of the kernel.

0. The in-process crash sweep (`kernel.proving.sweep`): seeded workloads crashed at every crash
   point of the commit path in turn, at least `--sweep-points` of them, the invariants checked
   after each; `--sweep-seed S --sweep-point K` replays one workload up to its K-th crash.
1. The full matrix: every crash point at every workflow step it applies to, one run per worker,
   every target must fire.
2. Seeded random rounds until at least `--min-kills` kills: several runs per worker (so one
   crash also kills the others mid-step), random targets, workers SIGSTOPped past their leases,
   and the database stopped abruptly and restarted once per round.
3. A takeover: two workers with the default 30 s lease, the one executing a run SIGKILLed
   mid-step; the other must resume the run within `TAKEOVER_LIMIT_SECONDS`.
4. The cases of the apps above the kernel (`settings.CHAOS_CASES`: a shell append killed
   before its result, a fork's own worktree, an engine version bumped mid-run), each with its
   own workers, kills and checks.

Prints a report; the last line is `chaos kills=N steps=N crash_points=N violations=N`; exits 1 on
a violation.
"""

from __future__ import annotations

import random
import signal
import sys
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kernel import proving
from kernel.proving.chaos import QUICK_MATRIX, Report, Target, cases, full_matrix
from kernel.proving.harness import TAKEOVER_LIMIT_SECONDS, run_chaos, run_takeover
from kernel.proving.sweep import MODES, sweep

SWEEP_POINTS = 10_000
QUICK_SWEEP_POINTS = 1_000


class Command(BaseCommand):
    help = "Kill kernel workers at every crash point and check that no step is lost or doubled."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--quick", action="store_true", help="Only the quick matrix.")
        parser.add_argument("--seed", type=int, default=None, help="Seed of the random rounds.")
        parser.add_argument("--min-kills", type=int, default=200)
        parser.add_argument("--workers", type=int, default=3)
        parser.add_argument("--no-database-restart", action="store_true")
        parser.add_argument(
            "--no-cases", action="store_true", help="Skip the cases of settings.CHAOS_CASES."
        )
        parser.add_argument(
            "--case",
            action="append",
            dest="only",
            metavar="NAME",
            help="Run only this case of settings.CHAOS_CASES (repeatable), nothing else.",
        )
        parser.add_argument("--no-sweep", action="store_true", help="Skip the crash sweep.")
        parser.add_argument(
            "--sweep-points",
            type=int,
            default=None,
            help=f"Crash points of the sweep ({SWEEP_POINTS}; {QUICK_SWEEP_POINTS} with --quick).",
        )
        parser.add_argument(
            "--sweep-seed", type=int, default=None, help="The sweep's first workload (--seed)."
        )
        parser.add_argument(
            "--sweep-point",
            type=int,
            default=None,
            metavar="K",
            help="Replay workload --sweep-seed up to its K-th crash only, nothing else.",
        )
        parser.add_argument("--sweep-mode", choices=MODES, default="chain")

    def handle(
        self,
        *args: Any,
        quick: bool,
        seed: int | None,
        min_kills: int,
        workers: int,
        no_database_restart: bool,
        no_cases: bool,
        only: list[str] | None,
        no_sweep: bool,
        sweep_points: int | None,
        sweep_seed: int | None,
        sweep_point: int | None,
        sweep_mode: str,
        **options: Any,
    ) -> None:
        if workers < 1 or min_kills < 0:
            raise CommandError("--workers must be at least 1 and --min-kills at least 0.")
        if sweep_point is not None and (sweep_seed is None or sweep_point < 0):
            raise CommandError("--sweep-point K replays a workload: give its --sweep-seed too.")
        if sweep_points is not None and sweep_points < 0:
            raise CommandError("--sweep-points must be at least 0.")
        known = dict(cases())
        if unknown := sorted(set(only or ()) - set(known)):
            raise CommandError(
                f"No chaos case named {', '.join(unknown)}: the cases are {', '.join(known)}."
            )
        # SIGTERM ends the command as Ctrl-C does: the harness stops its workers and the
        # embedded database it restarted is stopped at exit (without a handler, Python would
        # die at once and skip both).
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        proving.register()  # the workload's runs are started here, then run by proving_workers
        proving.register_extensions()  # the sweep's operations of the apps above the kernel
        # The chaos workload runs on its own data dir (see `make chaos`): bring its schema up.
        call_command("migrate", interactive=False, verbosity=0)
        seed = seed if seed is not None else random.SystemRandom().randrange(1_000_000)
        total = Report()
        sweep_seed = sweep_seed if sweep_seed is not None else seed
        if sweep_point is not None:
            self._sweep(total, points=1, seed=sweep_seed, mode=sweep_mode, only=sweep_point)
            self._conclude(total, seed)
            return
        if only:
            for name in only:
                total.add(known[name](say=self.stdout.write), name)
            self._conclude(total, seed)
            return
        if not no_sweep:
            default = QUICK_SWEEP_POINTS if quick else SWEEP_POINTS
            points = sweep_points if sweep_points is not None else default
            self._sweep(total, points=points, seed=sweep_seed, mode=sweep_mode)
        rounds = [("quick matrix", QUICK_MATRIX)] if quick else [("full matrix", full_matrix())]
        for name, targets in rounds:
            self._round(
                total,
                name,
                targets,
                workers=workers,
                seed=seed,
                runs_per_worker=1,
                strict=True,
                disrupt=False,
                restart_db=False,
            )
        rng = random.Random(seed)  # noqa: S311  # reproducible chaos, not secrets
        round_number = 0
        while not quick and total.kills < min_kills:
            round_number += 1
            targets = rng.choices(full_matrix(), k=40)
            self._round(
                total,
                f"random round {round_number}",
                targets,
                workers=workers,
                seed=rng.randrange(1_000_000),
                runs_per_worker=6,
                strict=False,
                disrupt=True,
                restart_db=not no_database_restart,
            )
        self._takeover(total)
        for name, case in () if no_cases else cases():
            total.add(case(say=self.stdout.write), name)
        self._conclude(total, seed)

    def _conclude(self, total: Report, seed: int) -> None:
        self.stdout.write(
            f"seed={seed} runs={total.runs} pauses={total.pauses}"
            f" database_restarts={total.database_restarts}"
        )
        for violation in total.violations:
            self.stdout.write(self.style.ERROR(f"VIOLATION {violation}"))
        self.stdout.write(total.line())
        if total.violations:
            sys.exit(1)

    def _sweep(
        self, total: Report, *, points: int, seed: int, mode: str, only: int | None = None
    ) -> None:
        report = sweep(points=points, seed=seed, mode=mode, only=only, say=self.stdout.write)
        extra = (
            f", {report.extra_workloads} twins with extensions" if report.extra_workloads else ""
        )
        self.stdout.write(
            f"sweep ({mode}): {report.crash_points} crash points of {report.workloads} workloads"
            f" (seeds {seed}..{report.last_seed}{extra}) in {report.seconds:.0f} s"
            f" ({report.rate:.0f}/s), {len(report.violations)} violations"
        )
        self.stdout.write(
            "sweep deaths by point: "
            + ", ".join(f"{point} {count}" for point, count in sorted(report.by_point.items()))
        )
        total.add(report, "sweep")

    def _takeover(self, total: Report) -> None:
        takeover = run_takeover()
        self.stdout.write(
            f"takeover: run resumed {takeover.seconds:.1f} s after its worker was killed"
            f" (limit {TAKEOVER_LIMIT_SECONDS:.0f} s)"
        )
        total.kills += 1
        total.runs += 1
        if takeover.seconds >= TAKEOVER_LIMIT_SECONDS:
            total.violations.append(
                f"takeover: {takeover.seconds:.1f} s after the kill (limit"
                f" {TAKEOVER_LIMIT_SECONDS:.0f} s)"
            )
        if takeover.finished_by != takeover.survivor:
            total.violations.append("takeover: the run was not finished by the surviving worker")

    def _round(
        self,
        total: Report,
        name: str,
        targets: list[Target],
        *,
        workers: int,
        seed: int,
        runs_per_worker: int,
        strict: bool,
        disrupt: bool,
        restart_db: bool,
    ) -> None:
        report = run_chaos(
            targets,
            workers=workers,
            seed=seed,
            runs_per_worker=runs_per_worker,
            require_every_target=strict,
            timeout=600,
            pause_every=3.0 if disrupt else None,
            restart_database_after=4.0 if restart_db else None,
            say=self.stdout.write,
        )
        self.stdout.write(f"{name}: {report.line()} (targets fired {report.targets_fired})")
        total.add(report, name)
