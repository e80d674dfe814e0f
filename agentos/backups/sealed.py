"""The encrypted stream an archive is: AES-256-GCM in chunks, its key derived from the owner's
passphrase by scrypt, written and read as a stream (a multi-GB archive is never held in memory).

Layout: `MAGIC`, a 4-byte length, the header (JSON: the scrypt parameters and salt, the nonce
prefix, a key check), then records — a flag byte (1 on the last record), a 4-byte length and
the ciphertext of at most `CHUNK` bytes. Each record's nonce is the prefix and its number; its
associated data is the header, its number and its flag: a record moved, dropped, altered or cut
off fails its tag, and an archive that stops before its last record is truncated. The key check
(an HMAC of a fixed text under a second derived key) tells a wrong passphrase apart from an
altered archive; it tells an attacker nothing the first record's tag would not.

Inside, the plaintext is a sequence of named entries (`EntryWriter`, `entries`): `F` + length +
JSON header, `D` + length + data frames, `E` at its end, `Z` after the last entry.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MAGIC = b"AGENTOS-BACKUP\n"
FORMAT = 1
CHUNK = 1 << 20
# scrypt at 2^15 x 8: 32 MiB and a fraction of a second per derivation, per archive.
SCRYPT = {"n": 1 << 15, "r": 8, "p": 1}
MIN_PASSPHRASE = 12
_RECORD = struct.Struct(">BI")
_CHECK_TEXT = b"agentos backup key check"


class ArchiveError(Exception):
    """An archive that cannot be read as asked; the message says why and where."""


class WrongPassphrase(ArchiveError):
    pass


def _derive(passphrase: str, salt: bytes, params: dict[str, int]) -> tuple[bytes, bytes]:
    key = hashlib.scrypt(
        passphrase.encode(),
        salt=salt,
        n=params["n"],
        r=params["r"],
        p=params["p"],
        maxmem=256 << 20,
        dklen=64,
    )
    return key[:32], key[32:]


def _nonce(prefix: bytes, number: int) -> bytes:
    return prefix + number.to_bytes(8, "big")


def _aad(header: bytes, number: int, final: bool) -> bytes:
    return header + number.to_bytes(8, "big") + (b"\x01" if final else b"\x00")


class SealedWriter:
    """A write-only binary stream that encrypts into `out` as it goes; `close()` writes the
    last record (the archive is incomplete without it) but does not close `out`."""

    def __init__(self, out: BinaryIO, passphrase: str) -> None:
        salt, prefix = os.urandom(16), os.urandom(4)
        key, check_key = _derive(passphrase, salt, SCRYPT)
        self._header = json.dumps(
            {
                "format": FORMAT,
                "kdf": {"name": "scrypt", **SCRYPT, "salt": base64.b64encode(salt).decode()},
                "cipher": "AES-256-GCM",
                "chunk": CHUNK,
                "nonce_prefix": base64.b64encode(prefix).decode(),
                "check": hmac.new(check_key, _CHECK_TEXT, "sha256").hexdigest(),
            },
            sort_keys=True,
        ).encode()
        self._aes, self._prefix, self._out = AESGCM(key), prefix, out
        self._buffer = bytearray()
        self._number = 0
        self.closed = False
        out.write(MAGIC + struct.pack(">I", len(self._header)) + self._header)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self._buffer += data
        while len(self._buffer) >= CHUNK:
            self._record(bytes(self._buffer[:CHUNK]), final=False)
            del self._buffer[:CHUNK]
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._record(bytes(self._buffer), final=True)
            self._buffer.clear()
            self.closed = True

    def _record(self, plain: bytes, *, final: bool) -> None:
        number = self._number
        sealed = self._aes.encrypt(
            _nonce(self._prefix, number), plain, _aad(self._header, number, final)
        )
        self._out.write(_RECORD.pack(1 if final else 0, len(sealed)) + sealed)
        self._number += 1


def read_header(source: BinaryIO) -> tuple[bytes, dict[str, Any]]:
    magic = source.read(len(MAGIC))
    if magic != MAGIC:
        raise ArchiveError("Not an agentos backup archive (its first bytes are not ours).")
    (length,) = struct.unpack(">I", _exactly(source, 4, "the header"))
    if length > 1 << 16:
        raise ArchiveError("The archive's header is damaged (its length is implausible).")
    raw = _exactly(source, length, "the header")
    try:
        header = json.loads(raw)
    except ValueError:
        raise ArchiveError("The archive's header is damaged (not JSON).") from None
    if header.get("format") != FORMAT:
        raise ArchiveError(
            f"Archive format {header.get('format')!r}; this version reads format {FORMAT}."
        )
    return raw, header


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def _exactly(source: Readable, size: int, what: str) -> bytes:
    data = source.read(size)
    if len(data) != size:
        raise ArchiveError(f"The archive is truncated: it ends inside {what}.")
    return data


class SealedReader:
    """A read-only binary stream of the plaintext; every record is authenticated before a byte
    of it is returned."""

    def __init__(self, source: BinaryIO, passphrase: str) -> None:
        self._header, header = read_header(source)
        kdf = header["kdf"]
        key, check_key = _derive(
            passphrase, base64.b64decode(kdf["salt"]), {k: int(kdf[k]) for k in ("n", "r", "p")}
        )
        expected = hmac.new(check_key, _CHECK_TEXT, "sha256").hexdigest()
        if not hmac.compare_digest(expected, str(header.get("check", ""))):
            raise WrongPassphrase(
                "Wrong passphrase: it does not open this archive (or the archive's header was"
                " altered)."
            )
        self._aes = AESGCM(key)
        self._prefix = base64.b64decode(header["nonce_prefix"])
        self._source = source
        self._number = 0
        self._offset = len(MAGIC) + 4 + len(self._header)
        self._buffer = b""
        self._position = 0
        self._ended = False

    def read(self, size: int = -1) -> bytes:
        parts = []
        wanted = size if size >= 0 else None
        while wanted is None or wanted > 0:
            if self._position >= len(self._buffer) and not self._next():
                break
            end = len(self._buffer) if wanted is None else self._position + wanted
            piece = self._buffer[self._position : end]
            self._position += len(piece)
            parts.append(piece)
            if wanted is not None:
                wanted -= len(piece)
        return b"".join(parts)

    def _next(self) -> bool:
        if self._ended:
            return False
        start = self._offset
        head = self._source.read(_RECORD.size)
        if len(head) < _RECORD.size:
            raise ArchiveError(
                f"The archive is truncated at byte {start}: its last record is missing (a"
                " backup cut short, or a partial copy)."
            )
        flag, length = _RECORD.unpack(head)
        if flag not in (0, 1) or length > CHUNK + 16:
            raise ArchiveError(f"The archive is damaged at byte {start}: a record header is bad.")
        sealed = _exactly(self._source, length, f"record {self._number}")
        final = flag == 1
        try:
            plain = self._aes.decrypt(
                _nonce(self._prefix, self._number), sealed, _aad(self._header, self._number, final)
            )
        except InvalidTag:
            raise ArchiveError(
                f"The archive was altered or damaged: record {self._number} (bytes {start}-"
                f"{start + _RECORD.size + length}) fails its AES-GCM authentication tag."
            ) from None
        self._offset += _RECORD.size + length
        self._number += 1
        if final:
            self._ended = True
            if self._source.read(1):
                raise ArchiveError(
                    f"The archive was altered: bytes follow its last record (at byte "
                    f"{self._offset})."
                )
        self._buffer, self._position = plain, 0
        return bool(plain) or not final


# --- Named entries inside the plaintext -------------------------------------------------------


class EntryWriter:
    """A file-like for one entry's data (tarfile and subprocess pipes write into it)."""

    def __init__(self, sink: SealedWriter) -> None:
        self._sink = sink
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data)
        for start in range(0, len(view), CHUNK):
            piece = view[start : start + CHUNK]
            self._sink.write(b"D" + struct.pack(">I", len(piece)))
            self._sink.write(piece)
        self.size += len(view)
        return len(view)

    def flush(self) -> None:
        pass


def begin_entry(sink: SealedWriter, header: dict[str, Any]) -> EntryWriter:
    raw = json.dumps(header, sort_keys=True).encode()
    sink.write(b"F" + struct.pack(">I", len(raw)) + raw)
    return EntryWriter(sink)


def end_entry(sink: SealedWriter) -> None:
    sink.write(b"E")


def end_archive(sink: SealedWriter) -> None:
    sink.write(b"Z")


@dataclass
class Entry:
    header: dict[str, Any]
    stream: EntryReader


class EntryReader:
    """One entry's data, read frame by frame; `drain()` skips what the reader left."""

    def __init__(self, source: SealedReader) -> None:
        self._source = source
        self._left = 0
        self.done = False

    def read(self, size: int = -1) -> bytes:
        parts = []
        while not self.done and (size < 0 or size > 0):
            if self._left == 0:
                kind = self._source.read(1)
                if kind == b"E":
                    self.done = True
                    break
                if kind != b"D":
                    raise ArchiveError("The archive's contents are malformed (a bad frame).")
                (self._left,) = struct.unpack(">I", _exactly(self._source, 4, "a frame"))
            take = self._left if size < 0 else min(size, self._left)
            piece = _exactly(self._source, take, "a frame")
            self._left -= take
            if size > 0:
                size -= take
            parts.append(piece)
        return b"".join(parts)

    def drain(self) -> None:
        while not self.done:
            self.read(CHUNK)


def entries(source: SealedReader) -> Iterator[Entry]:
    """Each entry in order; the archive's end marker must come, or it is truncated."""
    while True:
        kind = source.read(1)
        if kind == b"Z":
            if source.read(1):
                raise ArchiveError("The archive's contents go on after their end marker.")
            return
        if kind != b"F":
            raise ArchiveError("The archive's contents are malformed or end early (no end marker).")
        (length,) = struct.unpack(">I", _exactly(source, 4, "an entry header"))
        header = json.loads(_exactly(source, length, "an entry header"))
        entry = Entry(header, EntryReader(source))
        yield entry
        entry.stream.drain()
