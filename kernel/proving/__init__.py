"""Proving code of the kernel: the chaos workload and its harness, the benchmark.

No product module imports it (pyproject.toml's import contract): only the management commands
that prove the kernel (`chaos`, `bench_kernel`, `proving_worker`) and the tests do, and they
call `register()` first, so that the product's program registry names no proving code. A live
stack a test starts whole installs `ProvingConfig` (`kernel.proving.apps`) instead.
"""

from __future__ import annotations


def register() -> None:
    """Add the chaos workload's programs to the kernel's registry (again: a no-op)."""
    # Imported here, not above: Django imports this package (for `ProvingConfig`) while it loads
    # the apps, before `kernel.programs`' models may be imported.
    from kernel.programs import PROGRAMS
    from kernel.proving import bench, chaos, scripted

    for name, program in {
        "chaos.workflow": chaos.workflow,
        "chaos.child": chaos.child,
        "chaos.noop": chaos.noop,
        "chaos.busy": chaos.busy,
        bench.PAIRED: bench.paired,
        scripted.PROGRAM: scripted.script,
    }.items():
        PROGRAMS.add(name, program)


def register_extensions() -> None:
    """Call the registrations of `settings.SWEEP_EXTENSIONS` (dotted paths): the apps above the
    kernel add the crash sweep's operations of their own (`scripted.EXTRA_OPS`) and the owner's
    answers to their questions (`harness.OWNER_ANSWERS`), which the kernel cannot import."""
    from django.conf import settings
    from django.utils.module_loading import import_string

    for path in settings.SWEEP_EXTENSIONS:
        import_string(path)()
