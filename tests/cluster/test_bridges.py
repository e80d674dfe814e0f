"""The owner's API bridges and the rule of two at the egress service: a bridge adds its key and
charges its price, the git bridge never carries a push, a sandbox's request that would set its
tree's third flag is refused, and the control plane's own (judged by the harness) is not."""

from __future__ import annotations

import pytest

from agentos.core import audit, scrubber
from agentos.core.models import AuditEvent
from cluster import bridges, egress, outbound
from kernel import exposure
from kernel.models import DailySpend, Run
from missions import network
from missions.models import Mission, Project
from tests.cluster.egress_fixtures import Upstream
from tests.cluster.test_egress import events, get, make_run, token_of
from tools import remotes
from tools.models import Decision, PermissionRule

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "owner-bridge-canary-" + "s" * 20
OWNER = audit.Actor(by="owner", username="owner")


def test_an_owner_bridge_adds_its_key_and_charges_the_run(
    service: egress.Service, upstream: Upstream
) -> None:
    bridges.put(
        "search",
        base_url=f"http://127.0.0.1:{upstream.port}/api",
        secret=SECRET,
        template="Token {secret}",
        usd_micros_per_call=2500,
        actor=OWNER,
    )
    assert AuditEvent.objects.filter(kind="bridge.changed", detail__bridge="search").exists()
    assert SECRET not in str(AuditEvent.objects.values_list("detail", flat=True))
    assert scrubber.scrub(f"key {SECRET}") != f"key {SECRET}"
    run = make_run(hosts=[])
    Run.objects.filter(pk=run.pk).update(input={"bridges": ["search"]})
    assert network.needs(run.pk) == ["bridge:search"]
    before = sum(DailySpend.objects.values_list("usd_micros", flat=True))
    attached = egress.attach(run_id=run.pk, root_id=run.pk, scopes=["bridge:search"], seconds=60)
    status, body = get(attached.socket, "http://search.bridge/q?x=1", attached.token)
    assert status == 200, body
    assert upstream.seen[-1]["path"] == "/api/q?x=1"
    assert upstream.seen[-1]["authorization"] == f"Token {SECRET}"
    assert events(run, "egress.bridged")[-1]["usd_micros"] == 2500
    run.refresh_from_db()
    assert run.usd_micros == 2500
    assert sum(DailySpend.objects.values_list("usd_micros", flat=True)) == before + 2500
    # Holding a credential is one of the rule of two's flags, marked by the request itself.
    assert exposure.PRIVATE in exposure.of_tree(run.pk).flags
    assert get(attached.socket, "http://nothere.bridge/q", attached.token)[0] == 403  # no scope


def test_bad_bridges_are_refused_whole() -> None:
    with pytest.raises(bridges.BridgeError, match="needs its secret"):
        bridges.put("x", base_url="https://api.example.org", secret=None, actor=OWNER)
    with pytest.raises(bridges.BridgeError, match="base URL"):
        bridges.put("x", base_url="ftp://api.example.org", secret="k" * 10, actor=OWNER)
    with pytest.raises(bridges.BridgeError, match="built-in"):
        bridges.put("git", base_url="https://api.example.org", secret="k" * 10, actor=OWNER)
    with pytest.raises(bridges.BridgeError, match="name"):
        bridges.put("Bad Name", base_url="https://api.example.org", secret="k" * 10, actor=OWNER)
    with pytest.raises(bridges.BridgeError, match="template"):
        bridges.put(
            "x", base_url="https://a.example.org", secret="k" * 10, template="{x}", actor=OWNER
        )
    assert not bridges.exists("x")


def test_the_git_bridge_fetches_and_never_pushes(
    service: egress.Service, upstream: Upstream
) -> None:
    run = make_run(hosts=[])
    mission = Mission.objects.get(pk=run.account_id)
    Project.objects.filter(pk=mission.project_id).update(
        clone_url=f"http://127.0.0.1:{upstream.port}/team/repo.git"
    )
    remotes.put(project_id=mission.project_id, remote="origin", kind="token", secret="t" * 20)
    sock = egress.attach(run_id=run.pk, root_id=run.pk, scopes=["bridge:git"], seconds=60).socket
    token = token_of(run, "bridge:git")
    fetch = "http://git.bridge/info/refs?service=git-upload-pack"
    assert get(sock, fetch, token)[0] == 200
    status, body = get(sock, "http://git.bridge/info/refs?service=git-receive-pack", token)
    assert status == 403
    assert b"pushes go through the push tool" in body


def test_a_sandbox_is_refused_its_third_flag_and_the_harness_judged_path_is_not(
    service: egress.Service, upstream: Upstream, elsewhere: Upstream
) -> None:
    run = make_run(hosts=[f"127.0.0.1:{upstream.port}"])
    # The owner allows another host by a rule: reaching it is communicating beyond the task.
    PermissionRule.objects.create(
        tool=network.TOOL, pattern=f"127.0.0.1:{elsewhere.port}", decision=Decision.ALLOW
    )
    exposure.mark(run.pk, {exposure.UNTRUSTED}, seq=3, by="web_fetch")
    exposure.mark(run.pk, {exposure.PRIVATE}, seq=4, by="bridge search")
    attached = egress.attach(run_id=run.pk, root_id=run.pk, scopes=["egress"], seconds=60)
    assert get(attached.socket, f"http://127.0.0.1:{upstream.port}/task", attached.token)[0] == 200
    status, body = get(attached.socket, f"http://127.0.0.1:{elsewhere.port}/x", attached.token)
    assert status == 403
    assert b"rule of two" in body
    assert b"read untrusted content: step 3" in body
    assert exposure.OUTWARD not in exposure.of_tree(run.pk).flags
    assert elsewhere.seen == []
    # The control plane's own request: its tool's call was judged by the harness, by the flags
    # the tool declares; the service marks nothing more.
    with outbound.client(run.pk, seconds=10) as http:
        assert http.get(f"http://127.0.0.1:{elsewhere.port}/judged").status_code == 200
    assert exposure.OUTWARD not in exposure.of_tree(run.pk).flags
    # Without the third flag pending, a sandbox's request beyond its task's hosts marks it.
    other = make_run(hosts=[])
    PermissionRule.objects.create(
        tool=network.TOOL, pattern=f"127.0.0.1:{upstream.port}", decision=Decision.ALLOW
    )
    sock = egress.attach(run_id=other.pk, root_id=other.pk, scopes=["egress"], seconds=60)
    assert get(sock.socket, f"http://127.0.0.1:{upstream.port}/out", sock.token)[0] == 200
    marked = exposure.of_tree(other.pk).flags[exposure.OUTWARD]
    assert marked["by"] == f"egress to 127.0.0.1:{upstream.port}"


def test_web_tools_reach_public_hosts_only() -> None:
    project = Project.objects.create(name="web policy")
    mission = Mission.objects.create(project=project, goal="read the web")
    run = Run.objects.create(account=mission, program="test", input={"tools": ["web_fetch"]})
    Run.objects.filter(pk=run.pk).update(root=run.pk)
    assert network.decide(run.pk, "93.184.215.14", 443).allowed
    for private in ("127.0.0.1", "10.1.2.3", "169.254.169.254", "192.168.1.1", "localhost"):
        assert not network.decide(run.pk, private, 80).allowed, private
    Run.objects.filter(pk=run.pk).update(input={"tools": ["read_file"]})
    assert not network.decide(run.pk, "93.184.215.14", 443).allowed
