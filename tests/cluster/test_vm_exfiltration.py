"""Exfiltration, level 2: the level-1 suite (`tests/cluster/test_exfiltration.py`: its probe
script and its checks) run in a disposable VM of a real run, with the run's egress attached.

Inside the guest the run's proxy variables point at QEMU's one forward (10.0.2.100:3128, a socat to
the run's socket) with the run's token kept; 127.0.0.1 is the guest's own loopback, so the
direct URL has no route to the host; the host paths holding secrets do not exist in the guest.
"""

from __future__ import annotations

import platform
import sys
import tempfile
from pathlib import Path

import pytest
from django.conf import settings

from agentos import vault
from cluster import egress, sandbox, tokens
from cluster.sandbox import Limits
from kernel.models import Event
from missions.models import Mission
from tests.cluster.egress_fixtures import Upstream
from tests.cluster.test_egress import make_run
from tests.cluster.test_exfiltration import (
    REPO_TOKEN,
    Probe,
    check,
    planted,  # noqa: F401 (a fixture)
    probe_script,
)
from tests.providers.wire import Json, WireServer
from tools import remotes

pytestmark = [
    pytest.mark.skipif(
        sys.platform != "linux" or platform.machine() != "x86_64",
        reason="level 2 is QEMU on x86-64 Linux",
    ),
    pytest.mark.django_db(transaction=True),
]


def test_it_lets_nothing_out_of_the_vm_but_the_allow_list_the_bridge_and_the_token(
    service: egress.Service,
    upstream: Upstream,
    elsewhere: Upstream,
    provider: WireServer,
    planted: list[str],  # noqa: F811 (the fixture imported above)
    sandbox_base: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(settings.EGRESS_BRIDGE_URLS, "anthropic", provider.url)
    run = make_run(hosts=[f"127.0.0.1:{upstream.port}"])
    mission = Mission.objects.get(pk=run.account_id)
    remotes.put(project_id=mission.project_id, remote="origin", kind="token", secret=REPO_TOKEN)
    workdir = Path(tempfile.mkdtemp(prefix="vm-exfiltration-", dir=sandbox_base))
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
            str(tokens.key_file()),
            str(Path(settings.DATA_DIR) / "pg"),
            str(Path(settings.DATA_DIR) / "secret_key"),
        ],
        # The token's death with its tree is the proxy's, tested at level 1; under TCG the
        # probe's polling loop would cost a minute.
        stop_files=None,
    )
    provider.queue(Json({"bridged": True}))
    result = sandbox.for_level(2).run(
        ["/bin/sh", "-s"],
        workdir=workdir,
        limits=Limits(wall_seconds=120),
        stdin=probe_script(probe).encode(),
        run_id=run.pk,
        egress=attached,
    )

    check(result.output, probe, planted, attached.token)
    assert provider.received[-1].headers["x-api-key"] == planted[0]  # added outside the VM
    refused = [e.data for e in Event.objects.filter(run_id=run.pk, kind="egress.refused")]
    assert any(e.get("port") == elsewhere.port for e in refused), refused
