"""What a run of the agent was started with, as two hashes recorded on the run: its frozen
system prompt and its tool list (names, descriptions, schemas). Two runs with the same hashes
were given the same instructions and tools; a resumed run whose prompt now hashes otherwise
was started by other code (see `kernel.versions` for engine versions)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from kernel import versions
from kernel.context import RunContext
from missions.engine.prompt import Prefix


def prompt_hash(prefix: Prefix) -> str:
    return hashlib.sha256(prefix.system.encode()).hexdigest()


def tools_hash(prefix: Prefix) -> str:
    specs = [asdict(spec) for spec in prefix.tools]
    return hashlib.sha256(json.dumps(specs, sort_keys=True).encode()).hexdigest()


def record(ctx: RunContext, prefix: Prefix) -> None:
    """Record both hashes at the run's first execution (later ones keep the first)."""
    if not ctx.run.prompt_hash:
        versions.record_fingerprint(
            ctx.fence, prompt_hash=prompt_hash(prefix), tools_hash=tools_hash(prefix)
        )
