"""agentos settings: one file, read from the environment through the helpers in `agentos.core.env`.

Every variable is listed in README.md. Misconfiguration that can be detected is reported by the
system checks in `agentos.checks` (ids `agentos.E0xx` / `agentos.W0xx`).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from django.utils.csp import CSP

from agentos.core import database, private
from agentos.core.env import env_bool, env_int, env_list, env_path, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = env_path("AGENTOS_DATA_DIR", BASE_DIR / ".data")
DATA_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = env_bool("AGENTOS_DEBUG", default=False)


def _secret_key() -> str:
    """The key from the environment, else one generated on first start and kept in the data dir."""
    configured = env_str("AGENTOS_SECRET_KEY")
    if configured:
        return configured
    path = DATA_DIR / "secret_key"
    # 0600 from creation, and only one key even when two processes start at once (see private).
    private.create(path, secrets.token_urlsafe(50) + "\n")
    return private.read(path).strip()


SECRET_KEY = _secret_key()

# Served over plain HTTP on loopback by default; behind TLS set AGENTOS_HTTPS=1 to get
# `__Host-` cookies, Secure flags and HSTS.
HTTPS = env_bool("AGENTOS_HTTPS", default=False)
ALLOWED_HOSTS = env_list("AGENTOS_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("AGENTOS_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",  # first: its runserver replaces Django's, with WebSocket support
    "agentos.apps.OwnerAdminConfig",  # the admin behind the second factor
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",  # ArrayField (API token scopes)
    "django_otp",
    "django_otp.plugins.otp_totp",
    "django_otp.plugins.otp_static",
    "django_otp_webauthn",  # passkeys: a django-otp device (agentos.core.passkeys)
    "django_htmx",
    "ninja",  # serves Swagger UI from static files (not a CDN) at /api/v1/docs
    "channels",
    "channels_postgres",
    "huey.contrib.djhuey",
    "agentos.core",
    "agentos",
    "kernel",
    "missions",
    "memory",
    "tools",
    "cluster",
    "approvals",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Outermost but security: every error under /api/v1, whoever answered it, leaves as JSON.
    "agentos.api.json_errors",
    # A view that met an unreachable database or a full disk answers 503 / 507, not a 500.
    "agentos.errorpages.DatabaseTrouble",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django_otp.middleware.OTPMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "agentos.partials.VaryOnHtmx",
]

ROOT_URLCONF = "agentos.urls"
ASGI_APPLICATION = "agentos.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "agentos.core.shell.console_context",
            ],
        },
    },
]

# Models the admin leaves out (`agentos.admin_site`): users and groups of a single-owner
# product, and the chaos drills' records; a developer (AGENTOS_DEBUG) still sees them.
ADMIN_HIDDEN_MODELS = [] if DEBUG else ["auth.group", "auth.user", "kernel.chaoseffect"]

# After a refused POST a form's page opens on its first invalid field (`agentos.core.forms`).
FORM_RENDERER = "agentos.core.forms.ConsoleRenderer"

# --- Database -----------------------------------------------------------------------------------
# DATABASE_URL points at a real server (PostgreSQL >= 16 with pgvector); without it, PostgreSQL 16
# runs embedded from the data dir. AGENTOS_PG_KEEP_RUNNING=1 leaves it running after the command.
DATABASE_URL = env_str("DATABASE_URL") or database.embedded_url(
    DATA_DIR / "pg", stop_on_exit=not env_bool("AGENTOS_PG_KEEP_RUNNING", default=False)
)
_db = database.parse_url(DATABASE_URL)
DATABASES: dict[str, dict[str, Any]] = {
    "default": _db,
    # channels-postgres reads and writes its message tables through this alias.
    "channels_postgres": {**_db, "TEST": {"MIRROR": "default"}},
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Channels: WebSocket doorbells. The layer may drop a message; state always comes from rows.
CHANNEL_LAYERS: dict[str, dict[str, Any]] = {
    "default": {
        "BACKEND": "channels_postgres.core.PostgresChannelLayer",
        # channels-postgres builds its own connection from this dict and needs TIME_ZONE in it.
        "CONFIG": {**_db, "TIME_ZONE": None},
    }
}

# --- Worker pool: huey on PostgreSQL (no Redis) -------------------------------------------------
HUEY_WORKERS = env_int("AGENTOS_WORKERS", 2, minimum=1)
HUEY: dict[str, Any] = {
    "huey_class": "agentos.queue.PostgresHuey",
    "name": "agentos",
    "database": DATABASE_URL,
    # Explicit: tasks go through the queue and run on the worker pool, never inline.
    "immediate": False,
    "utc": True,
    "consumer": {
        "workers": HUEY_WORKERS,
        "worker_type": "process",
        "initial_delay": 0.1,
        "max_delay": 2.0,
        "periodic": True,
        "check_worker_health": True,
    },
}
# Each worker process beats this often; one silent for 3 beats is not live (kernel.heartbeats).
WORKER_BEAT_SECONDS = env_int("AGENTOS_WORKER_BEAT", 15, minimum=1)

# Telemetry: a span per step (kernel.telemetry). none | otlp | console.
OTEL_EXPORTER = env_str("AGENTOS_OTEL_EXPORTER", "none").strip().lower()

# An approval or owner question not answered within this many hours is a refusal.
APPROVAL_TTL_HOURS = env_int("AGENTOS_APPROVAL_TTL_HOURS", 168, minimum=1)
# A provider's outage is waited out (durable timers, no worker held: `missions.engine.outage`)
# for this many hours before its run fails; the first wait lasts this many seconds, then doubles.
PROVIDER_OUTAGE_HOURS = env_int("AGENTOS_PROVIDER_OUTAGE_HOURS", 6, minimum=1)
PROVIDER_RETRY_SECONDS = env_int("AGENTOS_PROVIDER_RETRY_SECONDS", 30, minimum=1)
# A finished run's worktree is removed this many days after the run ended (sooner once all it
# committed is pushed: `tools.retention`).
WORKTREE_DAYS = env_int("AGENTOS_WORKTREE_DAYS", 14, minimum=1)
# Durable memory: one git repository per scope (the truth; PostgreSQL holds its index).
MEMORY_DIR = env_path("AGENTOS_MEMORY_DIR", DATA_DIR / "memory")
# Who push services may contact about this sender (VAPID `sub`): a mailto: or https: URL. Apple's
# service refuses a placeholder, so an owner with an iPhone sets it.
PUSH_CONTACT = env_str("AGENTOS_PUSH_CONTACT", "mailto:owner@agentos.invalid")

# --- Authentication -----------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": 12},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "console:login"
LOGIN_REDIRECT_URL = "console:home"
OTP_TOTP_ISSUER = "agentos"
# Passkeys (WebAuthn) as a second factor. The relying party is the host the console is reached
# by, and the origin that host with the request's scheme (agentos.core.passkeys.Helper): both
# come from a Host header Django already checked against ALLOWED_HOSTS. Browsers allow WebAuthn
# only in a secure context and on a host name: http://localhost works, an IP address (127.0.0.1
# included) never does, and any other name needs HTTPS.
OTP_WEBAUTHN_HELPER_CLASS = "agentos.core.passkeys.Helper"
OTP_WEBAUTHN_RP_NAME = "agentos"
OTP_WEBAUTHN_RP_ID_CALLABLE = "agentos.core.passkeys.relying_party_id"
# Only our own views run ceremonies, and only as a second factor after the password.
OTP_WEBAUTHN_ALLOW_PASSWORDLESS_LOGIN = False
# The package wants a fixed list of origins; ours are derived per request (above), which also
# serves the console on a port chosen at start (tests, `manage.py runserver 0`).
SILENCED_SYSTEM_CHECKS = ["otp_webauthn.E030"]
# Failed sign-ins let through at once, per (client address, username) and per client address;
# past them, each failure delays the next attempt twice as long, up to the longest delay. A
# count is forgotten after a quiet period. There is no per-username count: an attacker elsewhere
# must not be able to lock the owner out (agentos.signin).
SIGNIN_MAX_FAILURES = env_int("AGENTOS_SIGNIN_MAX_FAILURES", 5, minimum=1)
SIGNIN_MAX_FAILURES_PER_ADDRESS = env_int("AGENTOS_SIGNIN_MAX_FAILURES_PER_ADDRESS", 20, minimum=1)
SIGNIN_MAX_DELAY_SECONDS = env_int("AGENTOS_SIGNIN_MAX_DELAY", 900, minimum=1)
SIGNIN_FORGET_SECONDS = env_int("AGENTOS_SIGNIN_FORGET", 86400, minimum=60)

SESSION_COOKIE_AGE = env_int("AGENTOS_SESSION_SECONDS", 7 * 24 * 3600, minimum=300)
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = True
CSRF_COOKIE_SAMESITE = "Strict"
if HTTPS:
    # `__Host-` cookies are only accepted by browsers when Secure, Path=/ and without Domain.
    SESSION_COOKIE_NAME = "__Host-sessionid"
    CSRF_COOKIE_NAME = "__Host-csrftoken"
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = 31536000
    SECURE_SSL_REDIRECT = env_bool("AGENTOS_SSL_REDIRECT", default=False)

# --- Browser hardening --------------------------------------------------------------------------
# Strict policy: no inline script or style anywhere; htmx's own inline indicator styles are
# switched off in the base template's htmx-config meta tag.
SECURE_CSP: dict[str, list[str]] = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "font-src": [CSP.SELF],
    "manifest-src": [CSP.SELF],
    "worker-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "frame-ancestors": [CSP.NONE],
    "form-action": [CSP.SELF],
}
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"

# --- Static files: vendored, served by whitenoise (daphne serves no files itself) ---------------
# Served straight from the source folders (no collectstatic step): the files are few and small.
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

LANGUAGE_CODE = "en"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

LOGGING: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    # Every line written goes through the scrubber (known secret values and secret shapes).
    "filters": {"secrets": {"()": "agentos.core.scrubber.LogFilter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["secrets"],
        }
    },
    "root": {"handlers": ["console"], "level": env_str("AGENTOS_LOG_LEVEL", "INFO")},
    "loggers": {
        # pgserver logs every attach at INFO; keep start-up output readable.
        "pgserver": {"level": "WARNING"},
        "django.channels.server": {"level": "WARNING"},
        # A doorbell rung while no console is open is normal, not a warning.
        "channels_postgres.core": {"level": "ERROR"},
        # After the database returns, the channel layer's pool drops each connection the outage
        # broke with a warning per connection; `agentos.database` says it once.
        "psycopg.pool": {"level": "ERROR"},
        # run_huey attaches its own handler to "huey"; propagating would print every line twice.
        "huey": {"propagate": False, "filters": ["secrets"]},
    },
}

# Doorbells to open consoles are sent from a background thread (kernel.bus).
DOORBELLS_IN_BACKGROUND = True

# --- Kernel -------------------------------------------------------------------------------------
KERNEL_LEASE_SECONDS = float(env_int("AGENTOS_LEASE_SECONDS", 30, minimum=1))
KERNEL_POLL_SECONDS = float(env_int("AGENTOS_KERNEL_POLL_SECONDS", 5, minimum=1))
# A step that met a full disk is tried again after this, doubling up to 15 min (kernel.diskfull).
KERNEL_DISK_FULL_RETRY_SECONDS = float(env_int("AGENTOS_DISK_FULL_RETRY_SECONDS", 30, minimum=1))
# Runs one worker process executes at once (threads, one database connection each).
KERNEL_RUNS_PER_WORKER = env_int("AGENTOS_RUNS_PER_WORKER", 16, minimum=1)
# `manage.py chaos`'s cases from the apps above the kernel, which it must not import by name.
CHAOS_CASES = [
    "missions.proving.chaos_runs.shell_append_case",
    "missions.proving.chaos_runs.fork_case",
    "missions.proving.chaos_runs.engine_bump_case",
    "missions.proving.chaos_nodes.node_runner_case",
    "missions.proving.chaos_supervisor.supervisor_case",
]
# Registrations of the crash sweep's operations from the apps above the kernel (`manage.py
# chaos` calls them): the tool harness's calls, approved by the owner through approvals.
SWEEP_EXTENSIONS = ["missions.proving.sweep_harness.register"]

# --- Egress: the sandboxes' only way out (cluster.egress) ----------------------------------------
# Where `http://<name>.bridge/...` inside a sandbox goes, the credential added outside it.
EGRESS_BRIDGE_URLS = {
    "anthropic": env_str("AGENTOS_BRIDGE_ANTHROPIC_URL", "https://api.anthropic.com"),
    "openai": env_str("AGENTOS_BRIDGE_OPENAI_URL", "https://api.openai.com"),
}

# --- MCP servers (tools.mcp) -----------------------------------------------------------------
# Host directories shown read-only, at their own paths, to every stdio MCP server's sandbox
# besides our own Python environment: where the owner installs servers of other kinds.
MCP_SERVER_DIRS = env_list("AGENTOS_MCP_SERVER_DIRS", [])

# --- Backups (agentos.backups, docs/operations.md) -------------------------------------------
# The nightly backup runs only when the owner turns it on; its passphrase is read from
# AGENTOS_BACKUP_PASSPHRASE when it runs, never kept in the settings.
BACKUP_NIGHTLY = env_bool("AGENTOS_BACKUP_NIGHTLY", default=False)
BACKUP_DIR = env_path("AGENTOS_BACKUP_DIR", DATA_DIR / "backups")
BACKUP_DAILY = env_int("AGENTOS_BACKUP_DAILY", 7, minimum=0)
BACKUP_WEEKLY = env_int("AGENTOS_BACKUP_WEEKLY", 4, minimum=0)
# A second folder (another disk, a mount) each new archive is copied to, with the same retention.
BACKUP_COPY_TO = env_str("AGENTOS_BACKUP_COPY_TO")
