"""`manage.py mission_eval SUITE [--mode single|multi] [--budget TOKENS] [--tasks a,b]
[--profile NAME]`: run an evaluation suite of missions and print per task how it ended, the
oracle's verdict, tokens, cost and wall time, then the completion rate, tokens and cost per
completed task and the wall time. The last line is `mission_eval suite=… mode=… tasks=…
completed=… rate=… tokens_per_completed=… cost_per_completed=… wall_s=…`.

Each mission starts with the profile `--profile` names, or else the profile named as the suite
if there is one (`mission_eval research`: the research suite under the research profile).
`mission_eval --profiles` runs every profile's suite (the suite of its name) under it and ends
with a table per profile: completion and cost per completed task. Each task's outcome is kept
(`EvalOutcome`) for the Costs screen.

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

from missions.evals import outcomes, runner
from missions.evals.suite import MODES, SuiteError, load, shipped
from missions.models import Profile
from tools import registry

EVAL_DATA_DIR = "eval"  # `make eval`'s own data dir: migrated here, nobody else's runs in it


class Command(BaseCommand):
    help = "Run an evaluation suite of missions and print completion, tokens, cost and time."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "suite",
            nargs="?",
            help="A shipped suite's name (e.g. default) or a suite's directory.",
        )
        parser.add_argument(
            "--profile", help="The profile each mission starts with (default: the suite's name's)."
        )
        parser.add_argument(
            "--profiles",
            action="store_true",
            help="Every profile's suite under that profile, then a table per profile.",
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
        suite: str | None,
        mode: str,
        budget: str | None,
        tasks: str | None,
        any_database: bool,
        profile: str | None,
        profiles: bool,
        **options: Any,
    ) -> None:
        if (suite is None) == (not profiles) or (profiles and (profile or tasks)):
            raise CommandError(
                "Name a suite (with --profile, --tasks if you like), or give --profiles alone."
            )
        if mode not in MODES:
            raise CommandError(f"Unknown mode {mode!r}; modes: {', '.join(MODES)}.")
        cap = _budget(budget)
        names = None
        if tasks is not None:
            names = [name.strip() for name in tasks.split(",")]
            if not all(names):
                raise CommandError("--tasks is a comma-separated list of task names, none empty.")
        loaded, chosen = None, None
        if suite is not None:
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
            if loaded is None or chosen is None:
                self._every_profile(mode=mode, budget=cap)
                return
            applied = _profile(profile, default=loaded.name)
            runner.run_suite(
                loaded, chosen, mode=mode, budget=cap, say=self.stdout.write, profile=applied
            )
        except runner.ModeUnavailable as error:
            raise CommandError(str(error)) from None

    def _every_profile(self, *, mode: str, budget: int | None) -> None:
        """Each profile's suite under it, then the table per profile (`outcomes.table`)."""
        lines = []
        for profile in Profile.objects.order_by("name"):
            # Only a shipped suite of its name: never a folder that happens to be in the cwd.
            if profile.name not in shipped():
                lines.append(outcomes.Line(profile.name, "", skipped="no suite of its name"))
                continue
            try:
                suite = load(profile.name)
            except SuiteError as error:
                raise CommandError(str(error)) from None
            results = runner.run_suite(
                suite, suite.tasks, mode=mode, budget=budget, say=self.stdout.write, profile=profile
            )
            lines.append(outcomes.Line(profile.name, suite.name, tuple(results)))
        self.stdout.write("")
        self.stdout.write(
            "Per profile (the oracle's verdicts; cost: every mission's, per task done)"
        )
        for line in outcomes.table(lines):
            self.stdout.write(line)


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


def _profile(name: str | None, *, default: str) -> Profile | None:
    """The profile `--profile` names (refused when unknown), else the one named as the suite."""
    if name is None:
        return Profile.objects.filter(name=default).first()
    found = Profile.objects.filter(name=name).first()
    if found is None:
        known = ", ".join(Profile.objects.order_by("name").values_list("name", flat=True))
        raise CommandError(f"No profile {name!r}; profiles: {known or 'none'}.")
    return found


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
