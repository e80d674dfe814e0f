"""Proving code of the kernel: the chaos workload and its harness, the benchmark.

No product module imports it (pyproject.toml's import contract): only the management commands
that prove the kernel (`chaos`, `bench_kernel`, `proving_worker`) and the tests do, and they
call `register()` first, so that the product's program registry names no proving code. A live
stack a test starts whole installs `ProvingConfig` (`kernel.proving.apps`) instead.
"""

from __future__ import annotations

# name -> "module:function" in `kernel.proving.chaos`, imported on first use like any program.
PROGRAMS = {
    "chaos.workflow": "kernel.proving.chaos:workflow",
    "chaos.child": "kernel.proving.chaos:child",
    "chaos.noop": "kernel.proving.chaos:noop",
    "chaos.busy": "kernel.proving.chaos:busy",
}


def register() -> None:
    """Name the chaos workload's programs in the kernel's registry (idempotent)."""
    # Imported here, not above: Django imports this package (for `ProvingConfig`) while it loads
    # the apps, before `kernel.programs`' models may be imported.
    from kernel import programs

    for name, target in PROGRAMS.items():
        programs.register(name, target)
