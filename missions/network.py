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
to its clone URL. Upstream base URLs: `settings.EGRESS_BRIDGE_URLS`.
"""

from __future__ import annotations

import base64
import fnmatch
from typing import Any

from django.conf import settings

from agentos.core import vault
from cluster import egress, run_tokens
from kernel.models import Run
from missions import keys
from missions.models import Mission
from tools.models import CredentialKind, Decision, PermissionRule, RemoteCredential

TOOL = "egress"
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
    return egress.Verdict(False, "not on the run's allow-list (its task's hosts, egress rules)")


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


def provider_bridge(name: str) -> egress.Bridge:
    def upstream(run_id: int) -> egress.Upstream:
        key = keys.get(name)
        if not key:
            raise LookupError(f"no {name} key is set (Settings → Providers)")
        header, value = HEADERS[name]
        return egress.Upstream(settings.EGRESS_BRIDGE_URLS[name], {header: value.format(key=key)})

    return upstream


def git_bridge(run_id: int) -> egress.Upstream:
    """The project's origin over HTTPS with its token; SSH keys are not bridged."""
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
    return egress.Upstream(mission.project.clone_url, {"Authorization": f"Basic {basic}"})


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
            if f"bridge:{name}" in run_tokens.SCOPES and f"bridge:{name}" not in scopes:
                scopes.append(f"bridge:{name}")
    return scopes


# What the missions app registers with `cluster.egress` (from its `ready()`).
POLICY = egress.Policy(decide=decide, needs=needs)
BRIDGES = {**{name: provider_bridge(name) for name in HEADERS}, "git": git_bridge}
