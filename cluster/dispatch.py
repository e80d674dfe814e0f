"""Where a sandbox runs: the one place the control plane picks a node for a profile.

`execute` sends a profile (`cluster.sandbox` builds it) to a node's runner and returns the
runner's result (the protocol's `run` result, docs/cluster.md). With a `StepRef` it goes through
`run` (fencing, a result file keyed by the step's idempotency key); without one (readiness checks,
`manage.py sandbox_exec`, the git helpers) it just executes, with no result file.

A step is placed (`cluster.placement`) on a node that offers its level and has what it needs,
each attempt recorded as a `Placement` (node, fence, the runner and environment versions it
answered). The local node is called in-process, the others over SSH (`cluster.nodes`). A node
lost mid-step (the connection dropped, no answer in time) is marked lost and the step placed
again on another node under a higher fence with the SAME idempotency key: a runner that already
accepted the higher fence refuses the older one, and one that already stored the key's result
answers it without running again. Runs without a step (readiness checks, `sandbox_exec`, the git
helpers) stay on the local node.

The fence sent to a runner is `kernel fence * 2**20 + placement number under that kernel fence`,
so it orders attempts first by the kernel's lease (a stale worker's attempts lose to the current
worker's, wherever they run) and then by placement.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import logging
import os
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import Max
from django.utils import timezone

from cluster import shipping, transport
from cluster.runner.handler import Handler
from cluster.runner.protocol import INVALID_PARAMS, UNAVAILABLE, RpcError, parse_profile

LOCAL = "local"
log = logging.getLogger(__name__)
# How far back a node back from lost has the fences of the steps it lost raised.
REJOIN_DAYS = 7
# A step placed again this many times (each time its node lost) is given up: the cluster is
# failing, not one node.
MAX_PLACEMENTS = 4
# On top of the profile's wall clock: starting the sandbox, writing the result, the network.
GRACE_SECONDS = 60.0
# Opening a relay of a run's egress socket on a node (`cluster.runner.relay`).
RELAY_SECONDS = 30.0
# Building a project's environment on a node that lacks it (`cluster.environments`).
SETUP_TIMEOUT = 1800.0 + GRACE_SECONDS


@dataclass(frozen=True)
class StepRef:
    """The journaled step a sandbox run belongs to: its id (per step, the same across attempts),
    its idempotency key and the fence of this attempt (`kernel.steps.StepCall.fence`)."""

    step_id: str
    key: str
    fence: int
    # Undoes what a lost attempt may have written (the workspace put back to the checkpoint
    # taken before the step) before the step is placed again: its effect is not doubled.
    before_retry: Callable[[], None] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Setup:
    """A project's environment to build on a node that lacks it (`cluster.environments`):
    `profile(workdir)` is the setup command's profile in the directory `checkout` makes (a clean
    checkout of the project, removed after), made only when the node lacks the version."""

    name: str
    version: str
    profile: Callable[[Path], dict[str, Any]] = field(compare=False, repr=False)
    checkout: Callable[[], contextlib.AbstractContextManager[Path]] = field(
        compare=False, repr=False
    )


def ensure_environment(
    call: Callable[[str, dict[str, Any]], Any], setup: Setup, *, remote: bool = False
) -> None:
    """Build `setup` through `call` (a node's runner) unless that node has it already: the
    checkout is made (and removed) only for a build. The runner takes a lock per version and
    answers a complete one at once, so two callers racing build it once."""
    built = call("environments", {})
    if any(
        isinstance(item, dict)
        and (item.get("name"), item.get("version")) == (setup.name, setup.version)
        for item in built or []
    ):
        return
    with setup.checkout() as workdir:
        profile = setup.profile(workdir)
        params = {"name": setup.name, "version": setup.version, "profile": profile}
        # A remote node builds in its own copy of the checkout.
        shipped = shipping.ship(call, profile) if remote else None
        if shipped is not None:
            params["tree"] = shipped.tree
        call("build_environment", params)


def execute_build(setup: Setup, *, stopping: threading.Event | None = None) -> None:
    """Build `setup` on the local node unless it has it (an owner's rebuild)."""
    handler = local_node()
    ensure_environment(
        lambda method, params: handler.call(method, params, stopping=stopping), setup
    )


@dataclass(frozen=True)
class Needs:
    """What placement weighs: the level the node must offer and the profile's limits."""

    level: int
    memory_bytes: int
    disk_bytes: int


def local_node() -> Handler:
    """The control plane's own node: its runner's handler, in this process, on `DATA_DIR/node`
    (a directory of the system's temp dir when Django is not configured)."""
    if settings.configured:
        state = Path(settings.DATA_DIR) / "node"
    else:
        state = Path(tempfile.gettempdir()) / f"agentos-node-{os.geteuid()}"
    return transport.local_handler(state, LOCAL)


def execute(
    profile: dict[str, Any],
    *,
    step: StepRef | None,
    needs: Needs,
    stopping: threading.Event | None = None,
    environment: Setup | None = None,
) -> dict[str, Any]:
    """Run `profile` on a node; raises `RpcError` as the runner answered it (-32602 a bad
    profile, -32010 a stale fence, -32011 no node can run it now).

    1. Choose a node (not one lost during this call). 2. Record the attempt under the next
    fence. 3. Call `run` there; a stop asked meanwhile is sent as `cancel`. 4. A lost node: mark
    the attempt lost, go to 1. 5. Record the runner's answer (or refusal) on the attempt.

    `environment` is built on the node first if it lacks that version (`ensure_environment`)."""
    if step is None:
        handler = local_node()
        if environment is not None:
            ensure_environment(
                lambda method, params: handler.call(method, params, stopping=stopping), environment
            )
        return handler.execute(parse_profile(profile), profile, stopping=stopping)
    # The registry's models: imported here, as `cluster.sandbox` (and so this module) also serves
    # programs that run without Django's apps.
    from cluster import placement
    from cluster.models import Placement

    longest = Placement._meta.get_field("key").max_length or 0
    if len(step.key) > longest:
        raise RpcError(INVALID_PARAMS, f"key is longer than {longest} characters")
    wanted = placement.Needs(
        level=needs.level, memory_bytes=needs.memory_bytes, disk_bytes=needs.disk_bytes
    )
    lost: list[str] = []
    # The nodes that ran an earlier step of this run hold a copy of its worktree: only what
    # changed since goes to them; any other is sent the whole tree, which placement weighs.
    holders = placement.holders(step.step_id.rsplit("-", 1)[0])
    for _ in range(MAX_PLACEMENTS):
        # Walked again each attempt: `before_retry` may have put the worktree back.
        worktree = shipping.Worktree.of(profile)
        try:
            node = placement.choose(
                wanted, exclude=lost, transfer=shipping.weigh(worktree, {LOCAL, *holders})
            )
        except placement.NoNode as error:
            raise RpcError(UNAVAILABLE, str(error)) from None
        attempt = placement.place(step_id=step.step_id, key=step.key, node=node, epoch=step.fence)
        try:
            result = _run_on(node, attempt.fence, step, profile, worktree, stopping, environment)
        except transport.TransportError as error:
            placement.finish(attempt, status=Placement.Status.LOST, error=error.reason)
            lost.append(node.name)
            if stopping is not None and stopping.is_set():
                raise RpcError(UNAVAILABLE, f"stopped while its node was lost: {error}") from None
            if step.before_retry is not None:
                step.before_retry()
            continue
        except transport.RunnerError as error:
            placement.finish(attempt, status=Placement.Status.REFUSED, error=error.message)
            raise RpcError(error.code, error.message) from None
        except RpcError as error:  # the worktree could not be sent or its changes applied
            placement.finish(attempt, status=Placement.Status.REFUSED, error=error.message)
            raise
        placement.finish(
            attempt,
            status=Placement.Status.DONE,
            runner_version=str(result.get("runner_version") or ""),
            environment=str(result.get("environment") or ""),
            replayed=bool(result.get("replayed")),
        )
        return result
    raise RpcError(
        UNAVAILABLE,
        f"step {step.step_id} was placed {MAX_PLACEMENTS} times and each node was lost "
        f"({', '.join(lost)})",
    )


def _run_on(
    node: Any,
    fence: int,
    step: StepRef,
    profile: dict[str, Any],
    worktree: shipping.Worktree | None,
    stopping: threading.Event | None,
    environment: Setup | None,
) -> dict[str, Any]:
    """One attempt's `run` on `node` under `fence`: its environment built there first if it
    lacks it; on a remote node, the worktree shipped before and its changes applied after."""
    from cluster import nodes  # the registry's models: here, as in `execute`

    timeout = float(profile.get("limits", {}).get("wall_seconds", 0)) + GRACE_SECONDS
    endpoint = nodes.endpoint(node)
    remote = isinstance(endpoint, transport.SshEndpoint)
    if environment is not None:
        ensure_environment(
            functools.partial(nodes.call, node, timeout=SETUP_TIMEOUT), environment, remote=remote
        )
    call = functools.partial(nodes.call, node, timeout=timeout)
    # A remote node works on its own copy of the worktree (`cluster.shipping`).
    shipped = shipping.ship(call, profile, worktree) if remote else None
    with (
        _egress_on(endpoint, profile) as placed,
        _cancel_on(stopping, endpoint, step.step_id),
    ):
        params = {"step_id": step.step_id, "key": step.key, "fence": fence, "profile": placed}
        if shipped is not None:
            params["tree"] = shipped.tree
        result: dict[str, Any] = nodes.call(node, "run", params, timeout=timeout)
    if shipped is not None:
        # Applied here, before the result reaches the journal: a crash after this and before
        # the journal answers the replay from the node's result (`settle`), applied again.
        back = shipping.bring_back(
            call,
            step.key,
            result,
            workdir=shipped.workdir,
            owner=shipped.owner,
            git_writable=shipped.git_writable,
        )
        result["transfer"] = {
            "sent_bytes": shipped.sent_bytes,
            "tree_bytes": shipped.total_bytes,
            "sent_seconds": shipped.seconds,
            **back,
        }
    return result


@contextlib.contextmanager
def _egress_on(endpoint: transport.Endpoint, profile: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The profile as `endpoint`'s node must see it. The run's egress socket is the control
    plane's: another node gets a relay of it (`cluster.runner.relay`) for the call's duration."""
    socket_path = profile.get("egress_socket")
    if socket_path is None or not isinstance(endpoint, transport.SshEndpoint):
        yield profile
        return

    def dial() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(socket_path))
        except OSError:
            sock.close()
            raise
        return sock

    with endpoint.relay(
        uid=int(profile["uid"]), gid=int(profile["gid"]), dial=dial, timeout=RELAY_SECONDS
    ) as relayed:
        yield {**profile, "egress_socket": relayed}


@contextlib.contextmanager
def _cancel_on(
    stopping: threading.Event | None, endpoint: transport.Endpoint, step_id: str
) -> Iterator[None]:
    """While a `run` waits for its answer, a set `stopping` is sent to the node as `cancel`: the
    runner kills the sandbox and answers the run (killed "cancelled")."""
    if stopping is None:
        yield
        return
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.1):
            if stopping.is_set():
                # The run's own call reports a node that cannot be reached.
                with contextlib.suppress(transport.TransportError, transport.RunnerError):
                    endpoint.call("cancel", {"step_id": step_id}, timeout=30)
                return

    thread = threading.Thread(target=watch, name="dispatch-cancel", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def rejoin(node: Any) -> list[str]:
    """A node back after it was lost: for each step it lost (within `REJOIN_DAYS`), cancel what
    may still run there (a runner cut off by the network, not dead) and, when the step was
    placed again since, raise the node's fence of the step to the latest one, so a late request
    of the lost attempt is refused there too. Returns the steps whose fence was raised.

    The protocol moves a runner's fence only through `run`: the fence is carried by a run of
    `/bin/true` under a key of its own (`fence-sync:<step>:<fence>`), no workdir."""
    # Here: the registry's models, as in `execute`; and `cluster.sandbox` imports this module.
    from cluster import nodes, sandbox
    from cluster.models import Placement

    since = timezone.now() - datetime.timedelta(days=REJOIN_DAYS)
    raised: list[str] = []
    lost = Placement.objects.filter(node=node, status=Placement.Status.LOST, created_at__gte=since)
    for step_id, fence in lost.values_list("step_id", "fence").distinct():
        with contextlib.suppress(transport.RunnerError):
            nodes.call(node, "cancel", {"step_id": step_id}, timeout=30)
        top = Placement.objects.filter(step_id=step_id).aggregate(top=Max("fence"))["top"]
        if top is None or top <= fence:
            continue
        params = {"step_id": step_id, "key": f"fence-sync:{step_id}:{top}", "fence": top}
        try:
            # Built as any profile (the seccomp program from the sandbox's own readiness).
            noop = sandbox.profile(
                1, ["/bin/true"], None, sandbox.Limits(wall_seconds=30), sandbox._ready()
            )
            nodes.call(node, "run", {**params, "profile": noop}, timeout=90)
        except transport.StaleFence:
            continue  # it already knows a fence as high
        except (transport.RunnerError, sandbox.SandboxUnavailable) as error:
            # The node is back all the same; the older fence stays refused where it was seen.
            log.warning("node %s: the fence of step %s not raised: %s", node.name, step_id, error)
            continue
        raised.append(step_id)
    return raised


def recorded(step: StepRef) -> dict[str, Any] | None:
    """The result a node already wrote for this step's key (an attempt that ran it and died
    before the journal recorded it), or None. Asks the nodes the step was placed on, latest
    first (the local node when it was never placed); an unreachable node is skipped."""
    from cluster import nodes, placement  # the registry's models: here, as in `execute`

    asked: list[str] = []
    for attempt in reversed(placement.attempts(step.step_id)):
        if attempt.node.name in asked:
            continue
        asked.append(attempt.node.name)
        try:
            found = nodes.endpoint(attempt.node).call("result", {"key": step.key}, timeout=30)
        except transport.TransportError:
            continue
        if found is not None:
            return dict(found)
    if LOCAL in asked:
        return None
    local: dict[str, Any] | None = local_node().call("result", {"key": step.key})
    return local


def settle(
    step: StepRef, result: dict[str, Any], *, workdir: Path, git_writable: bool = False
) -> None:
    """A result `recorded` found, of an attempt that ran on a node's own copy of the worktree:
    apply what it changed to `workdir` (again, if a crash came after the first time: applying
    is absolute). Raises `RpcError` when that node cannot be reached now."""
    if not isinstance(result.get("tree"), dict):
        return
    from cluster import nodes  # the registry's models: here, as in `execute`
    from cluster.models import Node

    node = Node.objects.filter(name=str(result.get("node"))).first()
    if node is None:
        raise RpcError(UNAVAILABLE, f"the node {result.get('node')!r} is not registered")
    call = functools.partial(nodes.call, node, timeout=GRACE_SECONDS)
    try:
        shipping.bring_back(
            call,
            step.key,
            result,
            workdir=workdir,
            owner=(workdir.stat().st_uid, workdir.stat().st_gid),
            git_writable=git_writable,
        )
    except transport.TransportError as error:
        raise RpcError(UNAVAILABLE, f"the step's changes are on {node.name}: {error}") from None
