"""Egress: the only way out of a sandbox. One Unix socket per run (`<egress dir>/<run>.sock`, 0600,
owned by the run's sandbox uid, bound in the sandbox at /run/agentos/egress.sock), served by an
asyncio service on the control plane that answers as an HTTP proxy:

- `CONNECT host:port` and absolute-URI plain HTTP, to hosts the run's policy allows (the policy
  is registered by the application above, in `EGRESS_POLICY`); anything else is refused with 403.
  The service resolves names: the sandbox has no DNS and no route anywhere.
- `http://<service>.bridge/<path>`: the API bridge. The bridge registered under that name
  (`BRIDGES`) gives the upstream URL and the credential headers, read from the vault here,
  outside the sandbox; the sandbox never holds them.

Every request carries the run's token (`cluster.run_tokens`) in `Proxy-Authorization` (Basic
with any user name, as `http://run:<token>@127.0.0.1:3128` in `http_proxy` makes clients send it, or
Bearer), valid for that socket's run and scope, and the run's tree must be neither stopped nor
asked to stop (`cluster.trees`, read for every request). Every decision is an event on the run's
journal: `egress.allowed`, `egress.bridged`, `egress.refused`. The request is parsed strictly
(`cluster.proxy`): a head two parsers could read two ways is refused with 400.

Sockets are opened on request through the control socket (`attach`, from the process that starts
the sandbox) and closed, with every connection open on them, once the run's tree stops or is
asked to: within `REAP_SECONDS`, at once when the kernel's channel rings. The socket files are
the service's only state: a service started after a crash binds again every socket whose run is
still going.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import socket
import ssl
import stat
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection

from agentos.core.registries import Registry
from cluster import bridges, proxy, run_tokens, trees
from cluster.identity import SandboxUnavailable, identity
from kernel import budgets, journal
from kernel.models import Run

logger = logging.getLogger(__name__)

CONTROL = "control.sock"
PROXY_PORT = 3128  # where the in-sandbox forwarder listens (cluster.runner.forwarder)
HEAD_SECONDS = 30.0
CONNECT_SECONDS = 10.0
# How often the sockets of stopped trees are closed when no notification says so sooner: a stop
# cuts its tree's connections within a second even when its doorbell is lost.
REAP_SECONDS = 0.5
BODY_LIMIT = 64 * 1024 * 1024
BRIDGE_SUFFIX = ".bridge"


# --- What the applications register ---------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str


@dataclass(frozen=True)
class Policy:
    """The allow-list. `decide(run id, host, port)` judges every direct destination of every run
    (called in a worker thread: it may read the database); `needs(run id)` says which token scopes
    a run's sandboxes get ("egress", "bridge:<name>"; [] for none: no network at all, no socket
    opened); `exposure(run id, destination, sandboxed)` judges what an allowed request exposes
    (the rule of two, `kernel.exposure`): `destination` is "host:port" or "bridge:<name>", and
    `sandboxed` is False for the control plane's own requests (`cluster.outbound`), which the
    harness judged before the call."""

    decide: Callable[[int, str, int], Verdict]
    needs: Callable[[int], list[str]]
    exposure: Callable[[int, str, bool], Verdict] | None = None


# One policy, registered by the application that knows the runs' tasks (by its name); none, or
# more than one, and nothing is reachable.
EGRESS_POLICY: Registry[Policy] = Registry("egress policy")


def decide(run_id: int, host: str, port: int) -> Verdict:
    policies = EGRESS_POLICY.values()
    if not policies:
        return Verdict(False, "no egress policy is registered: nothing is reachable")
    if len(policies) > 1:
        named = ", ".join(EGRESS_POLICY.names())
        return Verdict(False, f"several egress policies are registered ({named}): none is used")
    return policies[0].decide(run_id, host, port)


def _exposure(run_id: int, destination: str, sandboxed: bool) -> Verdict:
    policies = EGRESS_POLICY.values()
    judge = policies[0].exposure if len(policies) == 1 else None
    return judge(run_id, destination, sandboxed) if judge is not None else Verdict(True, "")


# --- Where the sockets are ------------------------------------------------------------------------


def directory() -> Path:
    configured = os.environ.get("AGENTOS_EGRESS_DIR")
    return Path(configured) if configured else Path(settings.DATA_DIR) / "egress"


def socket_path(run_id: int) -> Path:
    return directory() / f"{run_id}.sock"


@dataclass(frozen=True)
class Attachment:
    """What a sandbox of a run gets: its socket (for `profile.egress_socket`) and the environment
    that points its clients at the in-sandbox forwarder with the run's token."""

    socket: Path
    token: str
    env: dict[str, str]


def attach(*, run_id: int, root_id: int, scopes: list[str], seconds: int) -> Attachment:
    """Open `run_id`'s socket (through the running egress service) and mint its token for
    `seconds`. Raises `SandboxUnavailable` when the service does not answer."""
    answer = control({"open": run_id})
    path = Path(answer["socket"])
    _check_reachable(path)
    token = run_tokens.mint(run_id=run_id, root_id=root_id, scopes=scopes, seconds=seconds)
    url = f"http://run:{token}@127.0.0.1:{PROXY_PORT}"
    env = {"AGENTOS_RUN_TOKEN": token}
    # Both cases: curl reads only the lowercase http_proxy, other clients the uppercase ones.
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        env[name] = env[name.upper()] = url
    env["no_proxy"] = env["NO_PROXY"] = "localhost,127.0.0.1,::1"
    return Attachment(path, token, env)


def attach_for_run(run_id: int, *, seconds: float) -> Attachment | None:
    """The egress of a command of `run_id` that may run `seconds`: None when the run needs no
    network (nothing on its allow-list, no bridge) or when the service does not answer (logged:
    the command then runs without network, as every sandbox does by default)."""
    policies = EGRESS_POLICY.values()
    scopes = policies[0].needs(run_id) if len(policies) == 1 else []
    if not scopes:
        return None
    root_id = Run.objects.filter(pk=run_id).values_list("root_id", flat=True).first()
    lifetime = min(int(seconds) + 60, run_tokens.MAX_SECONDS)  # the command, then its last request
    try:
        return attach(run_id=run_id, root_id=root_id or run_id, scopes=scopes, seconds=lifetime)
    except SandboxUnavailable as error:
        logger.warning("run %s: %s; its command runs without network", run_id, error)
        return None


def detach(run_id: int) -> None:
    """Close `run_id`'s socket now (the reaper would once its tree stops)."""
    control({"close": run_id})


def control(request: dict[str, int]) -> dict[str, str]:
    path = directory() / CONTROL
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(CONNECT_SECONDS)
            client.connect(str(path))
            client.sendall(json.dumps(request).encode() + b"\n")
            raw = client.makefile("rb").readline()
    except OSError as error:
        raise SandboxUnavailable(
            f"the egress service does not answer on {path} ({error}): it runs with `manage.py"
            " serve` (or alone: `manage.py egress`)"
        ) from None
    answer = json.loads(raw or b"{}")
    if "error" in answer or not raw:
        raise SandboxUnavailable(f"the egress service refused: {answer.get('error', 'no answer')}")
    return dict(answer)


def _check_reachable(path: Path) -> None:
    """bwrap binds the socket as the sandbox uid: every directory above it must be searchable by
    others (the socket itself is that uid's alone)."""
    for parent in reversed(path.parents):
        if not parent.stat().st_mode & stat.S_IXOTH:
            raise SandboxUnavailable(
                f"sandboxes cannot reach their egress socket {path}: {parent} is not searchable by"
                f" others. Set AGENTOS_EGRESS_DIR to a directory under a searchable path, or"
                f" chmod o+x {parent} yourself."
            )


# --- The service ----------------------------------------------------------------------------------


@dataclass
class _Open:
    server: asyncio.Server
    root_id: int
    connections: set[asyncio.Task[None]] = field(default_factory=set)


class Service:
    """The egress service. `serve()` runs it until `stop()`; `running()` runs it in a thread."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or directory()
        self._open: dict[int, _Open] = {}
        self._accounts: dict[int, int | None] = {}  # for the journal, from the last judgement
        self._stopping: asyncio.Event | None = None
        self._rung: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # 1. Prepare the directory. 2. Bind again the sockets of runs still going. 3. Answer the
    # control socket and reap stopped trees until stopped: when the kernel's channel rings (a
    # stop requested), else every REAP_SECONDS.
    async def serve(self, ready: threading.Event | None = None) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        rung = self._rung = asyncio.Event()
        doorbell = trees.Doorbell(lambda: loop.call_soon_threadsafe(rung.set))
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o711)  # searchable (bwrap binds a socket by path), not listable
        control_path = self.root / CONTROL
        control_path.unlink(missing_ok=True)
        await self._reopen()
        # The control socket appears last, listening and ours alone (bound under another name,
        # then renamed): whoever sees it finds every socket served.
        temporary = self.root / f".{CONTROL}.tmp"
        temporary.unlink(missing_ok=True)
        server = await asyncio.start_unix_server(self._control, path=str(temporary))
        temporary.chmod(0o600)
        temporary.replace(control_path)
        doorbell.start()
        if ready is not None:
            ready.set()
        try:
            while not self._stopping.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(rung.wait(), REAP_SECONDS)
                rung.clear()
                try:
                    await self._reap()
                except Exception:  # the database away for a moment: the next round retries
                    logger.exception("egress: cannot check the open runs' trees")
        finally:
            await asyncio.to_thread(doorbell.stop)
            server.close()
            for run_id in list(self._open):
                await self._close(run_id, unlink=False)  # kept: a restart binds them again
            control_path.unlink(missing_ok=True)

    def stop(self) -> None:
        if self._loop is not None and self._stopping is not None and self._rung is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._loop.call_soon_threadsafe(self._rung.set)

    async def _reopen(self) -> None:
        for entry in self.root.iterdir():
            match = re.fullmatch(r"(\d+)\.sock", entry.name)
            if match is None:
                continue
            run_id = int(match.group(1))
            try:
                await self._bind(run_id)
            except (LookupError, OSError) as error:
                logger.info("egress socket of run %s not re-opened: %s", run_id, error)
                entry.unlink(missing_ok=True)

    async def _control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), HEAD_SECONDS)
            request = json.loads(line)
            if not isinstance(request, dict) or len(request) != 1:
                raise ValueError("expected {open: run id} or {close: run id}")
            ((verb, run_id),) = request.items()
            if verb not in ("open", "close") or type(run_id) is not int or run_id < 1:
                raise ValueError("expected {open: run id} or {close: run id}")
            if verb == "open":
                answer = {"socket": str(await self._bind(run_id))}
            else:
                await self._close(run_id, unlink=True)
                answer = {"closed": str(run_id)}
        except (ValueError, LookupError, OSError, TimeoutError) as error:
            answer = {"error": str(error)}
        writer.write(json.dumps(answer).encode() + b"\n")
        with contextlib.suppress(OSError):
            await writer.drain()
        writer.close()

    async def _bind(self, run_id: int) -> Path:
        """Bind `run_id`'s socket (again, after a crash) unless it is open; LookupError when its
        tree is stopped or it is no run."""
        path = self.root / f"{run_id}.sock"
        tree = await self._tree(run_id)
        if tree.stopped:
            raise LookupError(f"run {run_id}: {tree.stopped}")
        if run_id in self._open:
            return path
        uid, gid = await asyncio.to_thread(identity, run_id)
        # Bound under a temporary name, given to the run's uid, then renamed into place: the
        # socket is never connectable by anyone else, even for an instant.
        temporary = self.root / f".{run_id}.sock.tmp"
        temporary.unlink(missing_ok=True)
        server = await asyncio.start_unix_server(
            lambda r, w: self._connection(run_id, r, w), path=str(temporary), limit=proxy.HEAD_LIMIT
        )
        try:
            temporary.chmod(0o600)
            if os.geteuid() == 0:
                os.chown(temporary, uid, gid)
            temporary.replace(path)
        except OSError:
            server.close()
            temporary.unlink(missing_ok=True)
            raise
        self._open[run_id] = _Open(server, tree.root_id)
        return path

    async def _close(self, run_id: int, *, unlink: bool) -> None:
        """1. Forget the run: a connection it makes from now on is closed unanswered. 2. Remove
        its socket's name: nobody connects any more. 3. Let the connections already accepted
        reach `_connection` (which closes them): Python 3.12's `Server.close()` leaves one it
        accepted but had not handed over yet open and unserved, its client waiting forever. The
        accept callback runs at the next iteration, the handover at the one after. 4. Close the
        server, and cancel every connection still open (a tunnel, a forwarded response)."""
        opened = self._open.pop(run_id, None)
        if unlink:
            (self.root / f"{run_id}.sock").unlink(missing_ok=True)
        if opened is None:
            return
        for _ in range(3):
            await asyncio.sleep(0)
        opened.server.close()
        for task in list(opened.connections):
            task.cancel()

    async def _reap(self) -> None:
        """Close the sockets (and their open connections) of every tree stopped or stopping."""
        if not self._open:
            return
        judged = await asyncio.to_thread(_in_thread, trees.judge, list(self._open))
        for run_id, tree in judged.items():
            if tree.stopped:
                await self._close(run_id, unlink=True)

    async def _tree(self, run_id: int) -> trees.Tree:
        """The run's tree as the database has it now: no cache, so no window after a stop."""
        tree = (await asyncio.to_thread(_in_thread, trees.judge, [run_id]))[run_id]
        self._accounts[run_id] = tree.account_id
        return tree

    # --- one client connection ---

    async def _connection(
        self, run_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        opened = self._open.get(run_id)
        if task is None or opened is None:
            writer.close()
            return
        opened.connections.add(task)
        try:
            await self._serve_one(run_id, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            logger.exception("egress: request of run %s failed", run_id)
        finally:
            opened.connections.discard(task)
            writer.close()

    async def _serve_one(
        self, run_id: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        request: proxy.Request | None = None
        try:
            head = await asyncio.wait_for(proxy.read_head(reader), HEAD_SECONDS)
            request = proxy.parse(head)
            destination = await self._judge(run_id, request)
        except proxy.Refused as refused:
            seen = request if request is not None else refused.head
            await self._event(run_id, "egress.refused", request=seen, reason=str(refused))
            extra = {"Proxy-Authenticate": 'Basic realm="agentos"'} if refused.status == 407 else {}
            await proxy.answer(writer, refused.status, str(refused), extra)
            return
        if request.method == "CONNECT":
            await self._tunnel(run_id, request, destination, reader, writer)
        else:
            await self._forward(run_id, request, destination, reader, writer)

    async def _judge(self, run_id: int, request: proxy.Request) -> proxy.Destination:
        """The token, the tree, then the destination; `Refused` at the first that fails."""
        bridge = request.host.endswith(BRIDGE_SUFFIX) and request.method != "CONNECT"
        name = request.host[: -len(BRIDGE_SUFFIX)] if bridge else ""
        scope = f"bridge:{name}" if bridge else "egress"
        try:
            claims = run_tokens.verify(proxy.token_of(request.headers), run_id=run_id, scope=scope)
        except run_tokens.TokenRefused as refused:
            raise proxy.Refused(refused.status, str(refused)) from None
        tree = await self._tree(run_id)
        if tree.stopped:
            raise proxy.Refused(403, f"run {run_id}: {tree.stopped}")
        if bridge:
            try:
                found = await asyncio.to_thread(_in_thread, bridges.upstream, run_id, name)
            except bridges.NoBridge as error:
                raise proxy.Refused(404, str(error)) from None
            except LookupError as error:
                raise proxy.Refused(503, f"bridge {name}: {error}") from None
            destination = bridges.destination(name, found, request.method, request.path)
            await self._expose(run_id, f"bridge:{name}", claims)
            return destination
        verdict = await asyncio.to_thread(_in_thread, decide, run_id, request.host, request.port)
        if not verdict.allowed:
            raise proxy.Refused(
                403, f"{request.host}:{request.port} is not allowed: {verdict.reason}"
            )
        await self._expose(run_id, f"{request.host}:{request.port}", claims)
        # Direct: a CONNECT tunnel (TLS end to end, the client's) or plain HTTP.
        return proxy.Destination(request.host, request.port, False, request.path, {}, "")

    async def _expose(self, run_id: int, destination: str, claims: run_tokens.Claims) -> None:
        sandboxed = run_tokens.OUTBOUND not in claims.scopes
        verdict = await asyncio.to_thread(_in_thread, _exposure, run_id, destination, sandboxed)
        if not verdict.allowed:
            raise proxy.Refused(403, f"{destination}: {verdict.reason}")

    async def _tunnel(
        self,
        run_id: int,
        request: proxy.Request,
        destination: proxy.Destination,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        upstream = await self._dial(run_id, request, destination, writer)
        if upstream is None:
            return
        up_reader, up_writer = upstream
        await self._event(run_id, "egress.allowed", request=request, reason="")
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await proxy.pipe_both(reader, writer, up_reader, up_writer)

    async def _forward(
        self,
        run_id: int,
        request: proxy.Request,
        destination: proxy.Destination,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        length = 0
        headers = [(k, v) for k, v in request.headers if k.lower() not in proxy.HOP]
        if any(k.lower() == "transfer-encoding" for k, _ in headers):
            await self._event(run_id, "egress.refused", request=request, reason="chunked body")
            await proxy.answer(writer, 411, "a request body needs a Content-Length")
            return
        for key, value in headers:
            if key.lower() == "content-length":  # one, digits only (`proxy.parse`)
                if int(value) > BODY_LIMIT:
                    reason = f"Content-Length {value} is over {BODY_LIMIT}"
                    await self._event(run_id, "egress.refused", request=request, reason=reason)
                    await proxy.answer(writer, 413, reason)
                    return
                length = int(value)
        if destination.bridge:
            # The sandbox's own credential headers never pass: the bridge's are the only ones.
            added = {k.lower() for k in destination.headers}
            headers = [(k, v) for k, v in headers if k.lower() not in added | {"authorization"}]
            headers += list(destination.headers.items())
        host = destination.host if destination.port in (80, 443) else destination.netloc
        headers = [("Host", host), *headers, ("Connection", "close")]
        try:
            # Before anything is dialled: a header h11 cannot write is refused here.
            client, head = proxy.upstream_request(request.method, destination.path, headers)
        except proxy.Refused as refused:
            await self._event(run_id, "egress.refused", request=request, reason=str(refused))
            await proxy.answer(writer, refused.status, str(refused))
            return
        upstream = await self._dial(run_id, request, destination, writer)
        if upstream is None:
            return
        up_reader, up_writer = upstream
        body = await reader.readexactly(length) if length else b""
        up_writer.write(head + proxy.upstream_body(client, body))
        await up_writer.drain()
        kind = "egress.bridged" if destination.bridge else "egress.allowed"
        cost = {"usd_micros": destination.usd_micros} if destination.usd_micros else {}
        await self._event(run_id, kind, request=request, reason=destination.bridge, **cost)
        if destination.usd_micros:
            await asyncio.to_thread(_in_thread, budgets.charge, run_id, destination.usd_micros)
        await proxy.pipe(up_reader, writer)
        up_writer.close()

    async def _dial(
        self,
        run_id: int,
        request: proxy.Request,
        destination: proxy.Destination,
        writer: asyncio.StreamWriter,
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(
                    destination.host,
                    destination.port,
                    ssl=ssl.create_default_context() if destination.tls else None,
                ),
                CONNECT_SECONDS,
            )
        except (OSError, TimeoutError) as error:
            reason = f"cannot reach {destination.netloc}: {error or 'timed out'}"
            await self._event(run_id, "egress.failed", request=request, reason=reason)
            await proxy.answer(writer, 502, reason)
            return None

    async def _event(
        self, run_id: int, kind: str, *, request: object, reason: str, **extra: object
    ) -> None:
        data: dict[str, object] = {"reason": run_tokens.scrub(reason), **extra}
        if isinstance(request, proxy.Request):
            data.update(method=request.method, host=request.host, port=request.port)
        elif isinstance(request, bytes):
            # The request line only (the headers may carry the token), as far as it was read.
            line = re.split("[\r\n]", request[:200].decode("latin-1"), maxsplit=1)[0]
            data["request"] = run_tokens.scrub(line)
        account = self._accounts.get(run_id)
        try:
            await asyncio.to_thread(_in_thread, _append, kind, run_id, account, data)
        except Exception:
            logger.exception("egress: cannot journal %s of run %s", kind, run_id)


# --- The database side (worker threads) -----------------------------------------------------------


def _in_thread[T](function: Callable[..., T], *args: object) -> T:
    """Database work from the event loop's worker threads. Each thread keeps its connection
    between requests (a connection per request would cost more than the request's own queries);
    one that failed is closed, and the next call opens a fresh one."""
    try:
        return function(*args)
    except (OperationalError, InterfaceError):
        connection.close()
        raise


def _append(kind: str, run_id: int, account_id: int | None, data: dict[str, Any]) -> None:
    journal.append_event(kind, run_id=run_id, account_id=account_id, **data)


# --- Running it -----------------------------------------------------------------------------------


@contextlib.contextmanager
def running(root: Path | None = None) -> Iterator[Service]:
    """The service on an event loop in a thread of this process (tests, `manage.py egress`)."""
    service = Service(root)
    ready = threading.Event()
    failure: list[BaseException] = []

    def main() -> None:
        try:
            asyncio.run(service.serve(ready))
        except BaseException as error:  # reported to the caller below
            failure.append(error)
            ready.set()

    thread = threading.Thread(target=main, name="egress", daemon=True)
    thread.start()
    ready.wait(timeout=30)
    if failure:
        raise failure[0]
    try:
        yield service
    finally:
        service.stop()
        thread.join(timeout=10)
