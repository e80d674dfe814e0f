"""The live path benchmark: from a step's commit to the owner's browser showing it.

The workload: `RUNS` runs streaming at once, each a program (`PROGRAM`) that plays an agent's
turns at a steady pace: a model step (with its cost: the ledger's statement) then a tool step
with an effect (a synchronous result commit), one step every 100-200 ms. They are journaled by
the real kernel (`Worker.work_one`, one worker thread per run, in this process) and reach the
browser the product's way: daphne (started here on its own port, `agentos.asgi`) numbers the
step events (`kernel.stream`) and sends them on the owner's WebSocket (`/ws/events`), and the
run page swaps the step in (`static/console.js`).

The owner's browser: headless Chromium (Playwright), signed in with a session of the owner made
directly in the benchmark's database, one window with a tab per run page, as an owner following
ten runs would open them. Every tab counts, the nine behind the front one too (Chromium runs
their renderers at a lower priority): each tab's socket carries the whole stream, and each must
pick out and show its own run's steps. (Ten windows side by side, each painting, measured slower
still on two cores: more than an owner watches.)

Latency of one step = when its tab's DOM first shows it (a `MutationObserver` stamps
`performance.timeOrigin + performance.now()`) minus when the commit that made it visible
returned to its writer (`time.time()` right after `RunContext.step` returns for a result, at the
start of the step's execution for an intent): the same machine's clock, checked at start. Two
figures, each against `TARGET_MS`: a step shown done (its result), and a step shown under way
(its intent); and where the first one's time goes, up to the moment the tab's socket received
the step (the rest is the tab's: parsing, swapping, laying out).

It writes runs and a session: `manage.py bench_live` refuses to run outside a dedicated data
dir, like the other benchmarks (`make bench` uses `.data/bench`).
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.sessions.backends.db import SessionStore
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from django_otp import DEVICE_ID_SESSION_KEY
from django_otp.plugins.otp_totp.models import TOTPDevice
from playwright.sync_api import Browser, BrowserContext, Page, sync_playwright

from agentos.core import database, owner
from kernel import runs
from kernel.budgets import Cost
from kernel.context import Done, RunContext, StepCall
from kernel.models import Account, Effect, Run, RunStatus, StepKind
from kernel.programs import PROGRAMS, Outcome
from kernel.proving import bench as kernel_bench
from kernel.proving.figures import fig, verdict
from kernel.worker import Worker

PROGRAM = "bench.live"
RUNS = 10
STEPS = 40  # per run and round: ~6 s of streaming at the pace below
PACE_MS = (100, 200)  # a step's duration, spread evenly over this range
ROUNDS = 3
WARMUP_STEPS = 4
TARGET_MS = 50.0  # p95, at most
CLOCK_TOLERANCE_MS = 2.0  # browser clock vs ours: beyond this the deltas mean nothing
SHOW_TIMEOUT = 30.0  # after the runs end, for the last steps to be shown
START_TIMEOUT = 60.0
POLL_SECONDS = 0.02
# A model step's tokens, priced at one micro-dollar: its result commits with the ledger's debit as
# a priced step's does, and benchmark after benchmark stays far below the daily spend cap (a
# realistic price, 2,100 micro-dollars, reached its 20 dollars in fifteen runs of one day).
MODEL_COST = Cost(input_tokens=1200, output_tokens=80, cache_read_tokens=900, usd_micros=1)

Say = Callable[[str], None]
BenchError = kernel_bench.BenchError


# --- the workload: a program that streams steps, and when each commit returned ---------------


class Commits:
    """When each step's commits returned, by (run, seq): written by the worker threads."""

    def __init__(self) -> None:
        self.started: dict[tuple[int, int], float] = {}
        self.done: dict[tuple[int, int], float] = {}
        self._lock = threading.Lock()

    def intent(self, run_id: int, seq: int) -> None:
        now = time.time()
        with self._lock:
            self.started.setdefault((run_id, seq), now)

    def result(self, run_id: int, seq: int) -> None:
        now = time.time()
        with self._lock:
            self.done.setdefault((run_id, seq), now)


COMMITS = Commits()


def pace(run_id: int, index: int) -> float:
    """Seconds step `index` of a run takes: spread over `PACE_MS`, the same on every run of the
    benchmark, and not in step between runs (so their commits do not fall together)."""
    low, high = PACE_MS
    return (low + (run_id * 37 + index * 53) % (high - low + 1)) / 1000


def live_program(ctx: RunContext) -> Outcome:
    """`steps` steps alternating a model call and a tool call with an effect, each taking
    `pace()`; the commit times go to `COMMITS` (read by this process only)."""
    steps = int(ctx.input.get("steps", STEPS))

    def work(call: StepCall) -> None:
        # The intent committed just before the step executes.
        COMMITS.intent(ctx.run_id, call.seq)
        call.stopping.wait(pace(ctx.run_id, call.seq))

    def model(call: StepCall) -> Done:
        work(call)
        return Done({"text": f"Step {call.seq}: reading the next file."}, MODEL_COST)

    def tool(call: StepCall) -> Done:
        work(call)
        return Done({"output": f"wrote {len(call.request['arguments']['path'])} bytes"})

    for index in range(steps):
        if index % 2 == 0:
            ctx.step(
                StepKind.MODEL_CALL,
                effect=Effect.MODEL_CALL,
                name="scripted",
                request={"turn": index // 2},
                execute=model,
            )
        else:
            ctx.step(
                StepKind.TOOL_CALL,
                effect=Effect.IDEMPOTENT_WRITE,
                name="write_file",
                request={"arguments": {"path": f"notes/{index}.md"}},
                execute=tool,
            )
        # `step` returns once the result's transaction has committed.
        COMMITS.result(ctx.run_id, ctx.seq)
    return Outcome(RunStatus.DONE, {"steps": steps})


def register() -> None:
    PROGRAMS.add(PROGRAM, live_program)


# --- the stack: daphne on this benchmark's database -----------------------------------------


@dataclass
class Web:
    """daphne serving `agentos.asgi` on a free port; its output goes to the data dir."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise BenchError(f"daphne exited (see {self.log})")


@contextmanager
def web_server() -> Iterator[Web]:
    port = _free_port()
    log_path = settings.DATA_DIR / "bench-live-daphne.log"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentos.settings",
        "DATABASE_URL": database.build_url(connection.settings_dict),
        "AGENTOS_DATA_DIR": str(settings.DATA_DIR),
    }
    argv = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
            "agentos.asgi:application"]  # fmt: skip
    with log_path.open("wb") as log:
        # Our own server with a fixed argv, no shell.
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=log, cwd=settings.BASE_DIR)  # noqa: S603
    web = Web(url=f"http://127.0.0.1:{port}", process=process, log=log_path)
    try:
        _wait_answering(web)
        yield web
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_answering(web: Web) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        web.check_alive()
        try:
            with urllib.request.urlopen(f"{web.url}/api/v1/health", timeout=5):  # noqa: S310
                return
        except urllib.error.HTTPError:
            return  # any answer (503 without workers) means the server is up
        except OSError:
            time.sleep(0.1)
    raise BenchError(f"daphne did not answer within {START_TIMEOUT:.0f} s (see {web.log})")


def owner_session() -> str:
    """A session of the owner that passed both factors, made directly in this database (the
    benchmark measures the live path, not the sign-in): its key, the session cookie's value."""
    owner.ensure_owner()
    user = owner.get_owner()
    if user is None:
        raise BenchError("no owner in the benchmark database")
    device = TOTPDevice.objects.filter(user=user).first()
    if device is None:
        raise BenchError("the owner has no second factor")
    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = settings.AUTHENTICATION_BACKENDS[0]
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session[DEVICE_ID_SESSION_KEY] = device.persistent_id
    session.create()
    return str(session.session_key)


# --- the owner's browser ----------------------------------------------------------------------

# Installed in every tab before its scripts: stamps when each step of the timeline is first
# shown (`li.step[data-seq]`), and first shown done (without `step-open`), whatever the swap.
OBSERVER = """
(() => {
  const seen = {started: {}, done: {}, arrived: {}};
  window.__liveSeen = seen;
  const stamp = () => performance.timeOrigin + performance.now();
  function look() {
    const now = stamp();
    for (const li of document.querySelectorAll("#timeline li.step[data-seq]")) {
      const seq = li.dataset.seq;
      if (!(seq in seen.started)) seen.started[seq] = now;
      if (!(seq in seen.done) && !li.classList.contains("step-open")) seen.done[seq] = now;
    }
  }
  new MutationObserver(look).observe(document, {
    subtree: true, childList: true, attributes: true, attributeFilter: ["class"],
  });
  // When the socket brought each step done: splits a delta into the server's part and the tab's.
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener("message", (event) => {
        const now = stamp();
        if (typeof event.data !== "string" || !event.data.startsWith('{"type": "step"')) return;
        const msg = JSON.parse(event.data);
        if (msg.html.includes("step-open") || msg.seq in seen.arrived) return;
        seen.arrived[msg.seq] = now;
      });
    }
  };
})();
"""

# Chromium as the browser tests start it (tests/browser/conftest.py): no sandbox as root in a
# container, and nothing that calls home.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    # Ten tabs are watched at once: none may be throttled as a background tab.
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        raise BenchError("Chromium is not installed: `apt-get install chromium`.")
    return path


@contextmanager
def browser() -> Iterator[Browser]:
    """Headless Chromium. Playwright's sync API keeps an event loop running in this thread, and
    Django then refuses the ORM here, though no call of ours runs in a coroutine: allowed for
    exactly as long as the loop lives (as the browser tests do)."""
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(
                executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS
            )
            try:
                yield chromium
            finally:
                chromium.close()
    finally:
        del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]


def owner_context(chromium: Browser, web: Web, session_key: str) -> BrowserContext:
    context = chromium.new_context(base_url=web.url)
    context.add_cookies(
        [{"name": settings.SESSION_COOKIE_NAME, "value": session_key, "url": web.url}]
    )
    context.add_init_script(OBSERVER)
    return context


def open_run_page(page: Page, run_id: int) -> None:
    """Load the run's page and wait until its WebSocket is live (it resumes at the head)."""
    page.goto(reverse("console:run", args=[run_id]))
    if "/login" in page.url:
        raise BenchError("the owner's session was refused: the run page asks to sign in")
    page.wait_for_selector(".live-dot.is-live", timeout=START_TIMEOUT * 1000)


def clock_offset_ms(page: Page) -> float:
    """The browser's clock minus ours, at a moment both read (the smallest of a few tries)."""
    offsets: list[tuple[float, float]] = []
    for _ in range(5):
        before = time.time()
        theirs = float(page.evaluate("performance.timeOrigin + performance.now()")) / 1000
        after = time.time()
        offsets.append((theirs - (before + after) / 2, after - before))
    offset, _spread = min(offsets, key=lambda pair: pair[1])
    return offset * 1000


# --- one round ----------------------------------------------------------------------------


@dataclass
class Round:
    done_ms: list[float] = field(default_factory=list)  # result commit → shown done
    started_ms: list[float] = field(default_factory=list)  # intent commit → shown under way
    arrived_ms: list[float] = field(default_factory=list)  # result commit → on the tab's socket
    unseen: int = 0  # steps committed that no tab showed done before the deadline

    def p(self, which: str, q: float) -> float:
        return percentile(getattr(self, which), q)


def percentile(samples: list[float], q: float) -> float:
    """The nearest-rank percentile (`q` in 0..100) of the samples."""
    ordered = sorted(samples)
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def analyze() -> None:
    """Statistics of the tables the sequencer reads, as a database that runs for longer than this
    benchmark has them from autovacuum (its first pass comes a minute after the start): without
    them the planner scans every step for the few not yet announced."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE kernel_step, kernel_event, kernel_run")


def make_account() -> Account:
    return Account.objects.create(max_concurrent_runs=64)


def measure_round(pages: list[Page], account: Account, *, runs_count: int, steps: int) -> Round:
    """1. create the runs held back; 2. open each run's page (live); 3. release the runs to one
    worker thread each; 4. when they have ended and the tabs show every step done, read what
    each tab saw and when."""
    run_ids = [
        runs.start_run(account=account, program=PROGRAM, input={"steps": steps}).pk
        for _ in range(runs_count)
    ]
    Run.objects.filter(pk__in=run_ids).update(runnable_at=timezone.now() + timedelta(days=1))
    for page, run_id in zip(pages, run_ids, strict=True):
        open_run_page(page, run_id)
    Run.objects.filter(pk__in=run_ids).update(runnable_at=timezone.now())
    threads = [threading.Thread(target=_work_one, name=f"bench-live-{i}") for i in run_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=steps * max(PACE_MS) / 1000 * 4 + 60)
    statuses = dict(Run.objects.filter(pk__in=run_ids).values_list("pk", "status"))
    wrong = {pk: status for pk, status in statuses.items() if status != RunStatus.DONE}
    if wrong or any(thread.is_alive() for thread in threads):
        raise BenchError(f"benchmark runs did not end done: {wrong}")
    seen = _wait_shown(pages, steps)
    found = Round()
    for page_seen, run_id in zip(seen, run_ids, strict=True):
        for seq in range(1, steps + 1):
            key = (run_id, seq)
            shown_done = page_seen["done"].get(str(seq))
            if shown_done is None:
                found.unseen += 1
            else:
                found.done_ms.append(shown_done - COMMITS.done[key] * 1000)
            arrived = page_seen["arrived"].get(str(seq))
            if arrived is not None:
                found.arrived_ms.append(arrived - COMMITS.done[key] * 1000)
            shown = page_seen["started"].get(str(seq))
            if shown is not None and key in COMMITS.started:
                found.started_ms.append(shown - COMMITS.started[key] * 1000)
    return found


def _work_one() -> None:
    try:
        Worker(lease_seconds=60).work_one()
    finally:
        connection.close()


def _wait_shown(pages: list[Page], steps: int) -> list[dict[str, dict[str, float]]]:
    """What each tab saw, once all show their last step done (or at the deadline)."""
    deadline = time.monotonic() + SHOW_TIMEOUT
    while True:
        seen: list[dict[str, dict[str, float]]] = [
            page.evaluate("window.__liveSeen") for page in pages
        ]
        if all(len(s["done"]) >= steps for s in seen) or time.monotonic() > deadline:
            return seen
        time.sleep(POLL_SECONDS * 5)


# --- the whole benchmark --------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    """Every delta of every round; a figure is over all of them, next to the median and the
    spread (min-max) of the rounds' own."""

    runs: int
    steps: int
    rounds: list[Round]
    clock_offset_ms: float
    # The machine's 1-minute load average before and after: these figures are for a machine
    # with nothing else to do, and a shared one says so here.
    load: tuple[float, float]

    def _all(self, which: str) -> list[float]:
        return [x for r in self.rounds for x in getattr(r, which)]

    @property
    def p95(self) -> float:
        return percentile(self._all("done_ms"), 95)

    @property
    def unseen(self) -> int:
        return sum(r.unseen for r in self.rounds)

    def lines(self) -> list[str]:
        lines = [
            f"{self.runs} runs streaming at once, {self.steps} steps each (a step every"
            f" {PACE_MS[0]}-{PACE_MS[1]} ms), one tab per run page; {len(self.rounds)} rounds",
            f"   clock check: browser - benchmark = {fig(self.clock_offset_ms)} ms;"
            f" load average {self.load[0]:.2f} before, {self.load[1]:.2f} after"
            f" ({os.cpu_count()} cores)",
        ]
        for label, which, targeted in (
            ("result commit → step shown done", "done_ms", True),
            ("intent commit → step shown under way", "started_ms", True),
            ("of the first: result commit → the step on the tab's socket", "arrived_ms", False),
        ):
            every = self._all(which)
            p95 = percentile(every, 95)
            note = f"{verdict(p95 <= TARGET_MS)} (target ≤ {TARGET_MS:g} ms)" if targeted else ""
            lines += [
                f"{label} ({len(every)} deltas)",
                _row("p50", [r.p(which, 50) for r in self.rounds], percentile(every, 50)),
                _row("p95", [r.p(which, 95) for r in self.rounds], p95, note),
                _row("max", [r.p(which, 100) for r in self.rounds], max(every, default=math.nan)),
            ]
        lines.append(
            f"   steps never shown done: {self.unseen}  {verdict(not self.unseen)} (target 0)"
        )
        return lines

    def summary(self) -> str:
        """The last line, read by scripts: keep its keys stable."""
        done = self._all("done_ms")
        started = self._all("started_ms")
        return (
            f"live_p95_ms={fig(self.p95)} live_p50_ms={fig(percentile(done, 50))}"
            f" live_max_ms={fig(max(done, default=math.nan))}"
            f" started_p95_ms={fig(percentile(started, 95))}"
            f" runs={self.runs} deltas={len(done)} unseen={self.unseen}"
        )


def _row(label: str, per_round: list[float], overall: float, note: str = "") -> str:
    """`label  overall ms  note  median and spread of the rounds' figures`."""
    spread = (
        f"  rounds: median {fig(statistics.median(per_round))},"
        f" {fig(min(per_round))}-{fig(max(per_round))}"
        if len(per_round) > 1
        else ""
    )
    return f"   {label:<5} {fig(overall):>7} ms  {note}{spread}".rstrip()


def run(
    *,
    runs_count: int = RUNS,
    steps: int = STEPS,
    rounds: int = ROUNDS,
    say: Say = print,
    chromium: Browser | None = None,
) -> Report:
    """Measure; `chromium` is a browser already started (the tests'), else one is started."""
    kernel_bench.fresh_journal()
    retired = kernel_bench.retire_leftovers()
    if retired:
        say(f"cancelled {retired} unfinished run(s) left by an earlier benchmark")
    account = make_account()
    session_key = owner_session()
    analyze()
    load_before = os.getloadavg()[0]
    say("starting daphne and Chromium …")
    started = nullcontext(chromium) if chromium is not None else browser()
    with web_server() as web, started as watching:
        context = owner_context(watching, web, session_key)
        try:
            pages = [context.new_page() for _ in range(runs_count)]
            # Warm-up: every path once (daphne's first requests, the tabs' first sockets).
            measure_round(pages, account, runs_count=runs_count, steps=WARMUP_STEPS)
            offset = clock_offset_ms(pages[0])
            if abs(offset) > CLOCK_TOLERANCE_MS:
                raise BenchError(f"the browser's clock is {offset:.1f} ms off ours")
            found = []
            for index in range(rounds):
                say(f"round {index + 1}/{rounds}: {runs_count} runs x {steps} steps …")
                found.append(measure_round(pages, account, runs_count=runs_count, steps=steps))
                web.check_alive()
        finally:
            context.close()
    return Report(
        runs=runs_count,
        steps=steps,
        rounds=found,
        clock_offset_ms=offset,
        load=(load_before, os.getloadavg()[0]),
    )
