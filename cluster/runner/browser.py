"""A page rendered by a real browser, inside a level-2 guest (docs/cluster.md, "Level 2").

This file runs in the guest, alone, as `python3 -I -c <this file> URL SECONDS MAX_CHARS`
(`cluster.browser` sends it): the standard library only, nothing of ours imported. It starts the
node's Chromium (the guest's /usr is the host's) in headless mode and drives it over the Chrome
DevTools Protocol on `--remote-debugging-pipe` (NUL-terminated JSON on fds 3 and 4: no port, no
network between the two), then prints one JSON object: the document as the page's scripts left
it, its title, its final URL and the main document's HTTP status.

Why not Playwright: its Python package drives its own Node.js program (the driver, in the
project's virtual environment), which the guest does not have: only /usr is shared. And driving
the guest's browser from Playwright on the host would have a host process speak the protocol
with a browser a hostile page may have taken over. What Playwright would do here is this file's
few commands: its switches for a quiet Chromium are taken from it.

How it goes out: only through the run's egress, `http_proxy` of the guest's environment
(`http://run:<token>@10.0.2.100:3128`). Chromium takes no credentials in `--proxy-server`, so
the token is given to the proxy's own challenge (`Fetch.authRequired` whose source is the
proxy, 407), never to a site's; loopback goes through the proxy too (Chromium bypasses it for
loopback by default). Requests of other schemes than http(s), data and blob are failed.

Kept running (a VM kept warm for the run's browser): `--serve` is the guest's service
(`cluster.runner.vmguest`), Chromium started at its first page and kept for the next, each page
asked for on a unix socket in the service's home by `--page URL SECONDS MAX_CHARS`, the command of
each render, which passes the answer on as its output. Each page brings its command's proxy URL:
the token of that render answers the proxy's challenge, so the browser outlives any token. A
Chromium that ended or broke is dropped and the next page starts a fresh one; without a service
(a one-shot VM) `--page` renders alone, as the plain form does.

No Chromium sandbox: the guest has no user namespaces; the VM is the boundary. `--single-process`
because under TCG every process Chromium starts costs seconds of translated start-up (measured:
26 s for a first page in one process, 48 s with its usual several).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import sys
import tempfile
import time
import urllib.parse
from typing import Any

CHROMIUM = "/usr/lib/chromium/chromium"
# Playwright's own switches for a quiet, automatable Chromium, of those that matter here: none
# of Chromium's own requests (time queries, search preconnects, account checks, updates) may go
# out through the run's egress.
QUIET_FEATURES = (
    "NetworkTimeServiceQuerying",
    "AimEnabled",
    "PreconnectToSearch",
    "OptimizationHints",
    "MediaRouter",
    "DialMediaRouteProvider",
    "Translate",
    "LensOverlay",
    "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable",
    "CertificateTransparencyComponentUpdater",
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--single-process",
    "--no-zygote",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-field-trial-config",
    "--disable-background-networking",
    "--disable-breakpad",
    "--disable-client-side-phishing-detection",
    "--disable-component-extensions-with-background-pages",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-extensions",
    "--disable-sync",
    "--disable-search-engine-choice-screen",
    "--metrics-recording-only",
    "--no-default-browser-check",
    "--no-first-run",
    "--no-pings",
    "--no-service-autorun",
    "--password-store=basic",
    "--use-mock-keychain",
    "--mute-audio",
    "--disable-features=" + ",".join(QUIET_FEATURES),
    "--enable-features=SkipListAccountsWithoutGaiaCookies",
    "--allow-browser-signin=false",
    # Its account check (ListAccounts) and its push-messaging check-in are sent whatever the
    # switches above: to names no egress resolves, so they are refused there, not sent on.
    "--gaia-url=http://gaia.invalid",
    "--gcm-checkin-url=http://gcm.invalid/checkin",
    "--gcm-registration-url=http://gcm.invalid/register",
    "--gcm-mcs-endpoint=https://gcm.invalid:5228",
    "--proxy-bypass-list=<-loopback>",
    "--remote-debugging-pipe",
)
SCHEMES = ("http", "https", "data", "blob")
# After the load event, what the page's scripts do next: until no request has been in flight for
# QUIET_SECONDS, at most SETTLE_SECONDS (a page that polls forever is read as it is then).
QUIET_SECONDS = 0.5
SETTLE_SECONDS = 10.0
PROXY_NAMES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
SERVICE_HOME = "/tmp/.service"  # noqa: S108 (vmguest.SERVICE_HOME: made by the guest's root)
SOCKET = SERVICE_HOME + "/browser.sock"
MAX_REQUEST = 1 << 16
CONNECT_SECONDS = 20.0  # the service's own start: a python3 under TCG


class Failed(Exception):
    """The page could not be rendered; the message says why (for the tool's error)."""


class Pipe:
    """The DevTools protocol over the two pipes: commands out, answers and events in."""

    def __init__(self, out_fd: int, in_fd: int, deadline: float) -> None:
        self.out_fd, self.in_fd, self.deadline = out_fd, in_fd, deadline
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str = "") -> int:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self.out_fd, data) :]
        return self.next_id

    def call(self, method: str, params: dict[str, Any] | None = None, session: str = "") -> Any:
        wanted = self.send(method, params, session)
        while True:
            message = self.receive(self.deadline)
            if message is None:
                raise Failed(f"the browser did not answer {method} in time")
            if message.get("id") == wanted:
                if "error" in message:
                    raise Failed(f"{method}: {message['error'].get('message', 'failed')}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def receive(self, until: float) -> dict[str, Any] | None:
        """The next message, or None at `until`."""
        while b"\0" not in self.buffer:
            left = until - time.monotonic()
            if left <= 0 or not select.select([self.in_fd], [], [], left)[0]:
                return None
            chunk = os.read(self.in_fd, 1 << 20)
            if not chunk:
                raise Failed("the browser ended")
            self.buffer += chunk
        raw, _, self.buffer = self.buffer.partition(b"\0")
        found = json.loads(raw)
        return found if isinstance(found, dict) else {}


def render(url: str, seconds: float, max_chars: int) -> dict[str, Any]:
    """1. Start Chromium on the pipes. 2. Open a page, intercept its requests (schemes, the
    proxy's challenge, the main document's status). 3. Navigate, wait for the load event and
    for its requests to settle (or the deadline). 4. Read the document back."""
    started = time.monotonic()
    proxy = urllib.parse.urlsplit(os.environ.get("http_proxy", ""))
    pid, pipe = start(proxy, started + seconds)
    try:
        return read(pipe, proxy, url, max_chars) | {"seconds": round(time.monotonic() - started, 3)}
    finally:
        with contextlib.suppress(OSError):
            pipe.send("Browser.close")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def start(proxy: urllib.parse.SplitResult, deadline: float, kept: bool = False) -> tuple[int, Pipe]:
    """Chromium, started on the pipes: its process id and its end of the protocol. A browser
    kept for several pages (a VM kept warm for its run) reads each with `read`: measured under
    TCG, a page after the first took 4 to 5 s against 26 s for Chromium's start."""
    if not os.access(CHROMIUM, os.X_OK):
        raise Failed(f"this node has no Chromium ({CHROMIUM}): apt-get install chromium")
    # The browser gets no token in its environment: only this driver answers the challenge.
    env = {k: v for k, v in os.environ.items() if k.lower() not in PROXY_NAMES}
    env.pop("AGENTOS_RUN_TOKEN", None)
    env["DBUS_SESSION_BUS_ADDRESS"] = "disabled:"
    flags = [*FLAGS, f"--user-data-dir={tempfile.mkdtemp(prefix='browser-')}"]
    if proxy.hostname:
        flags.append(f"--proxy-server=http://{proxy.hostname}:{proxy.port or 80}")
    to_browser, commands = os.pipe()
    answers, from_browser = os.pipe()
    pid = os.posix_spawn(
        CHROMIUM,
        [CHROMIUM, *flags, "about:blank"],
        env,
        file_actions=[
            (os.POSIX_SPAWN_DUP2, to_browser, 3),
            (os.POSIX_SPAWN_DUP2, from_browser, 4),
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            # Its chatter would only eat into the output the node keeps.
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
        ],
        # Kept: in the service's session (a command's end spares it), its own process group.
        **({"setpgroup": 0} if kept else {"setsid": True}),
    )
    os.close(to_browser)
    os.close(from_browser)
    return pid, Pipe(commands, answers, deadline)


def read(pipe: Pipe, proxy: urllib.parse.SplitResult, url: str, max_chars: int) -> dict[str, Any]:
    """The page at `url` in a new tab of a started browser, or {"error": why not}."""
    page = Page(pipe, proxy)
    found = page.load(url)
    if page.error:
        return {"error": f"{url} could not be loaded: {page.error}"}
    found.update(page.document(max_chars))
    pipe.send("Target.closeTarget", {"targetId": page.target})  # not waited for
    return found


class Page:
    """One tab, its requests intercepted."""

    def __init__(self, pipe: Pipe, proxy: urllib.parse.SplitResult) -> None:
        self.pipe = pipe
        self.credentials = (
            urllib.parse.unquote(proxy.username or "run"),
            urllib.parse.unquote(proxy.password or ""),
        )
        self.target = ""
        self.session = ""
        self.navigation = 0
        self.status: int | None = None
        self.loaded: float | None = None
        self.in_flight: set[str] = set()
        self.quiet_since = 0.0
        self.error = ""

    def load(self, url: str) -> dict[str, Any]:
        pipe = self.pipe
        self.target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = pipe.call("Target.attachToTarget", {"targetId": self.target, "flatten": True})
        self.session = attached["sessionId"]
        patterns = [
            {"urlPattern": "*", "requestStage": "Request"},
            {"urlPattern": "*", "resourceType": "Document", "requestStage": "Response"},
        ]
        fetch = {"patterns": patterns, "handleAuthRequests": True}
        pipe.call("Fetch.enable", fetch, self.session)
        pipe.call("Page.enable", {}, self.session)
        pipe.call("Network.enable", {}, self.session)
        self.navigation = pipe.send("Page.navigate", {"url": url}, self.session)
        while not self.error:
            until = pipe.deadline
            if self.loaded is not None:
                settled = self.loaded + SETTLE_SECONDS
                if not self.in_flight:
                    settled = min(settled, max(self.quiet_since, self.loaded) + QUIET_SECONDS)
                until = min(until, settled)
            message = pipe.events.pop(0) if pipe.events else pipe.receive(until)
            if message is None:
                break
            self.handle(message)
        note = "" if self.loaded else "the page did not finish loading in time; read as it was"
        return {"status": self.status, "note": note}

    def handle(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params") or {}
        if message.get("sessionId", self.session) != self.session:
            return  # a tab of an earlier page, closing
        if message.get("id") == self.navigation:
            result = message.get("result") or {}
            failed = (message.get("error") or {}).get("message") or result.get("errorText")
            if failed:  # the network said no: a refused tunnel, a name not found
                self.error = str(failed)
                if "ERR_TUNNEL_CONNECTION_FAILED" in self.error:
                    self.error += " (the egress proxy refused it: the run's policy, or the host)"

        elif method == "Fetch.requestPaused":
            self.paused(params)
        elif method == "Fetch.authRequired":
            # The token answers the egress proxy's challenge only; a site asking gets nothing.
            answer: dict[str, Any] = {"response": "CancelAuth"}
            if (params.get("authChallenge") or {}).get("source") == "Proxy":
                user, password = self.credentials
                answer = {"response": "ProvideCredentials", "username": user, "password": password}
            reply = {"requestId": params["requestId"], "authChallengeResponse": answer}
            self.pipe.send("Fetch.continueWithAuth", reply, self.session)
        elif method == "Page.loadEventFired" and self.loaded is None:
            self.loaded = time.monotonic()
        elif method == "Network.requestWillBeSent":
            self.in_flight.add(str(params.get("requestId")))
        elif method in ("Network.loadingFinished", "Network.loadingFailed"):
            self.in_flight.discard(str(params.get("requestId")))
            if not self.in_flight:
                self.quiet_since = time.monotonic()

    def paused(self, params: dict[str, Any]) -> None:
        request = params.get("request") or {}
        scheme = urllib.parse.urlsplit(str(request.get("url", ""))).scheme
        if "responseStatusCode" in params and params.get("frameId") == self.target:
            self.status = int(params["responseStatusCode"])
        if scheme in SCHEMES:
            self.pipe.send(
                "Fetch.continueRequest", {"requestId": params["requestId"]}, self.session
            )
        else:
            failed = {"requestId": params["requestId"], "errorReason": "BlockedByClient"}
            self.pipe.send("Fetch.failRequest", failed, self.session)

    def document(self, max_chars: int) -> dict[str, Any]:
        """The document as its scripts left it, its title and URL."""
        self.pipe.deadline = max(self.pipe.deadline, time.monotonic() + 30)
        expression = (
            "({url: location.href, title: document.title,"
            " html: document.documentElement ? document.documentElement.outerHTML : ''})"
        )
        # Requests still paused would hold the evaluation back: the interception ends first.
        self.pipe.send("Fetch.disable", {}, self.session)
        evaluated = self.pipe.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, self.session
        )
        value = (evaluated.get("result") or {}).get("value") or {}
        html = str(value.get("html", ""))
        return {
            "final_url": str(value.get("url", "")),
            "title": str(value.get("title", "")),
            "html": html[:max_chars],
            "cut": len(html) > max_chars,
        }


class Kept:
    """The service's Chromium between pages."""

    def __init__(self, proxy: urllib.parse.SplitResult, deadline: float) -> None:
        self.via = (proxy.hostname, proxy.port)
        self.pid, self.pipe = start(proxy, deadline, kept=True)

    def ended(self) -> bool:
        try:
            return os.waitpid(self.pid, os.WNOHANG)[0] != 0
        except ChildProcessError:
            return True

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.pipe.send("Browser.close")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        for fd in (self.pipe.out_fd, self.pipe.in_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def serve() -> int:
    """The service: one page at a time, for as long as the VM keeps it."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(SOCKET)
    listener.listen(1)
    browser: Kept | None = None
    while True:
        connection, _ = listener.accept()
        with connection:
            try:
                connection.settimeout(CONNECT_SECONDS)
                request = json.loads(connection.makefile("rb").readline(MAX_REQUEST))
                answer, browser = serve_page(request, browser)
                connection.settimeout(None)
                data = json.dumps(answer, ensure_ascii=False).encode("utf-8", "replace")
                connection.sendall(data)
            except (OSError, ValueError, TypeError, KeyError):
                continue  # the command went away (stopped), or asked nonsense


def serve_page(request: dict[str, Any], browser: Kept | None) -> tuple[dict[str, Any], Kept | None]:
    """The page of `request` in the kept Chromium (started first if there is none, or if it
    ended); the answer, and the browser to keep (None after a failure)."""
    started = time.monotonic()
    proxy = urllib.parse.urlsplit(str(request.get("proxy") or ""))
    deadline = started + float(request["seconds"])
    if browser is not None and (browser.ended() or browser.via != (proxy.hostname, proxy.port)):
        browser.stop()
        browser = None
    fresh = browser is None
    try:
        if browser is None:
            browser = Kept(proxy, deadline)
        browser.pipe.deadline = deadline
        browser.pipe.events.clear()
        found = read(browser.pipe, proxy, str(request["url"]), int(request["max_chars"]))
    except (Failed, OSError, ValueError, KeyError) as error:
        if browser is not None:
            browser.stop()
        return {"error": f"the browser failed: {error}"}, None
    took = round(time.monotonic() - started, 3)
    return found | {"seconds": took, "browser_pid": browser.pid, "fresh": fresh}, browser


def page(url: str, seconds: float, max_chars: int) -> bytes:
    """A render's command: the page from the service, or rendered here when there is none."""
    if not os.path.isdir(SERVICE_HOME):  # noqa: PTH112 (the driver's few imports)
        found = render(url, seconds, max_chars)
        return json.dumps(found, ensure_ascii=False).encode("utf-8", "replace")
    request = {"url": url, "seconds": seconds, "max_chars": max_chars}
    request["proxy"] = os.environ.get("http_proxy", "")
    until = time.monotonic() + CONNECT_SECONDS
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        while True:
            try:
                connection.connect(SOCKET)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() > until:
                    raise Failed("the browser service did not start") from None
                time.sleep(0.05)
        connection.sendall(json.dumps(request).encode() + b"\n")
        answer = connection.makefile("rb").read(4 * max_chars + 100_000)
    if not answer:
        raise Failed("the browser service ended without an answer")
    return answer


def main(argv: list[str]) -> int:
    if argv[1:] == ["--serve"]:
        return serve()
    if argv[1] == "--page":
        try:
            sys.stdout.buffer.write(page(argv[2], float(argv[3]), int(argv[4])))
        except (Failed, OSError, ValueError, KeyError) as error:
            print(json.dumps({"error": f"the browser failed: {error}"}))
            return 1
        return 0
    url, seconds, max_chars = argv[1], float(argv[2]), int(argv[3])
    try:
        found = render(url, seconds, max_chars)
    except (Failed, OSError, ValueError, KeyError) as error:
        print(json.dumps({"error": f"the browser failed: {error}"}))
        return 1
    # Unescaped (a page's text in UTF-8 is a third of its \\u escapes); a lone surrogate a
    # script left in the document becomes "?".
    sys.stdout.buffer.write(json.dumps(found, ensure_ascii=False).encode("utf-8", "replace"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
