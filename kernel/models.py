"""Kernel state: accounts, runs, their journaled steps, durable waits, events, artifacts, budgets.

Journal rows (steps, events) are written only by `kernel.journal`; run scheduling fields only by
`kernel.scheduler` and `kernel.leases`. Every write made on behalf of an executing run is
conditional on the run's fencing token (see `kernel.leases`).
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class RunStatus(models.TextChoices):
    QUEUED = "queued", _("queued")
    RUNNING = "running", _("running")
    WAITING = "waiting", _("waiting")
    DONE = "done", _("done")
    PARTIAL = "partial", _("partial")
    BLOCKED = "blocked", _("blocked")
    FAILED = "failed", _("failed")
    CANCELLED = "cancelled", _("cancelled")
    BUDGET_EXHAUSTED = "budget_exhausted", _("budget exhausted")


TERMINAL = frozenset(
    {
        RunStatus.DONE,
        RunStatus.PARTIAL,
        RunStatus.BLOCKED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.BUDGET_EXHAUSTED,
    }
)


class StepKind(models.TextChoices):
    MODEL_CALL = "model_call"
    TOOL_CALL = "tool_call"
    SPAWN = "spawn"
    JOIN = "join"
    WAIT_HUMAN = "wait_human"
    TIMER = "timer"
    COMPACTION = "compaction"
    CHECKPOINT = "checkpoint"
    VERDICT = "verdict"


class Effect(models.TextChoices):
    """What replaying a step whose result was never recorded does to the world.

    docs/design.md §7 says how each class is replayed."""

    READ = "read"
    IDEMPOTENT_WRITE = "idempotent_write"
    NON_IDEMPOTENT = "non_idempotent"
    MODEL_CALL = "model_call"


class Account(models.Model):
    """What a group of run trees is charged to and held to: budget caps over all of them, their
    spend, and how many may execute at once. The kernel enforces it; an application gives each
    of its units of work one (the owner's missions are accounts)."""

    # Caps over every run of the account; null means no cap.
    max_tokens = models.PositiveBigIntegerField(_("max tokens"), null=True, blank=True)
    max_usd_micros = models.PositiveBigIntegerField(
        _("max spend (micro-dollars)"), null=True, blank=True
    )
    max_turns = models.PositiveIntegerField(_("max turns"), null=True, blank=True)
    max_tool_calls = models.PositiveIntegerField(_("max tool calls"), null=True, blank=True)
    # Not a cap over the account's runs together: each root run started for it gets it as its
    # own duration cap (`Run.max_seconds`, its tree's wall time from its start).
    max_seconds = models.PositiveIntegerField(_("max wall time (seconds)"), null=True, blank=True)
    max_concurrent_runs = models.PositiveSmallIntegerField(_("max concurrent runs"), default=12)

    def __str__(self) -> str:
        return f"account {self.pk}"

    @property
    def is_capped(self) -> bool:
        return any(
            cap is not None
            for cap in (self.max_tokens, self.max_usd_micros, self.max_turns, self.max_tool_calls)
        )

    def spent(self) -> dict[str, int]:
        """What the account's runs spent: the sum of its root runs, whose ledgers already count
        their subtrees (one source of truth, nothing to keep in step)."""
        totals = Run.objects.filter(account_id=self.pk, parent__isnull=True).aggregate(
            tokens=models.Sum(
                models.F("input_tokens")
                + models.F("output_tokens")
                + models.F("cache_read_tokens")
                + models.F("cache_write_tokens")
            ),
            usd_micros=models.Sum("usd_micros"),
            turns=models.Sum("turns"),
            tool_calls=models.Sum("tool_calls"),
        )
        return {name: int(value or 0) for name, value in totals.items()}


class Run(models.Model):
    """One agent instance, root or sub-agent. Runs form a tree (depth limited by the scheduler)."""

    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="runs")
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    root = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # Ancestor ids, root first: budget debits walk up the tree without recursive queries.
    ancestors = models.JSONField(default=list, blank=True)
    depth = models.PositiveSmallIntegerField(default=0)
    spawned_by_seq = models.PositiveIntegerField(null=True, blank=True)

    program = models.CharField(max_length=100)  # a name in kernel.programs' registry
    input = models.JSONField(default=dict, blank=True)
    contract = models.JSONField(default=dict, blank=True)
    model = models.CharField(max_length=100, blank=True)
    workspace = models.CharField(max_length=500, blank=True)
    engine_version = models.CharField(max_length=40, blank=True)
    # Recorded by an earlier engine version that no program here resumes: parked, claimed only to
    # end it if asked to stop, until the owner restarts, forks or stops it (`kernel.versions`).
    # A database default too: a worker of the previous version still inserts runs without it.
    needs_migration = models.BooleanField(default=False, db_default=False)
    # The rule of two (`kernel.exposure`): which of its three flags this run set, by which step.
    exposure = models.JSONField(default=dict, blank=True)
    prompt_hash = models.CharField(max_length=64, blank=True)
    tools_hash = models.CharField(max_length=64, blank=True)

    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    output = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)

    # Scheduling: claimable when status is queued/running, runnable_at has passed, and the lease
    # (if any) has expired. `fence` grows by one at each claim.
    runnable_at = models.DateTimeField(null=True, blank=True)
    fence = models.BigIntegerField(default=0)
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # A stop request (cancellation, or a budget crossed higher in the tree) and the terminal
    # status it leads to; the executing worker sees it at its next lease renewal or step.
    # The owner paused it: not claimed until resumed; a running execution parks at its next
    # step boundary (the step under way finishes).
    paused = models.BooleanField(default=False)
    cancel_requested = models.BooleanField(default=False)
    stop_reason = models.CharField(max_length=20, choices=RunStatus.choices, blank=True)
    # Set when a wake-up (answer, child done, cancel) arrives while the run is still executing:
    # its suspension then turns into "runnable now" instead of losing the wake-up.
    wake_pending = models.BooleanField(default=False)
    # The owner interrupts the executing step (not the run): relayed like a stop request.
    interrupt_requested = models.BooleanField(default=False)
    # The turn and tool-call counters of free steps are billed with the next debit (or when the
    # execution ends): steps up to this seq are counted in the ledger, later ones not yet.
    billed_through = models.PositiveIntegerField(default=0)

    # Budget caps (null = none) and the ledger. Spend counts the whole subtree: a child's step
    # is debited to every ancestor in the same transaction as its result.
    max_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    max_usd_micros = models.PositiveBigIntegerField(null=True, blank=True)
    max_turns = models.PositiveIntegerField(null=True, blank=True)
    max_tool_calls = models.PositiveIntegerField(null=True, blank=True)
    max_seconds = models.PositiveIntegerField(null=True, blank=True)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)
    usd_micros = models.PositiveBigIntegerField(default=0)
    turns = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)

    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # The claim query: runnable runs by readiness.
            models.Index(
                fields=["runnable_at"],
                name="run_claimable",
                condition=models.Q(status__in=["queued", "running", "waiting"]),
            ),
            models.Index(fields=["account", "status"], name="run_account_status"),
        ]
        constraints = [
            models.CheckConstraint(condition=models.Q(depth__lte=3), name="run_depth_at_most_3"),
            models.CheckConstraint(
                condition=~models.Q(parent=models.F("id")), name="run_not_own_parent"
            ),
            # A spawn step replayed after a crash finds its child instead of making another.
            models.UniqueConstraint(
                fields=["parent", "spawned_by_seq"], name="run_one_child_per_spawn_step"
            ),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.program}, {self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL


class Step(models.Model):
    """The journaled unit: an intent (committed before it runs) and at most one result."""

    # No index of its own: the unique (run, seq) index serves every lookup by run, and each
    # extra index is paid on every intent of the hot path.
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="steps", db_index=False)
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=20, choices=StepKind.choices)
    effect = models.CharField(max_length=20, choices=Effect.choices)
    name = models.CharField(max_length=100, blank=True)  # the tool, model or child program
    request = models.JSONField(default=dict)
    request_hash = models.CharField(max_length=64)
    # Not stored any more, empty (`journal.idempotency_key(run, seq)` computes it, migration
    # 0019): steps written before keep theirs, which is the same.
    idempotency_key = models.CharField(max_length=64, blank=True, editable=False)
    started_at = models.DateTimeField()
    # Result, written once (the journal's UPDATE requires `finished_at IS NULL`).
    result = models.JSONField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # How the result came to be: executed, or settled by a reconciliation probe or the owner.
    settled_by = models.CharField(max_length=20, blank=True)
    executions = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)
    usd_micros = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="step_one_intent_per_seq"),
        ]
        ordering = ["run", "seq"]

    def __str__(self) -> str:
        return f"run {self.run_id} step {self.seq} {self.kind}"


class WaitKind(models.TextChoices):
    HUMAN = "human", _("owner answer")
    TIMER = "timer", _("timer")
    JOIN = "join", _("children")
    RECONCILE = "reconcile", _("owner verdict on an unfinished step")


class WaitState(models.TextChoices):
    OPEN = "open", _("open")
    ANSWERED = "answered", _("answered")
    EXPIRED = "expired", _("expired")


class Wait(models.Model):
    """A durable wait: a row, never a blocked process. Expiry of a human wait means refusal."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="waits")
    seq = models.PositiveIntegerField()
    kind = models.CharField(max_length=20, choices=WaitKind.choices)
    state = models.CharField(max_length=20, choices=WaitState.choices, default=WaitState.OPEN)
    question = models.JSONField(default=dict, blank=True)
    due_at = models.DateTimeField(null=True, blank=True)  # timer fires / human wait expires
    answer = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "seq", "kind"], name="wait_one_per_step"),
        ]
        indexes = [
            models.Index(fields=["due_at"], name="wait_open_due", condition=models.Q(state="open")),
        ]

    def __str__(self) -> str:
        return f"{self.kind} wait of run {self.run_id} step {self.seq} ({self.state})"


class Trust(models.TextChoices):
    """Who an event's content comes from, most trusted first (docs/design.md §4)."""

    OWNER = "owner"
    SYSTEM = "system"
    AGENT = "agent"
    TOOL = "tool"
    WEB = "web"


class Event(models.Model):
    """Append-only log, range-partitioned by month (months created ahead by `kernel.partitions`).

    The database primary key is (id, at), as partitioning requires; Django only ever looks
    events up by id.
    """

    at = models.DateTimeField()
    account = models.ForeignKey(
        Account, null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False
    )
    run = models.ForeignKey(
        Run, null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False
    )
    seq = models.PositiveIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=60)
    trust = models.CharField(max_length=10, choices=Trust.choices, default=Trust.SYSTEM)
    data = models.JSONField(default=dict, blank=True)
    # The event's place in the stream clients read (`kernel.stream`), given after it commits;
    # NULL until then. The table also has `tx` (the writing transaction), for the database only.
    number = models.BigIntegerField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"#{self.pk} {self.kind}"


class Artifact(models.Model):
    """A content-addressed file under the data dir; the database keeps metadata and a preview."""

    sha256 = models.CharField(max_length=64, unique=True)
    size = models.PositiveBigIntegerField()
    media_type = models.CharField(max_length=100, default="application/octet-stream")
    preview = models.TextField(blank=True)
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.SET_NULL)
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.name or self.sha256[:12]} ({self.size} bytes)"


def default_provider_caps() -> dict[str, dict[str, int | None]]:
    """A fresh install's caps of each model provider: $15 a UTC day, $150 a UTC month."""
    return {"*": {"day": 15_000_000, "month": 150_000_000}}


class GlobalBudget(models.Model):
    """The one row of global governors and of the caps a new mission gets when it sets none,
    edited on the Agents screen (`kernel.budgets.set_global_caps`). Caps are on from the first
    start: while no row is saved, these defaults are in force; null is the owner's "no cap"."""

    daily_usd_micros = models.PositiveBigIntegerField(
        _("daily spend cap (micro-dollars)"), null=True, blank=True, default=20_000_000
    )
    max_running_runs = models.PositiveIntegerField(_("global cap on running runs"), default=64)
    mission_usd_micros = models.PositiveBigIntegerField(
        _("a mission's spend cap by default (micro-dollars)"),
        null=True,
        blank=True,
        default=5_000_000,
    )
    mission_tokens = models.PositiveBigIntegerField(
        _("a mission's token cap by default"), null=True, blank=True, default=2_000_000
    )
    mission_seconds = models.PositiveIntegerField(
        _("a mission's wall-time cap by default (seconds)"),
        null=True,
        blank=True,
        default=4 * 3600,
    )
    # Spend caps per model provider, micro-dollars: {"anthropic": {"day": 10000000, "month":
    # null}}; "*" holds the caps of each provider not named; a null period has no cap
    # (`kernel.budgets.set_provider_caps`).
    provider_caps = models.JSONField(
        _("spend caps per provider"), default=default_provider_caps, blank=True
    )

    class Meta:
        verbose_name = _("global budget")

    def __str__(self) -> str:
        return "global budget"


class DailySpend(models.Model):
    day = models.DateField(unique=True)
    usd_micros = models.PositiveBigIntegerField(default=0)
    tokens = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.day}: {self.usd_micros} µ$"


class ProviderSpend(models.Model):
    """What one model provider's calls cost on one UTC day: debited with each model step's
    result (`kernel.debits`), read by the provider spend caps (`kernel.budgets.provider_spent`)
    in a few rows, not by summing the journal's steps of the month."""

    day = models.DateField()
    provider = models.TextField()
    usd_micros = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["day", "provider"], name="provider_spend_once_a_day")
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.provider}: {self.usd_micros} µ$"


class ChaosEffect(models.Model):
    """The chaos workload's external world: one row per application of a side effect.

    Deliberately without a unique constraint: the chaos checks count duplicates.
    """

    key = models.CharField(max_length=64, db_index=True)
    run_id_value = models.BigIntegerField()
    seq = models.PositiveIntegerField()
    effect = models.CharField(max_length=20)
    value = models.JSONField(default=dict)
    applied_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.effect} {self.key[:12]} (run {self.run_id_value} step {self.seq})"


class WorkerBeat(models.Model):
    """The last sign of life of one worker process of the huey pool (one row per process)."""

    worker = models.CharField(_("worker"), max_length=200, unique=True)  # "host:pid"
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField(db_index=True)
    beats = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-beat_at"]
        verbose_name = _("worker heartbeat")

    def __str__(self) -> str:
        return f"{self.worker} @ {self.beat_at:%H:%M:%S}"


class BudgetNotice(models.Model):
    """A notice that a cap is 80 % used, sent once: its key names the cap and what it holds
    (`kernel.notices`); the row and its `budget.notice` event commit together."""

    key = models.CharField(max_length=100, unique=True)
    at = models.DateTimeField(db_index=True)  # Home lists today's, newest first
    message = models.CharField(max_length=200)

    def __str__(self) -> str:
        return self.key
