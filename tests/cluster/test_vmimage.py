"""The VM image loads each kernel module after those its own `.modinfo` says it depends on."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from cluster.runner import vmimage


def module(depends: str) -> bytes:
    """A minimal 64-bit ELF whose only content is a `.modinfo` section, as a kernel module has."""
    modinfo = f"license=GPL\0depends={depends}\0vermagic=6.1.0 SMP\0".encode()
    names = b"\0.modinfo\0.shstrtab\0"
    header_size, section_size = 64, 64
    modinfo_at = header_size
    names_at = modinfo_at + len(modinfo)
    sections_at = names_at + len(names)
    header = b"\x7fELF\x02\x01\x01" + bytes(9)
    header += struct.pack("<HHIQQQIHHHHHH", 1, 62, 1, 0, 0, sections_at, 0, 64, 0, 0, 64, 3, 2)

    def section(name: int, offset: int, size: int) -> bytes:
        return struct.pack("<IIQQQQIIQQ", name, 1 if size else 0, 0, 0, offset, size, 0, 0, 1, 0)

    table = section(0, 0, 0) + section(1, modinfo_at, len(modinfo))
    table += section(10, names_at, len(names))
    assert len(table) == 3 * section_size
    return header + modinfo + names + table


def tree(tmp_path: Path, modules: dict[str, str]) -> Path:
    for name, depends in modules.items():
        directory = tmp_path / ("fs/9p" if name.startswith("9p") else "drivers/virtio")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{name}.ko").write_bytes(module(depends))
    return tmp_path


def test_a_module_comes_after_what_it_depends_on_whatever_the_order_asked(tmp_path: Path) -> None:
    # From Debian's 6.1.0-57 on, virtio itself depends on virtio_ring: a fixed order broke there.
    modules = tree(
        tmp_path,
        {
            "virtio_pci": "virtio_ring,virtio",
            "virtio": "virtio_ring",
            "virtio_ring": "",
            "9p": "9pnet",
            "9pnet": "",
        },
    )

    order = vmimage.load_order(modules, ("virtio_pci", "9p"))

    assert list(order) == ["virtio_ring", "virtio", "virtio_pci", "9pnet", "9p"]
    assert order["virtio"] == modules / "drivers/virtio/virtio.ko"


def test_it_names_a_dependency_the_kernel_lacks(tmp_path: Path) -> None:
    modules = tree(tmp_path, {"virtio": "virtio_ring"})

    with pytest.raises(vmimage.ImageError, match="kernel module virtio_ring is missing"):
        vmimage.load_order(modules, ("virtio",))


def test_it_names_a_damaged_module(tmp_path: Path) -> None:
    modules = tree(tmp_path, {"virtio": ""})
    path = modules / "drivers/virtio/virtio.ko"
    path.write_bytes(path.read_bytes()[:100])

    with pytest.raises(vmimage.ImageError, match=r"virtio\.ko is damaged"):
        vmimage.load_order(modules, ("virtio",))


def test_it_refuses_modules_that_depend_on_each_other(tmp_path: Path) -> None:
    modules = tree(tmp_path, {"virtio": "virtio_ring", "virtio_ring": "virtio"})

    with pytest.raises(vmimage.ImageError, match="cycle"):
        vmimage.load_order(modules, ("virtio",))


def test_it_reads_the_dependencies_of_the_kernel_the_node_has() -> None:
    try:
        _, modules = vmimage._kernel_parts(vmimage.KERNEL_DIR)
    except vmimage.ImageError:
        pytest.skip("no VM kernel extracted on this machine")

    order = vmimage.load_order(modules)

    assert set(vmimage.MODULES) <= set(order)
    assert {"failover", "net_failover", "9pnet", "netfs"} <= set(order)
    loaded: set[str] = set()
    for name, path in order.items():
        assert set(vmimage._depends(path.read_bytes())) <= loaded, name
        loaded.add(name)
