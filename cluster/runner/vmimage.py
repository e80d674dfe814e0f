"""The level-2 virtual machine's boot image, built once per node from its own packages.

The guest boots a Debian kernel (`linux-image-amd64`, extracted by `scripts/system-deps` into
`KERNEL_DIR`; never installed on the host) straight into an initramfs holding only a static
busybox, the kernel modules it needs and `/init`. Everything else the guest runs comes from the
host's `/usr`, shared read-only over virtio-9p, so python3, git and sh are the node's own.

Why the generic kernel and not `linux-image-cloud-amd64`: the cloud kernel has no 9p at all
(CONFIG_NET_9P is off), and 9p is what lets the worktree stay a plain host directory instead of a
filesystem image that a host process would have to parse after the agent wrote it. Why an
uncompressed `vmlinux`: under TCG (no hardware virtualization) decompressing the xz kernel costs
seconds at every boot; booted through its PVH entry, the ELF starts at once.

`image(kernel_dir, cache_dir)` returns the paths of a complete image, building it if the inputs
changed (tmp + fsync + rename: a build killed half-way is never used). `run_archive` makes the
small per-run archive appended to the base one (the kernel unpacks concatenated cpio archives).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import lzma
import os
import shutil
import stat
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

KERNEL_DIR = Path(os.environ.get("AGENTOS_VM_KERNEL_DIR", "/var/cache/agentos/vm-kernel"))
BUSYBOX = Path("/bin/busybox")
# What the guest needs: the virtio PCI transport, the serial ports the host reads the output from,
# the network card, then 9p. Each is loaded after the modules its own `.modinfo` says it depends on
# (they change between kernel updates: virtio itself needs virtio_ring from 6.1.0-57 on).
MODULES = (
    "virtio_pci",
    "virtio_console",
    "virtio_net",
    "9pnet_virtio",
    "9p",
)
IMAGE_FORMAT = 4  # bump when INIT or the layout changes: every node rebuilds its image

# The guest's pid 1. Runs as guest root; only the host wrote what it reads (/run/agentos, from the
# per-run archive). It never trusts the workspace. The command runs unprivileged with
# no_new_privs; `kill -9 -1` then ends whatever it left behind before the status is written, so
# nothing of the command's can write after it.
INIT = r"""#!/.agentos/busybox sh
B=/.agentos/busybox
PATH=/.agentos/bin
$B mkdir -p /.agentos/bin && $B --install -s /.agentos/bin
mount -t proc -o nosuid,nodev,noexec proc /proc
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
mount -t devtmpfs -o nosuid,noexec devtmpfs /dev
. /run/agentos/config
fail() { echo "agentos-init: $*" > /dev/console; poweroff -f; }
for module in $(cat /.agentos/modules.order); do
  insmod "/.agentos/modules/$module.ko" || fail "cannot load $module"
done
P9="trans=virtio,version=9p2000.L,msize=262144"
mount -t 9p -o "ro,nosuid,nodev,cache=loose,$P9" usr /usr || fail "cannot mount /usr"
mount -t tmpfs -o "nosuid,nodev,size=$TMP_BYTES,mode=1777" tmpfs /tmp
mkdir -p /dev/shm && mount -t tmpfs -o "nosuid,nodev,size=$TMP_BYTES,mode=1777" tmpfs /dev/shm
if [ "$WORKSPACE" = 1 ]; then
  mount -t 9p -o "nosuid,nodev,cache=mmap,$P9" workspace /workspace || fail "no workspace"
  case "$GIT" in
    dir) mount -t 9p -o "ro,nosuid,nodev,cache=mmap,$P9" git /workspace/.git || fail "no .git";;
    file) mount -o bind /workspace/.git /workspace/.git &&
          mount -o remount,bind,ro /workspace/.git || fail "cannot protect .git";;
  esac
else
  mount -t tmpfs -o "nosuid,nodev,size=$TMP_BYTES,mode=1777" tmpfs /workspace
fi
if [ "$ENV" = 1 ]; then
  mount -t 9p -o "ro,nosuid,nodev,cache=loose,$P9" env /env || fail "cannot mount /env"
fi
ip link set lo up
if [ "$NET" = 1 ]; then
  ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 || fail "no network"
fi
for port in /sys/class/virtio-ports/*; do
  ln -s "/dev/${port##*/}" "/run/agentos/port-$(cat "$port/name")"
done
# No user namespace (the guest's own capabilities) and no ptrace for the command, as at level 1.
echo 0 > /proc/sys/user/max_user_namespaces
[ -e /proc/sys/kernel/yama/ptrace_scope ] && echo 2 > /proc/sys/kernel/yama/ptrace_scope
mount -o remount,ro / 2>/dev/null
# A warm VM: the command server (`vmguest`) becomes pid 1 and runs command after command.
[ "$WARM" = 1 ] && exec /usr/bin/python3 -I -S /run/agentos/server.py
STATUS=/run/agentos/port-status
OOM_BEFORE=$(awk '/^oom_kill /{print $2}' /proc/vmstat)
echo "start $(cut -d' ' -f1 /proc/uptime)" > $STATUS
if [ "$STDERR_APART" = 1 ]; then
  (cd /workspace && . /run/agentos/command) < /run/agentos/stdin \
    > /run/agentos/port-out 2> /run/agentos/port-err
else
  (cd /workspace && . /run/agentos/command) < /run/agentos/stdin > /run/agentos/port-out 2>&1
fi
CODE=$?
kill -9 -1
OOM_AFTER=$(awk '/^oom_kill /{print $2}' /proc/vmstat)
sync
[ "$WORKSPACE" = 1 ] && umount -l /workspace/.git 2>/dev/null; umount /workspace 2>/dev/null
echo "exit $CODE oom $((OOM_AFTER - OOM_BEFORE))" > $STATUS
poweroff -f
"""

# Directories of the guest's root, and where its merged-/usr names point (Debian 12 and later).
ROOT_DIRS = ("usr", "proc", "sys", "dev", "tmp", "workspace", "env", "run", "run/agentos", "etc")
USR_LINKS = {"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}


class ImageError(RuntimeError):
    """The node lacks what the image is built from; the message says what to install."""


@dataclass(frozen=True)
class Image:
    kernel: Path  # the uncompressed vmlinux (an ELF with a PVH entry)
    initrd: Path  # the base cpio archive (uncompressed: TCG is slow at inflating too)
    key: str


def image(kernel_dir: Path = KERNEL_DIR, cache_dir: Path | None = None) -> Image:
    """The node's boot image under `cache_dir`, built now if missing or out of date."""
    vmlinuz, modules_dir = _kernel_parts(kernel_dir)
    if not BUSYBOX.is_file():
        raise ImageError("busybox is missing: apt-get install busybox-static")
    if not _is_static(BUSYBOX):
        raise ImageError(f"{BUSYBOX} is not statically linked: apt-get install busybox-static")
    for name, link in USR_LINKS.items():
        host = Path("/", name)
        if host.is_dir() and not (host.is_symlink() and str(host.readlink()) == link):
            raise ImageError(f"level 2 needs a merged /usr: /{name} is not a link to {link}")
    modules = load_order(modules_dir)
    inputs = [vmlinuz, BUSYBOX, *modules.values()]
    digest = hashlib.sha256(f"{IMAGE_FORMAT}\n{INIT}".encode())
    for path in inputs:
        info = path.stat()
        digest.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    key = digest.hexdigest()[:16]
    if cache_dir is None:
        cache_dir = kernel_dir.parent / "vm-images"
    target = cache_dir / key
    built = Image(target / "vmlinux", target / "initrd.cpio", key)
    if (target / "complete").exists():
        return built
    cache_dir.mkdir(parents=True, exist_ok=True)
    cache_dir.chmod(0o755)
    scratch = cache_dir / f".{key}.{os.getpid()}.tmp"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(mode=0o755)
    try:
        _write(scratch / "vmlinux", _vmlinux(vmlinuz.read_bytes()))
        archive = Archive()
        for directory in (".agentos", ".agentos/modules", *ROOT_DIRS):
            archive.directory(directory)
        for name, link in USR_LINKS.items():
            archive.symlink(name, link)
        archive.file("init", INIT.encode(), 0o755)
        archive.file(".agentos/busybox", BUSYBOX.read_bytes(), 0o755)
        for module, path in modules.items():
            archive.file(f".agentos/modules/{module}.ko", _unsigned(path.read_bytes()), 0o644)
        archive.file(".agentos/modules.order", "\n".join(modules).encode() + b"\n", 0o644)
        _write(scratch / "initrd.cpio", archive.finish())
        _write(scratch / "complete", json.dumps({"kernel": str(vmlinuz)}).encode())
        _fsync_dir(scratch)
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(target)  # an incomplete earlier attempt
        scratch.rename(target)
        _fsync_dir(cache_dir)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return built


def _kernel_parts(kernel_dir: Path) -> tuple[Path, Path]:
    hint = "run scripts/system-deps as root (it extracts linux-image-amd64 there)"
    kernels = sorted((kernel_dir / "boot").glob("vmlinuz-*")) if kernel_dir.is_dir() else []
    if not kernels:
        raise ImageError(f"no virtual machine kernel in {kernel_dir}/boot: {hint}")
    vmlinuz = kernels[-1]
    release = vmlinuz.name.removeprefix("vmlinuz-")
    modules_dir = kernel_dir / "lib" / "modules" / release / "kernel"
    if not modules_dir.is_dir():
        raise ImageError(f"the kernel modules of {release} are missing in {kernel_dir}: {hint}")
    return vmlinuz, modules_dir


_MODULE_DIRS = (
    *("drivers/virtio", "drivers/char", "drivers/net", "net/core"),
    *("fs/netfs", "fs/fscache", "net/9p", "fs/9p"),
)


def _module_path(modules_dir: Path, name: str) -> Path:
    for directory in _MODULE_DIRS:
        candidate = modules_dir / directory / f"{name}.ko"
        if candidate.is_file():
            return candidate
    raise ImageError(f"the kernel module {name} is missing under {modules_dir}")


def load_order(modules_dir: Path, wanted: tuple[str, ...] = MODULES) -> dict[str, Path]:
    """Every module `wanted` needs, with what each depends on, each after its dependencies."""
    order: dict[str, Path] = {}
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise ImageError(f"the kernel modules depend on each other in a cycle: {visiting}")
        visiting.append(name)
        path = _module_path(modules_dir, name)
        try:
            depends = _depends(path.read_bytes())
        except (struct.error, ValueError) as error:  # truncated, or not text where it should be
            raise ImageError(f"the kernel module {path} is damaged: {error}") from error
        for dependency in depends:
            visit(dependency)
        visiting.pop()
        order[name] = path

    for name in wanted:
        visit(name)
    return order


def _depends(module: bytes) -> list[str]:
    """The `depends=` entry of a module's `.modinfo` section (NUL-separated key=value strings)."""
    for entry in _elf_section(module, b".modinfo").split(b"\0"):
        if entry.startswith(b"depends="):
            return [name for name in entry[8:].decode().split(",") if name]
    return []


def _elf_section(elf: bytes, wanted: bytes) -> bytes:
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ImageError("a kernel module is not a 64-bit little-endian ELF")
    (shoff,) = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)

    def header(index: int) -> tuple[int, int, int]:
        name, _type, _flags, _addr, offset, size = struct.unpack_from(
            "<IIQQQQ", elf, shoff + index * shentsize
        )
        return name, offset, size

    _, names_offset, _ = header(shstrndx)
    for index in range(shnum):
        name, offset, size = header(index)
        end = elf.index(b"\0", names_offset + name)
        if elf[names_offset + name : end] == wanted:
            return elf[offset : offset + size]
    return b""


SIGNATURE_MAGIC = b"~Module signature appended~\n"


def _unsigned(module: bytes) -> bytes:
    """The module without its appended signature: checking it costs RSA per module at every boot
    under TCG, and the image is ours (the kernel loads unsigned modules unless sig_enforce)."""
    if not module.endswith(SIGNATURE_MAGIC):
        return module
    # struct module_signature: 12 bytes, ending with the signature's length (big-endian).
    trailer = len(module) - len(SIGNATURE_MAGIC) - 12
    (length,) = struct.unpack_from(">I", module, trailer + 8)
    return module[: trailer - length]


def _vmlinux(bzimage: bytes) -> bytes:
    """The ELF kernel inside a bzImage: its payload is the one compressed stream it holds."""
    for magic, inflater in (
        (b"\xfd7zXZ\x00", lambda: lzma.LZMADecompressor(lzma.FORMAT_XZ)),
        (b"\x1f\x8b\x08", lambda: zlib.decompressobj(wbits=31)),  # gzip, one member
    ):
        start = bzimage.find(magic)
        while start != -1:
            with contextlib.suppress(lzma.LZMAError, zlib.error):
                elf = inflater().decompress(bzimage[start:])
                if elf[:4] == b"\x7fELF":
                    return elf
            start = bzimage.find(magic, start + 1)
    raise ImageError("cannot find an xz or gzip kernel inside the vmlinuz (other compressions)")


def _is_static(path: Path) -> bool:
    """An ELF with no program interpreter (PT_INTERP) needs no dynamic loader in the guest."""
    with path.open("rb") as file:
        header = file.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2:  # 64-bit only
            return False
        (phoff,) = struct.unpack_from("<Q", header, 32)
        phentsize, phnum = struct.unpack_from("<HH", header, 54)
        file.seek(phoff)
        table = file.read(phentsize * phnum)
    return all(struct.unpack_from("<I", table, i * phentsize)[0] != 3 for i in range(phnum))


class Archive:
    """A cpio archive in the kernel's "newc" format, built in memory (at most a few MB)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.inode = 1

    def directory(self, name: str, mode: int = 0o755) -> None:
        self._entry(name, stat.S_IFDIR | mode, b"")

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def file(self, name: str, content: bytes, mode: int = 0o644) -> None:
        self._entry(name, stat.S_IFREG | mode, content)

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0, b"")
        return b"".join(self.parts)

    def _entry(self, name: str, mode: int, content: bytes) -> None:
        encoded = name.encode() + b"\0"
        fields = (self.inode, mode, 0, 0, 1, 0, len(content), 0, 0, 0, 0, len(encoded), 0)
        self.inode += 1
        header = b"070701" + b"".join(b"%08X" % field for field in fields)
        self.parts += [header, encoded, _pad(len(header) + len(encoded)), content]
        self.parts.append(_pad(len(content)))


def _pad(length: int) -> bytes:
    return b"\0" * (-length % 4)


def _write(path: Path, content: bytes) -> None:
    with path.open("wb") as file:
        file.write(content)
        file.flush()
        os.fsync(file.fileno())
    path.chmod(0o644)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
