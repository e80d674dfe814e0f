"""A real browser for a run's Web tools: Chromium in the run's level-2 virtual machine
(docs/cluster.md, "Level 2"; docs/design.md §14, §19).

`render(url, run_id=...)` runs one command in a level-2 sandbox of the run: the guest driver
`cluster.runner.browser` (sent as `python3 -I -c`, so nothing of ours need be on the node), which
loads the page in the node's Chromium through the run's egress and prints the document as its
scripts left it. The VM is the run's browser VM (`warm.browser_key`), kept warm like the VM of its
commands but apart from it: no workspace (a tmpfs stands in), so a page never touches the run's
files, and its own size, so neither VM replaces the other. In it the driver runs as the VM's
service (`cluster.runner.vmguest`): Chromium started by the run's first page stays for the next
(a page in a running Chromium took 4 to 5 s under TCG, Chromium's start 26 to 40 s). The VM goes
with the run's other VMs (`warm.release`), on a stop, by the kill switch or when idle; a stopped
or failed render takes Chromium with it, and the next starts afresh.

Its way out is the run's egress socket, with a token of its own: scope `egress` (no bridge: a
page's scripts never reach a credential) and `outbound`, since these requests are the Web tool's,
whose call the harness judged by the flags it declares, as `cluster.outbound`'s are. The run's
policy (`EGRESS_POLICY`) decides every host, every request is journaled, and a stopped tree's
socket closes under the browser.

What comes back is the guest's: bounded, parsed as JSON data (nothing in it is run or followed),
and the caller treats the page as the Web's (`missions.web_browser`).

`RUN_IN_SANDBOX` is what runs the command.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cluster import dispatch, egress, run_tokens, sandbox, warm
from cluster.identity import SandboxUnavailable
from cluster.runner import browser as guest
from cluster.runner.protocol import RpcError
from kernel.models import Run

SECONDS = 150.0  # the guest driver's own deadline: Chromium's start, then the page's load
# Chromium's first start under TCG took 26 s of a 1-core guest (48 s with its usual several
# processes); a loaded node takes longer. The boot has its own deadline (cluster/runner/vm.py).
WALL_SECONDS = 240.0
BOOT_SECONDS = 120.0  # a boot's own deadline under TCG (cluster/runner/vm.py)
MAX_CHARS = 2_000_000  # of the document's HTML, as a fetched page's bytes
LIMITS = sandbox.Limits(
    wall_seconds=WALL_SECONDS,
    cpu_seconds=int(WALL_SECONDS),
    processes=256,  # threads count: Chromium in one process runs dozens
    memory_bytes=1 << 30,
    file_bytes=64 << 20,
    output_bytes=4 * MAX_CHARS + 100_000,  # UTF-8 and JSON's escapes: up to 4 bytes a char
    cpus=1.0,
    tmp_bytes=256 << 20,  # Chromium's profile and caches
    disk_bytes=64 << 20,
)
# The kept Chromium's CPU over its whole life (a page takes seconds of it): past it, the browser
# ends and the next page starts a fresh one.
SERVICE_CPU_SECONDS = 3600


class BrowserError(Exception):
    """The page could not be rendered; the message says why, for the tool's error."""


@dataclass(frozen=True)
class RenderedPage:
    """The document as the page's scripts left it (HTML), where it ended up and its status."""

    url: str
    final_url: str
    html: str
    title: str
    status: int | None
    cut: bool  # the HTML was longer than MAX_CHARS
    note: str  # "" or what to know of it ("did not finish loading in time; read as it was")
    seconds: float  # the browser's own time, from its start to the document read back
    boot_id: str = ""  # the VM's: equal for two renders in one VM
    browser_pid: int | None = None  # the kept Chromium's, in the guest
    fresh: bool = True  # Chromium was started for this page


# (profile, step, stopping) -> the runner's `run` answer: the run's browser VM (the profile's
# `warm`) on a level-2 node that placement picks (the local one without a step); with a step, a
# node that already answered its key answers again instead of rendering twice.
Runner = Callable[[dict[str, Any], dispatch.StepRef | None, threading.Event | None], dict[str, Any]]


def on_a_node(
    profile: dict[str, Any], step: dispatch.StepRef | None, stopping: threading.Event | None
) -> dict[str, Any]:
    limits = profile["limits"]
    needs = dispatch.Needs(2, limits["memory_bytes"], limits["disk_bytes"])
    return dispatch.execute(profile, step=step, needs=needs, stopping=stopping)


RUN_IN_SANDBOX: Runner = on_a_node


def render(
    url: str,
    *,
    run_id: int,
    step: dispatch.StepRef | None = None,
    stopping: threading.Event | None = None,
    seconds: float = SECONDS,
) -> RenderedPage:
    """The page at `url` (already checked by the caller) rendered for `run_id`, as part of
    `step` (the journaled step asking), stopped early by `stopping`."""
    root_id = Run.objects.filter(pk=run_id).values_list("root_id", flat=True).first()
    try:
        attached = egress.attach(
            run_id=run_id,
            root_id=root_id or run_id,
            scopes=["egress", run_tokens.OUTBOUND],
            # The VM's boot comes before its wall clock, and the last request may end after it.
            seconds=int(WALL_SECONDS + BOOT_SECONDS + 60),
        )
    except SandboxUnavailable as error:
        raise BrowserError(f"the Web cannot be reached now: {error}") from None
    built = page_profile(
        url, seconds, run_id=run_id, key=warm.browser_key(run_id), attached=attached
    )
    try:
        answer = RUN_IN_SANDBOX(built, step, stopping)
    except RpcError as error:
        raise BrowserError(f"no virtual machine for the browser: {error.message}") from None
    return page(url, answer)


def page_profile(
    url: str, seconds: float, *, run_id: int | None, key: str, attached: egress.Attachment | None
) -> dict[str, Any]:
    """The level-2 profile of one page: the driver's `--page` command, in the warm VM `key`
    whose service is the driver itself, Chromium kept between pages."""
    driver = ["python3", "-I", "-c", Path(guest.__file__).read_text()]
    argv = [*driver, "--page", url, f"{seconds:g}", str(MAX_CHARS)]
    built = sandbox.profile(
        2, argv, None, LIMITS, None, run_id=run_id, stderr_apart=True, egress=attached
    )
    built["warm"] = key
    built["service"] = {"argv": [*driver, "--serve"], "cpu_seconds": SERVICE_CPU_SECONDS}
    return built


def page(url: str, answer: dict[str, Any]) -> RenderedPage:
    """The runner's answer to a page's profile, read as data (`BrowserError` if no page)."""
    return _page(url, sandbox.result(answer), str(answer.get("boot_id") or ""))


def _page(url: str, result: sandbox.Result, boot_id: str = "") -> RenderedPage:
    """The guest's answer, read as data: one JSON object, or a precise error."""
    if result.timed_out or result.cancelled or result.killed:
        why = result.killed or ("stopped" if result.cancelled else "timed out")
        raise BrowserError(f"the browser did not finish ({why}, {result.duration_ms} ms)")
    if result.truncated_bytes:
        raise BrowserError(f"the browser said more than {LIMITS.output_bytes} bytes")
    try:
        said = json.loads(result.output)
    except json.JSONDecodeError:
        said = None
    if not isinstance(said, dict):
        raise BrowserError(f"the browser ended (exit code {result.exit_code}) without a page")
    if "html" not in said:
        raise BrowserError(str(said.get("error") or "the browser gave no page")[:500])
    status, seconds, pid = said.get("status"), said.get("seconds"), said.get("browser_pid")
    return RenderedPage(
        url=url,
        final_url=str(said.get("final_url") or url),
        html=str(said["html"]),
        title=str(said.get("title") or ""),
        status=status if isinstance(status, int) and not isinstance(status, bool) else None,
        cut=bool(said.get("cut")),
        note=str(said.get("note") or "")[:500],
        seconds=float(seconds) if isinstance(seconds, int | float) else 0.0,
        boot_id=boot_id[:64],
        browser_pid=pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        fresh=said.get("fresh") is not False,
    )
