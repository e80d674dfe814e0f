"""Projects and missions: what the owner asks for. Runs (in `kernel`) do the work."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from kernel.models import Account
from missions.cron import parse_cron, zone

# Re-exported: the app's models, defined apart to keep this module small.
from missions.profile_models import EvalOutcome as EvalOutcome
from missions.profile_models import Profile as Profile


class EnvironmentStatus(models.TextChoices):
    """Where the owner's build of a project's environment is."""

    NONE = "none", _("No environment")
    QUEUED = "queued", _("Queued")
    BUILDING = "building", _("Building")
    BUILT = "built", _("Built")
    FAILED = "failed", _("Failed")


class Project(models.Model):
    name = models.CharField(_("name"), max_length=120, unique=True)
    description = models.TextField(_("description"), blank=True)
    # A local git repository: each writing run works in its own worktree of it.
    repository = models.CharField(_("git repository (local path)"), max_length=500, blank=True)
    # The MCP servers every mission of the project may use (`tools.mcp`), by name.
    mcp_servers = models.JSONField(_("MCP servers"), default=list, blank=True)
    # Where `repository` was cloned from, when the owner gave a URL: its `origin`.
    clone_url = models.CharField(_("cloned from"), max_length=500, blank=True, editable=False)
    # Its frozen environment (`cluster.environments`): built once per version of (these
    # commands, `environment_commit`) on each node that runs its commands, in a clean checkout of
    # that commit, then read-only at /env for every one of them. Changed through
    # `missions.environments` only: saving the commands pins the commit.
    environment_setup = models.TextField(
        _("environment setup"),
        blank=True,
        help_text=_(
            "Shell commands that install the project's toolchain and packages into /env, e.g."
            " python3 -m venv /env && /env/bin/pip install -r requirements.txt. They run in the"
            " sandbox, without network, in a clean checkout of the project's default branch as"
            " it was when you saved them or last rebuilt, never in a run's worktree. Every command"
            " of the project's agents then sees /env read-only, /env/bin first on its PATH."
        ),
    )
    # The commit the setup runs on: the project's default branch head when the owner saved the
    # commands or pressed Rebuild (resolved in the staging repository, never a run's ref).
    environment_commit = models.CharField(
        _("environment commit"), max_length=64, blank=True, editable=False
    )
    # The owner's last build (`missions.environments.build`) of `environment_version`.
    environment_version = models.CharField(max_length=16, blank=True, editable=False)
    environment_status = models.CharField(
        max_length=16, choices=EnvironmentStatus, default=EnvironmentStatus.NONE, editable=False
    )
    environment_log = models.TextField(blank=True, editable=False)
    environment_changed_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The resume routine (`missions.engine.resume`, `missions.project_settings`): the owner's
    # instructions, in every run's system prompt from its launch — written by the owner, or
    # imported by the owner's act from AGENTS.md at the default branch head (`instructions_from`
    # names that commit), never read from a run's worktree; the criteria a mission that gives
    # none is held to; the command run in the sandbox at each run's start and resume.
    instructions = models.TextField(_("instructions"), blank=True)
    instructions_from = models.CharField(max_length=200, blank=True, editable=False)
    default_criteria = models.JSONField(_("default criteria"), default=list, blank=True)
    smoke_command = models.TextField(_("smoke command"), blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if not self.repository:
            return
        path = Path(self.repository)
        if not path.is_absolute():
            raise ValidationError({"repository": _("Give the repository's absolute path.")})
        if not (path / ".git").exists() and not (path / "HEAD").is_file():
            raise ValidationError(
                {"repository": _("%(path)s is not a git repository.") % {"path": path}}
            )


class RiskClass(models.TextChoices):
    """A mission's risk class; `tools.levels.RISK_CLASSES` maps each to its sandbox level."""

    RESEARCH = "research", _("Research (read-only)")
    CODE = "code", _("Code")
    UNTRUSTED = "untrusted", _("Untrusted code")


class Mission(Account):
    """An owner goal with its definition of done. A mission is the kernel account its runs are
    charged to: its budget caps and concurrency limit (editable in the admin) are the account's,
    and its id is the account's."""

    account = models.OneToOneField(
        Account,
        on_delete=models.CASCADE,
        parent_link=True,
        primary_key=True,
        db_column="id",
        related_name="mission",
    )
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="missions")
    goal = models.TextField(_("goal"))
    definition_of_done = models.TextField(_("definition of done"), blank=True)
    # The definition of done as criteria (`missions.verification`), as written before the work:
    # each launch of the mission holds its root run to them (only a run's copy records passes).
    criteria = models.JSONField(_("criteria"), default=list, blank=True)
    # Sets its runs' sandbox level (`tools.levels`): what the mission may do decides how closely
    # it is confined, whatever its agents ask.
    risk_class = models.CharField(
        _("risk class"),
        max_length=20,
        choices=RiskClass,
        default=RiskClass.CODE,
        help_text=_(
            "Research: read-only tools, no shell (sandbox level 0). Code: commands in a sandbox"
            " on the mission's worktree (level 1). Untrusted: each command in a disposable"
            " virtual machine (level 2)."
        ),
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # Per-role overrides of the routing defaults: {"executor": {"provider": ..., "model": ...,
    # "effort": ...}}.
    routes = models.JSONField(default=dict, blank=True)
    # What the mission may reach beyond its project (docs/design.md §13, §14): the MCP servers
    # its agents may use (with its project's), the API bridges its sandboxes may call, and the
    # extra hosts they may reach; the owner's rules still decide each request.
    mcp_servers = models.JSONField(_("MCP servers"), default=list, blank=True)
    bridges = models.JSONField(_("bridges"), default=list, blank=True)
    allowed_hosts = models.JSONField(_("extra hosts"), default=list, blank=True)
    # Plan, then execute: the plan is fixed before any untrusted content is read.
    sensitive = models.BooleanField(_("sensitive"), default=False)
    # The domain profile it started with (`missions.profiles`): its routes, level, criteria and
    # caps were copied in at creation; its tools and skills narrow each launch's run.
    profile = models.ForeignKey(
        Profile, null=True, blank=True, on_delete=models.PROTECT, related_name="missions"
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.goal[:60]


class ModelPrice(models.Model):
    """One model's prices in one version of the price table (editable in the admin).

    Prices are in micro-dollars per million tokens, so a step's cost is an exact integer. A step
    is priced with the newest version whose `valid_from` is not after the step.
    """

    version = models.CharField(_("version"), max_length=40)
    valid_from = models.DateTimeField(_("valid from"))
    provider = models.CharField(_("provider"), max_length=20)
    model = models.CharField(_("model"), max_length=100)
    input_per_mtok = models.PositiveBigIntegerField(_("input, µ$ per million tokens"))
    output_per_mtok = models.PositiveBigIntegerField(_("output, µ$ per million tokens"))
    cache_read_per_mtok = models.PositiveBigIntegerField(_("cache read, µ$ per million tokens"))
    cache_write_per_mtok = models.PositiveBigIntegerField(_("cache write, µ$ per million tokens"))
    source = models.CharField(_("source"), max_length=200, blank=True)

    class Meta:
        ordering = ["provider", "model", "-valid_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["version", "provider", "model"], name="price_once_per_version"
            )
        ]

    def __str__(self) -> str:
        return f"{self.provider}/{self.model} ({self.version})"


class ModelInfo(models.Model):
    """The model catalog: what the providers' model-listing APIs said, and when."""

    provider = models.CharField(max_length=20)
    model = models.CharField(max_length=100)
    display_name = models.CharField(max_length=200, blank=True)
    context_window = models.PositiveIntegerField(null=True, blank=True)  # null: unknown
    max_output_tokens = models.PositiveIntegerField(null=True, blank=True)
    capabilities = models.JSONField(default=dict, blank=True)
    fetched_at = models.DateTimeField(null=True, blank=True)  # null: seeded, never fetched

    class Meta:
        ordering = ["provider", "model"]
        constraints = [
            models.UniqueConstraint(fields=["provider", "model"], name="model_info_once")
        ]

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"


class Role(models.TextChoices):
    PLANNER = "planner", _("planner")
    EXECUTOR = "executor", _("executor")
    EVALUATOR = "evaluator", _("evaluator")
    CONSOLIDATOR = "memory_consolidator", _("memory consolidator")
    CLASSIFIER = "classifier", _("classifier")


class RoleRoute(models.Model):
    """The default model and effort of a role; a mission may override it (`Mission.routes`)."""

    role = models.CharField(max_length=30, choices=Role.choices, unique=True)
    provider = models.CharField(max_length=20)
    model = models.CharField(max_length=100)
    effort = models.CharField(
        max_length=10, blank=True, choices=[("low", "low"), ("medium", "medium"), ("high", "high")]
    )

    def __str__(self) -> str:
        return f"{self.role}: {self.provider}/{self.model} {self.effort}".strip()


class OwnerMessage(models.Model):
    """A steering message from the owner to a running agent.

    Delivered into the conversation just before the run's next model call (so after the tool
    calls in flight end), and recorded in that model step's result, which makes the delivery
    part of the journal: a replay puts it at the same place.
    """

    run = models.ForeignKey("kernel.Run", on_delete=models.CASCADE, related_name="owner_messages")
    text = models.TextField(_("message"))
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_seq = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(
                fields=["run"],
                name="owner_message_pending",
                condition=models.Q(delivered_seq__isnull=True),
            )
        ]

    def __str__(self) -> str:
        return f"to run {self.run_id}: {self.text[:40]}"


def default_timezone() -> str:
    """A new schedule's time zone: the installation's (settings.TIME_ZONE)."""
    return str(settings.TIME_ZONE)


class CatchUp(models.TextChoices):
    """What a schedule does with the times it missed while agentos was down."""

    SKIP = "skip", _("Skip the missed times")
    ONCE = "once", _("Run once for the missed times")
    EACH = "each", _("Run each missed time")


class Schedule(models.Model):
    """A recurring mission: at each time its cron expression matches in its time zone, a mission
    starts from its template through the same path as any other (`missions.blueprints.start`).
    Fired by `missions.firing`; each firing leaves a `ScheduleFiring`."""

    name = models.CharField(_("name"), max_length=120)
    cron = models.CharField(
        _("cron expression"),
        max_length=100,
        help_text=_("Five fields: minute hour day-of-month month day-of-week (e.g. 0 7 * * 1-5)."),
    )
    timezone = models.CharField(_("time zone"), max_length=64, default=default_timezone)
    # The body of POST /api/v1/missions, as `missions.blueprints.clean` returns it.
    mission = models.JSONField(_("mission template"), default=dict)
    catch_up = models.CharField(
        _("after downtime"), max_length=8, choices=CatchUp.choices, default=CatchUp.SKIP
    )
    allow_overlap = models.BooleanField(_("allow overlap"), default=False)
    enabled = models.BooleanField(_("enabled"), default=True)
    # The last due time dealt with (started, skipped or failed): the times missed during a
    # downtime are those after it.
    last_fired_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "pk"]

    def __str__(self) -> str:
        return f"{self.name} ({self.cron})"

    def clean(self) -> None:
        problems = {}
        try:
            parse_cron(self.cron)
        except ValueError as error:
            problems["cron"] = str(error)
        try:
            zone(self.timezone)
        except ValueError as error:
            problems["timezone"] = str(error)
        if problems:
            raise ValidationError(problems)


class FiringOutcome(models.TextChoices):
    STARTED = "started", _("Started")
    SKIPPED_OVERLAP = "skipped_overlap", _("Skipped: the previous one was still running")
    SKIPPED_CATCH_UP = "skipped_catch_up", _("Skipped: missed during downtime")
    FAILED = "failed", _("Failed")


class ScheduleFiring(models.Model):
    """One due time of a schedule and what came of it: its history line."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="firings")
    due_at = models.DateTimeField()
    fired_at = models.DateTimeField(default=timezone.now)
    outcome = models.CharField(max_length=20, choices=FiringOutcome.choices)
    mission = models.ForeignKey(
        "Mission", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-due_at"]
        constraints = [
            # Created in the same transaction as its mission: a due time fires once, whoever
            # retries it after a crash (docs/design.md §12).
            models.UniqueConstraint(fields=["schedule", "due_at"], name="schedule_firing_once")
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} at {self.due_at:%Y-%m-%d %H:%M} UTC: {self.outcome}"


class ProviderKey(models.Model):
    """A provider's API key set from the console: write-only, stored encrypted by the vault
    (`agentos.core.vault`). The environment variable, when set, wins."""

    provider = models.CharField(max_length=20, unique=True)
    ciphertext = models.BinaryField()
    hint = models.CharField(max_length=12, blank=True)  # the last 4 characters, to recognise it
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.provider} key …{self.hint}"


class ProviderEndpoint(models.Model):
    """Where an OpenAI-compatible server answers (llama.cpp, vLLM, Ollama…) and the model it
    serves, set from the console. Its key, optional, is a `ProviderKey` like the others'."""

    provider = models.CharField(max_length=20, unique=True)
    base_url = models.URLField(max_length=500)
    model = models.CharField(max_length=100)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.provider}: {self.model} at {self.base_url}"


class SearchBackend(models.Model):
    """Where `web_search` asks (`missions.search`), set by the owner in Settings: a SearXNG
    instance (its JSON API), or a search API whose key an egress bridge adds (`bridge`: the
    bridge's name; the key never reaches our code or a model). One row at most."""

    class Kind(models.TextChoices):
        SEARXNG = "searxng", _("SearXNG")
        API = "api", _("search API through a bridge")

    kind = models.CharField(max_length=10, choices=Kind.choices)
    url = models.URLField(max_length=500)
    bridge = models.CharField(max_length=31, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.kind} at {self.url}"


class PlanItem(models.Model):
    """One item of a mission's plan, in its supervisor's ledger (`missions.ledger`): planned
    and assigned by the mission's root run, moved by its owner, done only with proof."""

    class Status(models.TextChoices):
        TODO = "todo", _("to do")
        DOING = "doing", _("in progress")
        DONE = "done", _("done")
        FAILED = "failed", _("failed")

    mission = models.ForeignKey(Mission, on_delete=models.CASCADE, related_name="plan_items")
    key = models.CharField(_("key"), max_length=64)
    title = models.CharField(_("title"), max_length=300)
    # Who works on it: a run of the mission, or — before it exists — the name of the contract
    # the supervisor will delegate it under (the first run of that name to touch it owns it).
    owner = models.ForeignKey(
        "kernel.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    owner_name = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.TODO)
    # {"commands": [...], "tests": [...], "files": [...], "events": [ids]}
    proof = models.JSONField(default=dict, blank=True)
    note = models.TextField(blank=True)
    updated_by = models.ForeignKey(
        "kernel.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_seq = models.PositiveIntegerField(null=True, blank=True)
    position = models.PositiveIntegerField(default=0)  # the order the supervisor planned
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["mission", "position", "id"]
        constraints = [
            models.UniqueConstraint(fields=["mission", "key"], name="plan_item_key_once")
        ]

    def __str__(self) -> str:
        return f"{self.key}: {self.title[:40]} ({self.status})"


class Fact(models.Model):
    """Something established during a mission, with the journal events it rests on."""

    mission = models.ForeignKey(Mission, on_delete=models.CASCADE, related_name="facts")
    text = models.TextField(_("fact"))
    source_events = models.JSONField(default=list)
    run = models.ForeignKey(
        "kernel.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    seq = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["mission", "created_at", "id"]

    def __str__(self) -> str:
        return self.text[:60]


class LedgerWrite(models.Model):
    """One change of a ledger by a tool step, keyed by the step's idempotency key: a step
    replayed after a crash finds its change made and answers what it answered, changing
    nothing twice."""

    key = models.CharField(max_length=64, unique=True)
    mission = models.ForeignKey(Mission, on_delete=models.CASCADE, related_name="ledger_writes")
    run = models.ForeignKey(
        "kernel.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    seq = models.PositiveIntegerField()
    tool = models.CharField(max_length=40)
    answer = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.tool} by run {self.run_id} step {self.seq}"


class WebhookPreset(models.TextChoices):
    """How a delivery is signed (`missions.webhooks`)."""

    AGENTOS = "agentos", _("agentos (timestamped signature)")
    GITHUB = "github", _("GitHub (X-Hub-Signature-256)")


class Webhook(models.Model):
    """An endpoint outsiders post to, each verified delivery a mission from `mission` (a
    template, `missions.blueprints.clean`). Its secret is stored encrypted by the vault (HMAC
    needs it back); `key` is the unguessable part of its URL."""

    name = models.CharField(_("name"), max_length=120)
    key = models.CharField(max_length=64, unique=True)
    preset = models.CharField(
        _("preset"), max_length=20, choices=WebhookPreset.choices, default=WebhookPreset.AGENTOS
    )
    ciphertext = models.BinaryField()
    mission = models.JSONField(_("mission template"))
    created_at = models.DateTimeField(auto_now_add=True)
    # Requests refused for their signature: a counter only, so an attacker cannot fill the disk.
    rejected = models.PositiveIntegerField(default=0)
    last_rejected_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name


class DeliveryStatus(models.TextChoices):
    RECEIVED = "received", _("Received")  # never committed: the row is settled in its transaction
    ACCEPTED = "accepted", _("Accepted")
    FAILED = "failed", _("Failed")


class WebhookDelivery(models.Model):
    """One verified delivery: its body as received, and the mission it became (or why not).
    Unique per endpoint by the sender's delivery id and by its signature: a repeat, or the same
    signed request under another id, is answered with the first one's mission."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    delivery_id = models.CharField(max_length=200)
    signature = models.CharField(max_length=64)
    received_at = models.DateTimeField(auto_now_add=True)
    headers = models.JSONField(default=dict, blank=True)
    body = models.BinaryField()
    status = models.CharField(max_length=20, choices=DeliveryStatus.choices)
    error = models.TextField(blank=True)
    error_code = models.CharField(max_length=40, blank=True)
    mission = models.ForeignKey(
        Mission, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    attempts = models.PositiveIntegerField(default=0)
    repeats = models.PositiveIntegerField(default=0)  # the same delivery received again
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-received_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["webhook", "delivery_id"], name="webhook_delivery_unique_id"
            ),
            models.UniqueConstraint(
                fields=["webhook", "signature"], name="webhook_delivery_unique_signature"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.webhook_id}/{self.delivery_id} ({self.status})"


class Unit(models.Model):
    """A unit of a long mission (`missions.units`): 1 to 3 hours of work the supervisor plans,
    ending in a checkpoint whose criteria (`missions.verification`, command oracles) must pass
    before the next unit begins. Units run in `position` order, one active at a time."""

    class Status(models.TextChoices):
        PLANNED = "planned", _("planned")
        ACTIVE = "active", _("active")
        PASSED = "passed", _("checkpoint passed")

    mission = models.ForeignKey(Mission, on_delete=models.CASCADE, related_name="units")
    key = models.CharField(max_length=64)
    position = models.PositiveIntegerField()
    title = models.CharField(max_length=300)
    budget_seconds = models.PositiveIntegerField()
    budget_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    criteria = models.JSONField(default=list)
    status = models.CharField(max_length=10, choices=Status, default=Status.PLANNED)
    started_at = models.DateTimeField(null=True, blank=True)
    passed_at = models.DateTimeField(null=True, blank=True)
    # The overrun's escalation, once per unit: the step that decided it (`run:seq`), so that a
    # replay of that step decides it again and no other step does.
    escalated_by = models.CharField(max_length=40, blank=True)

    class Meta:
        ordering = ["mission", "position"]
        constraints = [
            models.UniqueConstraint(fields=["mission", "key"], name="unit_key_once"),
            models.UniqueConstraint(
                fields=["mission"],
                condition=models.Q(status="active"),
                name="unit_one_active",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key}: {self.title}"
