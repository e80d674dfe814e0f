"""The cost of our MCP path per call: `mcp__time__get_current_time`'s `run` (the frozen hash
checked in the database, the pooled session, the server in a level-1 sandbox) against the same
server called directly with the SDK (`stdio_client`, no sandbox, no pool, no check), in the same
process. The target: a median overhead of at most `TARGET_MS` per call.

Everything it writes (an account, a run, the server and its pins) is in one
transaction rolled back at the end: it may run on any database."""

from __future__ import annotations

import asyncio
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from agentos.core import audit
from kernel.context import StepCall
from kernel.journal import Fence
from kernel.models import Account, Run
from tools.base import ToolEnv
from tools.mcp import servers, sessions, toolset

TARGET_MS = 20.0
CALLS = 200
WARMUP = 10
ARGUMENTS = {"timezone": "UTC"}


class _Rollback(Exception):
    pass


@dataclass(frozen=True)
class Report:
    ours_ms: float
    direct_ms: float

    @property
    def overhead_ms(self) -> float:
        return self.ours_ms - self.direct_ms

    @property
    def met(self) -> bool:
        return self.overhead_ms <= TARGET_MS

    def summary(self) -> str:
        return (
            f"mcp_call_ms={self.ours_ms:.2f} direct_ms={self.direct_ms:.2f}"
            f" overhead_ms={self.overhead_ms:.2f} target_ms={TARGET_MS:g}"
            f" {'met' if self.met else 'MISSED'}"
        )


def run(*, calls: int = CALLS, say: Callable[[str], None] = print) -> Report:
    ours = _ours(calls, say)
    direct = _direct(calls)
    return Report(statistics.median(ours) * 1000, statistics.median(direct) * 1000)


def _ours(calls: int, say: Callable[[str], None]) -> list[float]:
    timings: list[float] = []
    try:
        with transaction.atomic():
            name = "bench-time"
            servers.add_server(
                name=name, command=["mcp-server-time"], actor=audit.Actor.command("bench_mcp")
            )
            server = servers.server_or_404(name)
            servers.approve(server=server, actor=audit.Actor.command("bench_mcp"))
            run = Run.objects.create(
                account=Account.objects.create(),
                program="bench",
                input={"mcp_tools": toolset.freeze([name])},
            )
            (tool,) = [
                tool
                for tool in toolset.build(run.input["mcp_tools"])
                if tool.name.endswith("__get_current_time")
            ]
            call = StepCall(run.pk, 1, "bench", {}, False, threading.Event(), Fence(run.pk, 1))
            env = ToolEnv(call, run.pk, None, None)
            for index in range(WARMUP + calls):
                began = time.perf_counter()
                tool.run(env, ARGUMENTS)
                if index >= WARMUP:
                    timings.append(time.perf_counter() - began)
            say(f"ours: {calls} calls, {sessions.POOL.count()} pooled session")
            sessions.POOL.close_run(run.pk)
            raise _Rollback
    except _Rollback:
        pass
    return timings


def _direct(calls: int) -> list[float]:
    async def main() -> list[float]:
        command = str(Path(sys.prefix) / "bin" / "mcp-server-time")
        timings: list[float] = []
        async with (
            stdio_client(StdioServerParameters(command=command)) as (reading, writing),
            ClientSession(reading, writing) as session,
        ):
            await session.initialize()
            for index in range(WARMUP + calls):
                began = time.perf_counter()
                await session.call_tool("get_current_time", ARGUMENTS)
                if index >= WARMUP:
                    timings.append(time.perf_counter() - began)
        return timings

    return asyncio.run(main())
