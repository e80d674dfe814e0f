"""What a run's sandbox may reach through egress (`cluster.egress`), and the bridges' credentials.

A run's sandboxes get a socket only when it `needs` one: something may be on its allow-list, or
its task names bridges (`bridges`: e.g. ["anthropic", "git"]). The allow-list of a run is its
task's hosts (`allowed_hosts` in the run's input, or its root's:
`host` or `host:port`, shell-style globs) plus the owner's permission rules for the tool `egress`
(pattern over `host:port`, or over the host alone when it has no colon; empty project: every
project). Deny → ask → allow as for every tool, except that nobody is there to ask: `ask` refuses,
and so does no match at all.

Bridges (`http://<name>.bridge/...` inside the sandbox): `anthropic` and `openai` with the
provider key (environment, else the vault), `git` with the token of the project's `origin` remote
to its clone URL, read-only (a push goes through the push tool and its approval, never through
a sandbox), and the owner's own (`cluster.bridges`). Upstream base URLs:
`settings.EGRESS_BRIDGE_URLS`.

Web tools (`WEB_TOOLS` in a run's tools) may also reach any public host: not a loopback,
private, link-local or reserved address, unless the task lists it.

The rule of two (`kernel.exposure`): a bridged request means the run holds a credential
(`private`); a host beyond its task's hosts means it communicates out (`outward`). A sandbox's
request that would set its tree's third flag is refused, since nobody can be asked in the middle
of a command. The control plane's own requests (`cluster.outbound`: a Web fetch, a remote MCP
server, another agent) mark nothing here: their tool declares its flags, and the harness judged
the call by them before it ran.
"""

from __future__ import annotations

import base64
import fnmatch
import ipaddress
import socket
from typing import Any

from django.conf import settings

from agentos.core import vault
from cluster import bridges, egress
from kernel import exposure
from kernel.models import Run
from missions import keys
from missions.models import Mission
from tools.models import CredentialKind, Decision, PermissionRule, RemoteCredential

TOOL = "egress"
# Tools that fetch from the Web on the control plane: a run that has one may reach public hosts.
WEB_TOOLS = frozenset({"web_fetch", "web_search"})
# The header each provider reads its key from.
HEADERS = {"anthropic": ("x-api-key", "{key}"), "openai": ("Authorization", "Bearer {key}")}


def decide(run_id: int, host: str, port: int) -> egress.Verdict:
    subject = f"{host}:{port}"
    run = Run.objects.filter(pk=run_id).values_list("input", "root_id", "account_id").first()
    if run is None:
        return egress.Verdict(False, f"no run {run_id}")
    given, root_id, account_id = run
    projects = Mission.objects.filter(pk=account_id).values_list("project_id", flat=True)
    project = projects.first()
    matched: dict[str, PermissionRule] = {}
    for rule in PermissionRule.objects.filter(tool=TOOL).order_by("pk"):
        if rule.project_id in (None, project) and _matches(rule.pattern, host, subject):
            matched.setdefault(rule.decision, rule)
    if Decision.DENY in matched:
        return egress.Verdict(False, f"denied by rule {matched[Decision.DENY].pk}")
    if Decision.ASK in matched:
        return egress.Verdict(
            False, f"rule {matched[Decision.ASK].pk} asks the owner; a sandbox cannot wait"
        )
    if Decision.ALLOW in matched:
        return egress.Verdict(True, f"allowed by rule {matched[Decision.ALLOW].pk}")
    for pattern in _task_hosts(given, root_id):
        if _matches(pattern, host, subject):
            return egress.Verdict(True, f"the task allows {pattern}")
    if _has_web_tools(given) and _public(host):
        return egress.Verdict(True, "a public host, for the run's Web tools")
    return egress.Verdict(False, "not on the run's allow-list (its task's hosts, egress rules)")


def exposure_of(run_id: int, destination: str, sandboxed: bool) -> egress.Verdict:
    """What a sandbox's allowed request exposes (module docstring); marks it, or refuses the
    request that would set its tree's third flag. The control plane's own requests are made by
    a tool whose call the harness judged by the flags it declares: they mark nothing more."""
    if not sandboxed:
        return egress.Verdict(True, "")
    if destination.startswith("bridge:"):
        flag, why = exposure.PRIVATE, f"bridge {destination.removeprefix('bridge:')}"
    else:
        host, _, port = destination.rpartition(":")
        run = Run.objects.filter(pk=run_id).values_list("input", "root_id").first()
        given, root_id = run if run is not None else (None, None)
        if any(_matches(p, host, destination) for p in _task_hosts(given, root_id)):
            return egress.Verdict(True, "")
        flag, why = exposure.OUTWARD, f"egress to {host}:{port}"
    tree = exposure.of_tree(run_id)
    if flag in tree.flags:
        return egress.Verdict(True, "")
    if tree.would_complete({flag}):
        return egress.Verdict(
            False,
            "refused by the rule of two: this run's tree already "
            + "; ".join(tree.describe())
            + f", and {why} would {exposure.NAMES[flag]}",
        )
    exposure.mark(run_id, {flag}, seq=0, by=why)
    return egress.Verdict(True, "")


def _has_web_tools(given: Any) -> bool:
    tools = given.get("tools") if isinstance(given, dict) else None
    return isinstance(tools, list) and bool(WEB_TOOLS & set(tools))


def _public(host: str) -> bool:
    """Whether every address `host` resolves to is a public one (what the service then dials
    is resolved again: a name that changes its answer in between reaches only public ones if
    it is public both times, which is what rebinding attacks defeat — hence every address)."""
    try:
        found = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return False
    return bool(found) and all(ipaddress.ip_address(a.split("%")[0]).is_global for a in found)


def _task_hosts(given: Any, root_id: int | None) -> list[str]:
    inputs = [given]
    if root_id is not None:
        inputs += Run.objects.filter(pk=root_id).values_list("input", flat=True)
    hosts: list[str] = []
    for given in inputs:
        listed = given.get("allowed_hosts") if isinstance(given, dict) else None
        if isinstance(listed, list):
            hosts += [item for item in listed if isinstance(item, str) and item]
    return hosts


def _matches(pattern: str, host: str, subject: str) -> bool:
    pattern = pattern.lower()
    return fnmatch.fnmatchcase(subject if ":" in pattern else host, pattern)


def provider_bridge(name: str) -> bridges.Bridge:
    def upstream(run_id: int) -> bridges.Upstream:
        key = keys.get(name)
        if not key:
            raise LookupError(f"no {name} key is set (Settings → Providers)")
        header, value = HEADERS[name]
        return bridges.Upstream(settings.EGRESS_BRIDGE_URLS[name], {header: value.format(key=key)})

    return upstream


def git_bridge(run_id: int) -> bridges.Upstream:
    """The project's origin over HTTPS with its token, to fetch only; SSH keys are not
    bridged."""
    account = Run.objects.filter(pk=run_id).values_list("account_id", flat=True).first()
    mission = Mission.objects.filter(pk=account or 0).select_related("project").first()
    if mission is None or not mission.project.clone_url.startswith(("https://", "http://")):
        raise LookupError("the run's project has no HTTP(S) clone URL")
    stored = RemoteCredential.objects.filter(
        project_id=mission.project_id, remote="origin", kind=CredentialKind.TOKEN
    ).first()
    if stored is None:
        raise LookupError("the project keeps no token for its origin remote")
    user = stored.username or "x-access-token"
    secret = vault.decrypt(bytes(stored.ciphertext))
    basic = base64.b64encode(f"{user}:{secret}".encode()).decode()
    return bridges.Upstream(
        mission.project.clone_url, {"Authorization": f"Basic {basic}"}, refuse=_git_push
    )


def _git_push(method: str, path: str) -> str | None:
    """The smart-HTTP push service, refused: a push is sent by the push tool, after its
    approval, of the one commit the owner saw."""
    if "git-receive-pack" in path.lower() or method not in ("GET", "POST"):
        return "pushes go through the push tool and its approval, never through a sandbox"
    return None


def needs(run_id: int) -> list[str]:
    """The scopes of a run's sandboxes: `egress` when anything may be on its allow-list (task
    hosts, an allow rule for its project), `bridge:<name>` for each bridge its task names
    (`bridges` in its or its root's input)."""
    run = Run.objects.filter(pk=run_id).values_list("input", "root_id", "account_id").first()
    if run is None:
        return []
    given, root_id, account_id = run
    project = Mission.objects.filter(pk=account_id).values_list("project_id", flat=True).first()
    allowed = PermissionRule.objects.filter(tool=TOOL, decision=Decision.ALLOW)
    scopes = []
    if _task_hosts(given, root_id) or allowed.filter(project_id__in=[project, None]).exists():
        scopes.append("egress")
    inputs = [given, *Run.objects.filter(pk=root_id).values_list("input", flat=True)]
    for item in inputs:
        named = item.get("bridges") if isinstance(item, dict) else None
        for name in named if isinstance(named, list) else []:
            if isinstance(name, str) and bridges.exists(name) and f"bridge:{name}" not in scopes:
                scopes.append(f"bridge:{name}")
    return scopes


# What the missions app registers with `cluster.egress` (from its `ready()`).
POLICY = egress.Policy(decide=decide, needs=needs, exposure=exposure_of)
BRIDGES = {**{name: provider_bridge(name) for name in HEADERS}, "git": git_bridge}
