"""What the host accepts from a warm VM's guest (`cluster.runner.vmwarm`), without QEMU: the
guest's end of the control port is played by a thread, the VM's process by a `sleep`. A guest
that breaks our framing (an unknown kind, a frame too long, a malformed report) loses its VM;
each command keeps its output cap and wall clock; a guest that does not confirm a kill is
destroyed."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cluster.runner import vmwarm
from cluster.runner.protocol import Profile, RpcError, parse_profile

Guest = Callable[[socket.socket, dict[str, Any]], None]


def frame(kind: bytes, payload: bytes) -> bytes:
    return kind + struct.pack(">I", len(payload)) + payload


def exit_frame(code: Any = 0, oom: Any = 0, seconds: Any = 0.01) -> bytes:
    return frame(b"X", json.dumps({"code": code, "oom": oom, "seconds": seconds}).encode())


def read_request(port: socket.socket) -> dict[str, Any]:
    head = port.recv(4, socket.MSG_WAITALL)
    (size,) = struct.unpack(">I", head)
    value: dict[str, Any] = json.loads(port.recv(size, socket.MSG_WAITALL))
    return value


def profile(**limits: Any) -> Profile:
    return parse_profile(
        {
            "level": 2,
            "argv": ["true"],
            "workdir": None,
            "uid": 1000,
            "gid": 1000,
            "user": "agent",
            "limits": {
                "wall_seconds": 5,
                "memory_bytes": 256 << 20,
                "processes": 16,
                "file_bytes": 1 << 20,
                "cpu_seconds": 10,
                "output_bytes": 1000,
                "disk_bytes": 1 << 30,
                **limits,
            },
        }
    )


@pytest.fixture
def guest() -> Iterator[Callable[[Guest], vmwarm.WarmVm]]:
    """A WarmVm whose guest is `play(port, first_request)`, run in a thread."""
    made: list[tuple[vmwarm.WarmVm, socket.socket, threading.Thread]] = []

    def start(play: Guest) -> vmwarm.WarmVm:
        ours, theirs = socket.socketpair()
        console_read, console_write = os.pipe()
        os.close(console_write)
        process = subprocess.Popen(["sleep", "60"], start_new_session=True)
        vm = vmwarm.WarmVm(process, ours, None, console_read)
        vm._pump.start()

        def run() -> None:
            with contextlib.suppress(OSError):  # the host closed the port: the VM is gone
                play(theirs, read_request(theirs))

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        made.append((vm, theirs, thread))
        return vm

    yield start
    for vm, theirs, thread in made:
        vm.close()
        theirs.close()
        thread.join(5)


def test_it_returns_the_output_and_the_exit_report(guest: Callable[[Guest], vmwarm.WarmVm]) -> None:
    seen: list[dict[str, Any]] = []

    def play(port: socket.socket, request: dict[str, Any]) -> None:
        seen.append(request)
        port.sendall(frame(b"O", b"out ") + frame(b"E", b"err") + exit_frame(3, 1, 0.25))

    vm = guest(play)
    result = vm.exec(profile())

    assert seen[0]["argv"] == ["true"]
    assert seen[0]["uid"] == 1000
    assert seen[0]["env"]["PATH"].startswith("/usr/local/bin")
    assert (result["output"], result["errors"], result["exit_code"]) == ("out ", "err", 3)
    assert (result["out_of_memory"], result["killed"], result["guest_seconds"]) == (
        1,
        "memory",
        0.25,
    )
    assert vm.alive()


def test_it_caps_the_output_and_counts_the_rest(guest: Callable[[Guest], vmwarm.WarmVm]) -> None:
    vm = guest(lambda port, _: port.sendall(frame(b"O", b"x" * 1500) + exit_frame()))

    result = vm.exec(profile(output_bytes=1000))

    assert result["output"] == "x" * 1000
    assert result["truncated_bytes"] == 500


@pytest.mark.parametrize(
    ("sent", "why"),
    [
        (frame(b"Z", b"?"), "unknown kind b'Z'"),
        (b"O" + struct.pack(">I", vmwarm.MAX_FRAME + 1), "a frame of 65537 bytes"),
        (frame(b"X", b"[0]"), "report is not an object"),
        (frame(b"X", b"{" * 10), "report is not JSON"),
        (frame(b"X", b" " * (vmwarm.MAX_REPORT + 1)), "report is too long"),
        (exit_frame(code="0"), "exit report is malformed"),
        (exit_frame(seconds=None), "exit report is malformed"),
    ],
)
def test_a_guest_breaking_the_framing_loses_its_vm(
    guest: Callable[[Guest], vmwarm.WarmVm], sent: bytes, why: str
) -> None:
    vm = guest(lambda port, _: port.sendall(sent))

    with pytest.raises(vmwarm.VmLost, match=why):
        vm.exec(profile())

    assert not vm.alive()
    assert vm.process.poll() is not None  # destroyed, not left running


def test_it_kills_the_command_at_its_wall_clock(guest: Callable[[Guest], vmwarm.WarmVm]) -> None:
    def play(port: socket.socket, _request: dict[str, Any]) -> None:
        assert read_request(port) == {"op": "kill"}
        port.sendall(exit_frame(137))

    vm = guest(play)
    result = vm.exec(profile(wall_seconds=0.3))

    assert (result["killed"], result["exit_code"]) == ("timeout", None)
    assert 0.3 <= result["seconds"] < 3
    assert vm.alive()  # the guest obeyed: the VM serves the next command


def test_a_guest_that_does_not_kill_in_time_is_destroyed(
    guest: Callable[[Guest], vmwarm.WarmVm], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vmwarm, "KILL_GRACE_SECONDS", 0.5)

    def play(port: socket.socket, _request: dict[str, Any]) -> None:
        read_request(port)  # the kill, never obeyed

    vm = guest(play)

    with pytest.raises(vmwarm.VmLost, match="did not kill the command in time"):
        vm.exec(profile(wall_seconds=0.2))

    assert vm.process.poll() is not None


def test_a_stop_kills_the_command(guest: Callable[[Guest], vmwarm.WarmVm]) -> None:
    stopping = threading.Event()
    stopping.set()

    def play(port: socket.socket, _request: dict[str, Any]) -> None:
        assert read_request(port) == {"op": "kill"}
        port.sendall(exit_frame(137))

    result = guest(play).exec(profile(), stopping=stopping)

    assert (result["killed"], result["exit_code"]) == ("cancelled", None)


def test_a_vm_that_ends_mid_command_is_lost(guest: Callable[[Guest], vmwarm.WarmVm]) -> None:
    vm = guest(lambda port, _: port.close())

    with pytest.raises(vmwarm.VmLost, match="the virtual machine ended"):
        vm.exec(profile())
    with pytest.raises(vmwarm.VmLost):
        vm.exec(profile())  # and stays lost


def raw_profile(**fields: Any) -> dict[str, Any]:
    limits = {
        "wall_seconds": 5,
        "memory_bytes": 256 << 20,
        "processes": 16,
        "file_bytes": 1 << 20,
        "cpu_seconds": 10,
        "output_bytes": 1000,
        "disk_bytes": 1 << 30,
    }
    base = {"level": 2, "argv": ["true"], "uid": 1000, "gid": 1000, "user": "agent"}
    return {**base, "limits": limits, **fields}


def test_a_service_gets_the_command_s_environment_without_the_run_s_token(
    guest: Callable[[Guest], vmwarm.WarmVm],
) -> None:
    seen: list[dict[str, Any]] = []

    def play(port: socket.socket, request: dict[str, Any]) -> None:
        seen.append(request)
        port.sendall(exit_frame())

    proxy = "http://run:aosr1.secret@127.0.0.1:3128"
    env = {"AGENTOS_RUN_TOKEN": "aosr1.secret", "HTTP_PROXY": proxy, "http_proxy": proxy}
    service = {"argv": ["python3", "-c", "pass", "--serve"], "cpu_seconds": 3600}
    given = raw_profile(env=env, egress_socket="/run/egress.sock", service=service)
    guest(play).exec(parse_profile(given))

    (request,) = seen
    assert request["service"]["argv"] == service["argv"]
    assert request["service"]["cpu_seconds"] == 3600
    assert "secret" not in json.dumps(request["service"])
    assert "secret" in request["env"]["http_proxy"]  # the command's own: each page brings it


@pytest.mark.parametrize(
    ("service", "said"),
    [
        ([], "profile.service must be an object"),
        ({"argv": [], "cpu_seconds": 1}, "profile.service.argv must be a non-empty list"),
        ({"argv": ["a\0"], "cpu_seconds": 1}, "profile.service.argv must be a non-empty list"),
        ({"argv": ["sh"]}, "profile.service.cpu_seconds must be an integer from 1 to 86400"),
        ({"argv": ["sh"], "cpu_seconds": True}, "profile.service.cpu_seconds must be an integer"),
    ],
)
def test_a_malformed_service_is_refused_by_name(service: Any, said: str) -> None:
    with pytest.raises(RpcError, match=said):
        parse_profile(raw_profile(service=service))
