"""`manage.py mission_eval SUITE [--mode single|multi] [--budget TOKENS] [--tasks a,b]`: run an
evaluation suite of missions and print per task how it ended, the oracle's verdict, tokens, cost
and wall time, then the completion rate, tokens and cost per completed task and the wall time.
The last line is `mission_eval suite=… mode=… tasks=… completed=… rate=… tokens_per_completed=…
cost_per_completed=… wall_s=…`.

Without a provider key the offline model plays each task's script; with one, the real model runs
the same goals. `--budget` caps each mission's tokens, the same for both modes.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.migrations.executor import MigrationExecutor

from missions.evals import runner
from missions.evals.suite import MODES, SuiteError, load
from tools import registry

EVAL_DATA_DIR = "eval"  # `make eval`'s own data dir: migrated here, nobody else's runs in it


class Command(BaseCommand):
    help = "Run an evaluation suite of missions and print completion, tokens, cost and time."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "suite", help="A shipped suite's name (e.g. default) or a suite's directory."
        )
        parser.add_argument(
            "--mode", default="single", help="single (one agent) or multi (a supervisor)."
        )
        parser.add_argument("--budget", help="Each mission's token cap (a positive integer).")
        parser.add_argument("--tasks", help="Only these tasks, comma-separated, in this order.")
        parser.add_argument(
            "--any-database",
            action="store_true",
            help="Run on the configured database even if it is not a dedicated eval one.",
        )

    def handle(
        self,
        *args: Any,
        suite: str,
        mode: str,
        budget: str | None,
        tasks: str | None,
        any_database: bool,
        **options: Any,
    ) -> None:
        if mode not in MODES:
            raise CommandError(f"Unknown mode {mode!r}; modes: {', '.join(MODES)}.")
        cap = _budget(budget)
        names = None
        if tasks is not None:
            names = [name.strip() for name in tasks.split(",")]
            if not all(names):
                raise CommandError("--tasks is a comma-separated list of task names, none empty.")
        try:
            loaded = load(suite)
            chosen = loaded.select(names)
        except SuiteError as error:
            raise CommandError(str(error)) from None
        if mode == "multi" and registry.TOOLS.get("delegate") is None:
            raise CommandError(
                "The multi mode needs the delegate tool (sub-agents), which is not available in"
                " this installation; run --mode single."
            )
        dedicated = settings.DATA_DIR.name == EVAL_DATA_DIR
        # It creates projects and missions, and its worker executes whatever is runnable: never
        # on the owner's data by accident.
        if not dedicated and not any_database:
            raise CommandError(
                f"The data dir is {settings.DATA_DIR}, not a dedicated evaluation one. Use `make"
                " eval` (AGENTOS_DATA_DIR=.data/eval), or pass --any-database."
            )
        if dedicated:
            call_command("migrate", verbosity=0, interactive=False)  # a new data dir is empty
        else:
            _require_migrated()  # else every task would fail on a missing table, one by one
        try:
            runner.run_suite(loaded, chosen, mode=mode, budget=cap, say=self.stdout.write)
        except runner.ModeUnavailable as error:
            raise CommandError(str(error)) from None


def _require_migrated() -> None:
    """Refuse a database this code's migrations are not all applied to (a new one has no
    tables): the owner's database is never migrated behind their back."""
    try:
        executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as error:
        raise CommandError(f"The database cannot be read: {error}") from None
    if not pending:
        return
    applied = len(executor.loader.applied_migrations)
    what = "has no tables" if not applied else f"lacks {len(pending)} migration(s)"
    raise CommandError(
        f"The database {what}: run `manage.py migrate` first, or use `make eval`, whose data dir"
        " (.data/eval) is migrated for it."
    )


def _budget(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text.replace("_", ""), 10)
    except ValueError:
        value = 0
    if value < 1:
        raise CommandError(f"--budget is a positive integer of tokens, not {text!r}.")
    return value
