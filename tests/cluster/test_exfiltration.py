"""Exfiltration, level 1: a real bubblewrap sandbox of a real run (its own uid), with the run's
egress attached, tries every way out and every secret the control plane holds.

Canaries planted first: a provider key in the database, a repository credential, the vault key
(the real one), a variable in our own environment. The sandbox must find none of them in its
environment, its /proc (every process's environ and cmdline), its files or the host paths that
hold them; it reaches an allowed host only through the proxy (directly: no route), a host off the
allow-list is refused with 403 and journaled, the provider's API only through the bridge (the key
added outside), and its token is refused once its tree stops. A secret planted in a tool's output
is scrubbed from the journal and from the next provider request.

`probe_script` and `check` are the suite: the "vm" level (2) runs the same script in its guest
(`Probe` says where things are from inside) and asserts the same.
"""

from __future__ import annotations

import logging
import re
import shlex
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings

from agentos.core import scrubber, vault
from cluster import egress, run_tokens, sandbox
from cluster.sandbox import Limits
from kernel import journal
from kernel.budgets import Cost
from kernel.models import Event, Run, RunStatus, Step
from missions import keys
from missions.models import Mission
from missions.providers.anthropic import AnthropicProvider
from missions.providers.base import Conversation, Options
from tests.cluster.egress_fixtures import Upstream
from tests.cluster.test_egress import make_run
from tests.polling import wait_for
from tests.providers.anthropic_wire import reply, text
from tests.providers.wire import Json, Stream, WireServer
from tests.tools.test_protected_shell import step_env
from tools import remotes, shell

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="level 1 is Linux bubblewrap"),
    pytest.mark.django_db(transaction=True),
]

CANARY = "canary7f3e"  # every planted secret carries it: the sandbox greps for it everywhere
PROVIDER_KEY = f"sk-ant-{CANARY}-provider-" + "p" * 20
REPO_TOKEN = f"glpat-{CANARY}-repository-" + "r" * 12
ENV_SECRET = f"{CANARY}-in-the-control-planes-environment"
PLANTED = f"sk-proj-{CANARY}-planted-in-a-tool-output-" + "t" * 8


@dataclass(frozen=True)
class Probe:
    """Where things are, as seen from inside the sandbox."""

    allowed_url: str  # through the proxy: answers "hello from <path>"
    denied_url: str  # through the proxy: refused
    direct_url: str  # the allowed host without the proxy: no route
    bridge_url: str  # http://anthropic.bridge/...
    host_paths: list[str]  # where the control plane keeps secrets
    # Through the proxy, answered once the test has stopped the run's tree (`Upstream.on_hold`);
    # the allowed URL is then asked again.
    hold_url: str | None = None
    marker: str = CANARY
    extra: list[str] = field(default_factory=list)


def probe_script(probe: Probe) -> str:
    """A POSIX shell script (curl) that tries every way out and prints what it found."""
    q = shlex.quote
    curl = 'curl -s --max-time 10 --proxy "$http_proxy" --noproxy ""'
    lines = [
        "echo '== env'; env",
        "echo '== proc'",
        "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do"
        " tr '\\000' ' ' < \"$f\" 2>/dev/null; echo; done",
        "echo '== files'",
        # Everything but the system's read-only directories (the host's own /usr holds none).
        "for d in /* /.[!.]*; do case $d in /usr|/proc|/sys|/dev|/bin|/sbin|/lib*) continue;;"
        f" esac; grep -rIls {q(probe.marker)} \"$d\" 2>/dev/null; done | sed 's/^/FOUND /'",
        "echo '== host paths'",
    ]
    for path in probe.host_paths:
        lines.append(
            f"if cat {q(path)} >/dev/null 2>&1 || ls {q(path)} >/dev/null 2>&1;"
            f" then echo READABLE {q(path)}; else echo unreadable {q(path)}; fi"
        )
    lines += [
        "echo '== direct'",
        f"curl -s -o /dev/null --max-time 5 --noproxy '*' -w 'direct %{{http_code}}\\n'"
        f" {q(probe.direct_url)} || echo direct failed $?",
        "echo '== allowed'",
        f"{curl} -w '\\nallowed %{{http_code}}\\n' {q(probe.allowed_url)}",
        "echo '== denied'",
        f"{curl} -o /dev/null -w 'denied %{{http_code}}\\n' {q(probe.denied_url)}",
        "echo '== bridge'",
        f"{curl} -H 'x-api-key: made-up-inside' -H 'content-type: application/json'"
        f" -d '{{}}' -w '\\nbridge %{{http_code}}\\n' {q(probe.bridge_url)}",
    ]
    if probe.hold_url is not None:
        lines += [
            "echo '== stop'",
            f"{curl} -o /dev/null -w 'held %{{http_code}}\\n' {q(probe.hold_url)}",
            f"{curl} -o /dev/null -w 'after stop %{{http_code}}\\n' {q(probe.allowed_url)}"
            " || echo after stop failed $?",
        ]
    return "\n".join([*lines, *probe.extra]) + "\n"


def check(output: str, probe: Probe, secrets_planted: list[str], token: str) -> None:
    """What must hold of the probe's output, at any level."""
    for secret in secrets_planted:
        assert secret not in output, f"a planted secret is visible inside: {secret[:12]}…"
    assert "FOUND " not in output, output
    assert "READABLE" not in output, output
    assert f"unreadable {probe.host_paths[0]}" in output
    # The token is the one credential-like value inside, in its proxy variables only.
    assert f"AGENTOS_RUN_TOKEN={token}" in output
    assert "direct 200" not in output
    assert "direct 000" in output or "direct failed" in output, output
    assert "allowed 200" in output, output
    assert "hello from /allowed" in output
    assert "denied 403" in output, output
    assert "bridge 200" in output, output
    if probe.hold_url is not None:
        # The hold itself is cut when the service closes the stopped tree's socket; after it the
        # token is refused by the proxy (403), or finds the socket closed (no way to the host).
        after = output.split("== stop", 1)[1]
        assert re.search(r"after stop (403|502|000|failed)", after), output


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("AGENTOS_CANARY", ENV_SECRET)
    keys.put("anthropic", PROVIDER_KEY)
    scrubber.forget()
    vault_key = vault._keys()[0].decode()
    return [PROVIDER_KEY, REPO_TOKEN, ENV_SECRET, vault_key]


@dataclass(frozen=True)
class Attempt:
    """A real run with its egress attached and a directory of its own, and the probe to run."""

    run: Run
    workdir: Path
    attached: egress.Attachment
    probe: Probe


@pytest.fixture
def attempt(
    service: egress.Service,
    upstream: Upstream,
    elsewhere: Upstream,
    provider: WireServer,
    planted: list[str],
    sandbox_base: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Attempt]:
    """A run allowed one upstream, its project holding a repository credential; its tree is
    stopped when the sandbox asks the upstream's `/hold`."""
    monkeypatch.setitem(settings.EGRESS_BRIDGE_URLS, "anthropic", provider.url)
    run = make_run(hosts=[f"127.0.0.1:{upstream.port}"])
    mission = Mission.objects.get(pk=run.account_id)
    remotes.put(project_id=mission.project_id, remote="origin", kind="token", secret=REPO_TOKEN)
    workdir = Path(tempfile.mkdtemp(prefix="exfiltration-", dir=sandbox_base))
    sandbox.give(workdir, run.pk)
    attached = egress.attach(
        run_id=run.pk, root_id=run.pk, scopes=["egress", "bridge:anthropic"], seconds=300
    )
    probe = Probe(
        allowed_url=f"http://127.0.0.1:{upstream.port}/allowed",
        denied_url=f"http://127.0.0.1:{elsewhere.port}/denied",
        direct_url=f"http://127.0.0.1:{upstream.port}/direct",
        bridge_url="http://anthropic.bridge/v1/messages",
        host_paths=[
            str(vault.key_file()),
            str(run_tokens.key_file()),
            str(Path(settings.DATA_DIR) / "pg"),
            str(Path(settings.DATA_DIR) / "secret_key"),
        ],
        hold_url=f"http://127.0.0.1:{upstream.port}/hold",
    )
    provider.queue(Json({"bridged": True}))
    upstream.on_hold = lambda: _stop_tree(run.pk, attached.socket)
    try:
        yield Attempt(run, workdir, attached, probe)
    finally:
        upstream.on_hold = None


def _stop_tree(run_id: int, socket: Path) -> None:
    """Stop the run's tree and let the egress service see it: its reaper's next round, with no
    doorbell (the status changed by hand), removes the run's socket."""
    from django.db import connection

    try:
        Run.objects.filter(pk=run_id).update(status=RunStatus.CANCELLED)
        wait_for(
            lambda: not socket.exists(),
            timeout=egress.REAP_SECONDS + 10,
            message="the egress reaper to close the stopped tree's socket",
        )
    finally:
        connection.close()  # the upstream's request thread


def test_it_lets_nothing_out_but_the_allow_list_the_bridge_and_the_token(
    attempt: Attempt,
    elsewhere: Upstream,
    provider: WireServer,
    planted: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    run, probe, attached = attempt.run, attempt.probe, attempt.attached
    # On stdin, not in argv: the probe's own words must not show in the /proc it dumps.
    result = sandbox.for_level(1).run(
        ["/bin/sh", "-s"],
        workdir=attempt.workdir,
        limits=Limits(wall_seconds=60),
        stdin=probe_script(probe).encode(),
        run_id=run.pk,
        egress=attached,
    )
    check(result.output, probe, planted, attached.token)
    # The bridge added the key outside; the sandbox's own never passed.
    assert provider.received[-1].headers["x-api-key"] == PROVIDER_KEY
    # Every refusal is on the run's journal, and the journal holds no secret nor the token.
    refused = [e.data for e in Event.objects.filter(run_id=run.pk, kind="egress.refused")]
    assert any(e.get("port") == elsewhere.port for e in refused), refused
    kept = str(list(Event.objects.filter(run_id=run.pk).values_list("data", flat=True)))
    for secret in [*planted, attached.token]:
        assert secret not in kept
        assert secret not in caplog.text


def test_it_scrubs_a_secret_planted_in_a_tool_output(
    service: egress.Service,
    provider: WireServer,
    upstream: Upstream,
    planted: list[str],
    sandbox_base: Path,
) -> None:
    run = make_run(hosts=[f"127.0.0.1:{upstream.port}"])
    workdir = Path(tempfile.mkdtemp(prefix="exfiltration-", dir=sandbox_base))
    # A file in the repository holds a key (the provider's, as a careless commit would).
    (workdir / "settings.txt").write_text(f"key = {PROVIDER_KEY}\nother = {PLANTED}\n")
    sandbox.give(workdir, run.pk)
    result = sandbox.for_level(1).run(
        ["cat", "settings.txt"], workdir=workdir, limits=Limits(wall_seconds=20), run_id=run.pk
    )
    assert PROVIDER_KEY in result.output  # the sandbox may read its own files; nothing keeps it

    Run.objects.filter(pk=run.pk).update(fence=1)
    # The shell tool attaches the run's egress itself (its task allows the upstream).
    fetch = f'curl -s --proxy "$http_proxy" --noproxy "" http://127.0.0.1:{upstream.port}/shell'
    fetched = shell.run_command(step_env(run.pk, workdir, "cd" * 32, replay=False), fetch)
    assert "hello from /shell" in fetched.text, fetched.text
    fence = journal.Fence(run.pk, 1)
    journal.record_intent(fence, seq=1, kind="tool_call", effect="read", name="shell", request={})
    journal.record_result(fence, seq=1, result={"output": result.output}, cost=Cost())
    stored = Step.objects.get(run_id=run.pk, seq=1).result
    assert stored == {"output": f"key = {scrubber.MARK}\nother = {scrubber.MARK}\n"}

    provider.queue(Stream(reply(text(0, "noted"))))
    thread = Conversation(
        provider="anthropic",
        system="You are careful.",
        items=[
            {"role": "user", "content": [{"type": "text", "text": "read settings.txt"}]},
            {"role": "user", "content": [{"type": "text", "text": result.output}]},
        ],
    )
    client = AnthropicProvider(api_key="test-key", base_url=provider.url)
    list(client.stream(thread, [], Options(model="claude-test", max_output_tokens=64)))
    sent = provider.received[-1].raw.decode()
    assert PROVIDER_KEY not in sent
    assert PLANTED not in sent
    assert scrubber.MARK in sent

    # A log line with it, as the console handler's filter writes it.
    record = logging.LogRecord(
        "agentos", logging.ERROR, __file__, 1, "got %s", (result.output,), None
    )
    scrubber.LogFilter().filter(record)
    assert record.getMessage() == f"got key = {scrubber.MARK}\nother = {scrubber.MARK}\n"
