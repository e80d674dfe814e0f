"""Exfiltration, level 2: the level-1 suite (`tests/cluster/test_exfiltration.py`: its probe
script and its checks) run in a disposable VM of a real run, with the run's egress attached.

Inside the guest the run's proxy variables point at QEMU's one forward (10.0.2.100:3128, a socat to
the run's socket) with the run's token kept; 127.0.0.1 is the guest's own loopback, so the
direct URL has no route to the host; the host paths holding secrets do not exist in the guest.
The run's tree is stopped while the guest waits on the upstream's `/hold`: its next request finds
its token refused or its socket closed.
"""

from __future__ import annotations

import platform
import sys

import pytest

from cluster import sandbox, warm
from cluster.sandbox import Limits
from kernel.models import Event
from tests.cluster.egress_fixtures import Upstream
from tests.cluster.test_exfiltration import (
    Attempt,
    attempt,  # noqa: F401 (a fixture)
    check,
    planted,  # noqa: F401 (a fixture)
    probe_script,
)
from tests.providers.wire import WireServer

pytestmark = [
    pytest.mark.skipif(
        sys.platform != "linux" or platform.machine() != "x86_64",
        reason="level 2 is QEMU on x86-64 Linux",
    ),
    pytest.mark.django_db(transaction=True),
    # Measured up to 11 s (and 9 s to set up) under TCG; above a boot's and a probe's own bounds
    # (cluster/runner/vm.py: 120 s each under TCG), so that their failures are the ones reported.
    pytest.mark.timeout(300),
]


def test_it_lets_nothing_out_of_the_vm_but_the_allow_list_the_bridge_and_the_token(
    attempt: Attempt,  # noqa: F811 (the fixture imported above)
    elsewhere: Upstream,
    provider: WireServer,
    planted: list[str],  # noqa: F811 (the fixture imported above)
) -> None:
    run, probe, attached = attempt.run, attempt.probe, attempt.attached
    try:
        result = sandbox.for_level(2).run(
            ["/bin/sh", "-s"],
            workdir=attempt.workdir,
            limits=Limits(wall_seconds=120),
            stdin=probe_script(probe).encode(),
            run_id=run.pk,
            egress=attached,
        )
    finally:
        warm.release(run.pk)  # the run's warm VM ends with the test

    check(result.output, probe, planted, attached.token)
    assert provider.received[-1].headers["x-api-key"] == planted[0]  # added outside the VM
    refused = [e.data for e in Event.objects.filter(run_id=run.pk, kind="egress.refused")]
    assert any(e.get("port") == elsewhere.port for e in refused), refused
