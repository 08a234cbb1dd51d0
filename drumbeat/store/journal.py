"""The write-ahead journal's files: the fetches completed since a checkpoint.

The manager appends one record per group commit (``drumbeat.manager.journal`` says when
and in which order with the WARC files and the crawl log); a restart replays the records
on top of the live checkpoint. This module is the on-disk format alone.

Layout::

    DIR/journal/after-000042.dj   the fetches completed after checkpoint 42's commits

File format (integers little-endian)::

    file    := MAGIC record*
    MAGIC   := b"DRUMBEAT-JOURNAL 3\\n"   (versions 1 and 2, read still: see below)
    record  := u32 length | u32 crc32(body) | body           (length = len(body))
    body    := deflate (raw zlib stream, wbits -15) of entry*
    entry   := i32 status (-1: no response) | u32 url bytes | u16 error bytes
               | u32 n found | u32 found payload bytes
               | u32 n edges | u16 edge source bytes | u32 edge target bytes
               | u16 visit bytes
               | url | error | lengths (4 n) | payloads
               | source | edge lengths (4 m) | edge targets
               | visit

Version 3 leaves out the found URLs' fingerprints and the edges' keys: both are hashes
of the bytes beside them (xxh3_64 of each payload's URL, of ``source \\n target``),
random bytes that deflate cannot shrink, the larger part of a record on disk
(docs/benchmarks.md). :func:`read_journal` gives them empty; the reader that replays
the entries derives them (``drumbeat.manager.journal.replay_entries``). Version 2 held them, after
the error (``fingerprints (8 n)``) and after the source (``edge keys (8 m)``); version 1
as version 2, without the visit.

An entry is one completed page fetch: its URL, status or error, and what it found, as
the fetcher packed it (``drumbeat.queue.base.FoundURLs`` and ``FoundEdges``, native
order, which is little-endian on every platform drumbeat runs on), and, in a crawl with
revisits, the *visit*: what the revisits' history keeps of the fetch, as
``drumbeat.manager.revisiting`` packs it (empty otherwise). An entry with an empty URL
and no status holds links or edges admitted without a fetch of their own; its error
says whence (``drumbeat.manager.journal``: ``links``, ``forwarded``).

A record is written whole by one ``write``; a crash can leave only the file's last
record incomplete (short, or, after a power loss, with a wrong checksum). Reading cuts
such a torn tail off the file and says so; a bad record followed by good data, or a
bad magic, is corruption: :class:`JournalError`, naming the file.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from isal import isal_zlib

from drumbeat.store import durable

MAGIC = b"DRUMBEAT-JOURNAL 3\n"
MAGIC_V2 = b"DRUMBEAT-JOURNAL 2\n"  # (same length)
MAGIC_V1 = b"DRUMBEAT-JOURNAL 1\n"
_VERSIONS = {MAGIC: 3, MAGIC_V2: 2, MAGIC_V1: 1}
SUFFIX = ".dj"
_NAME = re.compile(r"after-(\d{6,})\.dj")
_FRAME = struct.Struct("<II")
_ENTRY = struct.Struct("<iIHIIIHIH")
_ENTRY_V1 = struct.Struct("<iIHIIIHI")
_LEVEL = 1  # ISA-L's fastest: URLs compress about 4x, at a small part of a core
_WBITS = -15


class JournalError(RuntimeError):
    """A journal file is corrupt (not merely torn at its end); the message names it."""


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One entry; ``fingerprints`` and ``edge_keys`` are empty when read from a file of
    version 3, which leaves them out (see the module's docstring)."""

    url: str
    status: int | None
    error: str | None
    fingerprints: bytes = b""
    lengths: bytes = b""
    payloads: bytes = b""
    edge_source: str = ""
    edge_keys: bytes = b""
    edge_lengths: bytes = b""
    edge_targets: bytes = b""
    visit: bytes = b""


def encode_entry(
    parts: list[bytes],
    url: str,
    status: int | None,
    error: str | None,
    found: tuple[bytes, bytes, bytes] | None,
    edges: tuple[str, bytes, bytes, bytes] | None,
    visit: bytes = b"",
) -> None:
    """Append one entry's bytes to ``parts``. ``found``: (fingerprints, lengths,
    payloads); ``edges``: (source, keys, lengths, targets); ``visit``: under 64 KiB.
    The fingerprints and keys are not written (see the module's docstring)."""
    u = url.encode()
    e = (error or "").encode()
    _, lens, pays = found or (b"", b"", b"")
    source, _, elens, targets = edges or ("", b"", b"", b"")
    s = source.encode()
    parts.append(
        _ENTRY.pack(
            -1 if status is None else status,
            len(u),
            len(e),
            len(lens) // 4,
            len(pays),
            len(elens) // 4,
            len(s),
            len(targets),
            len(visit),
        )
    )
    parts += (u, e, lens, pays, s, elens, targets, visit)


def journal_path(directory: Path, number: int) -> Path:
    return directory / f"after-{number:06d}{SUFFIX}"


def journal_files(directory: Path) -> list[tuple[int, Path]]:
    """The journal files in ``directory``, by the checkpoint number they follow."""
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        m = _NAME.fullmatch(path.name)
        if m:
            found.append((int(m.group(1)), path))
    return sorted(found)


class JournalWriter:
    """Appends records to one journal file (created with its magic if new)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if os.fstat(self._fd).st_size == 0:
            _write_all(self._fd, MAGIC)
            durable.fsync_dir(path.parent)

    def append(self, parts: list[bytes]) -> int:
        """Write one record of the entries in ``parts`` (not yet durable: :meth:`sync`);
        returns its size on disk."""
        body = isal_zlib.compress(b"".join(parts), _LEVEL, _WBITS)
        _write_all(self._fd, _FRAME.pack(len(body), zlib.crc32(body)) + body)
        return _FRAME.size + len(body)

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@dataclass
class ReadReport:
    """What reading a journal file found besides its entries."""

    records: int = 0
    torn_bytes: int = 0  # cut off the file's end


def read_journal(path: Path, report: ReadReport | None = None) -> Iterator[JournalEntry]:
    """The entries of the journal file at ``path``, in order. A torn last record is cut
    off the file (``report.torn_bytes``); corruption raises :class:`JournalError`."""
    report = report if report is not None else ReadReport()
    with open(path, "r+b") as f:
        data = f.read()
        version = _VERSIONS.get(data[: len(MAGIC)], 0)
        if not version:
            if MAGIC.startswith(data):  # killed while creating it
                report.torn_bytes = len(data)
                _cut(f, 0)
                return
            raise JournalError(f"journal {path} is corrupt: it does not start as a journal")
        offset = len(MAGIC)
        while offset < len(data):
            end = offset + _FRAME.size
            if end > len(data):
                break  # a torn header
            length, crc = _FRAME.unpack_from(data, offset)
            if end + length > len(data):
                break  # a torn body
            body = data[end : end + length]
            if zlib.crc32(body) != crc:
                if end + length == len(data):
                    break  # the last record, partly written out before a power loss
                raise JournalError(
                    f"journal {path} is corrupt: the record at byte {offset} fails its checksum"
                )
            try:
                entries = list(_entries(isal_zlib.decompress(body, _WBITS), version))
            # isal's IsalError is an Exception its stubs do not type as one.
            except Exception as e:  # bad bytes under a good checksum
                raise JournalError(
                    f"journal {path} is corrupt: the record at byte {offset} does not decode: {e}"
                ) from None
            report.records += 1
            yield from entries
            offset = end + length
        if offset < len(data):
            report.torn_bytes = len(data) - offset
            _cut(f, offset)


def _cut(f: object, size: int) -> None:
    fd = f.fileno()  # type: ignore[attr-defined]
    os.ftruncate(fd, size)
    os.fsync(fd)


def _entries(body: bytes, version: int) -> Iterator[JournalEntry]:
    view = memoryview(body)
    header = _ENTRY if version >= 2 else _ENTRY_V1
    hashed = 8 if version < 3 else 0  # the bytes of a fingerprint or key, if written
    at = 0
    while at < len(body):
        status, nu, ne, nf, npay, nk, ns, nt, *nv = header.unpack_from(body, at)
        at += header.size
        sizes = (nu, ne, hashed * nf, 4 * nf, npay, ns, hashed * nk, 4 * nk, nt, *nv)
        fields: list[bytes] = []
        for size in sizes:
            if at + size > len(body):
                raise ValueError("an entry runs past its record")
            fields.append(bytes(view[at : at + size]))
            at += size
        u, e, fps, lens, pays, s, keys, elens, targets, *visit = fields
        if sum(memoryview(lens).cast("I")) != len(pays):
            raise ValueError("found URLs' lengths do not add up")
        yield JournalEntry(
            u.decode(),
            None if status == -1 else status,
            e.decode() or None,
            fps,
            lens,
            pays,
            s.decode(),
            keys,
            elens,
            targets,
            visit[0] if visit else b"",
        )
