"""WARC/1.1 output: a size-rotated writer, crash recovery and a read-back helper.

File format
-----------
Each file is ``{prefix}-{UTC YYYYmmddHHMMSS}-{seq:05d}-{pid}.warc.gz``: a sequence of
gzip members, **exactly one WARC record per member**, the first record a ``warcinfo``.
Standard readers (warcio, pywb, jwat) read it as an ordinary record-compressed WARC,
and the ``(offset, length)`` of a member is a seekable address of its record.

While a file is being written it is named ``<name>.open``; it is renamed to ``<name>``
when it is rotated or the writer is closed. A fetch produces a ``response`` record
(block = the HTTP head as received + the body) followed by a ``request`` record
(block = the request head) whose ``WARC-Concurrent-To`` names the response. A fetch
whose payload is already archived is written as a ``revisit`` record instead (block = the
HTTP head alone, no payload; :class:`Revisit` says which profile and which earlier
record), followed by its ``request`` record likewise.

Records are built by FastWARC (headers, record ids, serialization; both SHA-1 digests
are computed here, in FastWARC's form) and read back by warcio, so every file is checked
by a second, independent implementation. FastWARC builds a fetch's two records in
clearly less CPU time than warcio's builder, gzip included. Compression is ours
(:func:`gzip_member`), because warcio's gzip runs at level 9 and is the bottleneck of a
fast crawl (see docs/benchmarks.md).

Crash safety
------------
The process may be killed at any byte. Everything up to the last complete gzip member
holding a readable record survives: :func:`recover_directory` cuts the torn tail of
every ``.open`` file and renames it. Data is durable only after :meth:`WarcWriter.sync`.
A writer holds an exclusive ``flock`` on its ``.open`` file (the kernel drops it when the
process dies, however it dies), so recovery never touches a file that is still being
written, even by another process sharing the directory.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import io
import os
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, Protocol

from fastwarc.warc import WarcHeader, WarcRecord, WarcRecordType
from isal import isal_zlib
from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed
from warcio.statusandheaders import (
    StatusAndHeaders,
    StatusAndHeadersParserException,
)
from warcio.timeutils import datetime_to_iso_date

from drumbeat.store import durable

OPEN_SUFFIX = ".open"
WARC_SUFFIX = ".warc.gz"
_GZIP_WBITS = 31  # zlib: gzip container, 32 KiB window
ISAL_MAX_LEVEL = 3  # levels up to this use ISA-L, above it zlib


def gzip_member(data: bytes, level: int) -> bytes:
    """``data`` as one gzip member.

    Levels 0-3 use ISA-L (python-isal), 4-9 zlib. On HTML pages ISA-L's level 1 is
    several times faster than zlib's at the same ratio, and zlib's default level costs
    far more again for a little more compression. ISA-L's level 0 still compresses,
    unlike zlib's.
    """
    if level <= ISAL_MAX_LEVEL:
        return isal_zlib.compress(data, level, _GZIP_WBITS)
    return zlib.compress(data, level, _GZIP_WBITS)


_WRITE_BUFFER_BYTES = 1 << 20
_SCAN_CHUNK_BYTES = 1 << 20
_WARC_1_1_SPEC = "http://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"
# The WARC 1.1 revisit profiles (WARC 1.1, 6.7.2 and 6.7.3).
IDENTICAL_PAYLOAD_DIGEST = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
SERVER_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
_RESPONSE_TYPE = "application/http; msgtype=response"


def warc_date(fetch_time: float) -> str:
    """``fetch_time`` (epoch seconds) as a ``WARC-Date`` with microseconds, as records
    of a fetch at that time carry it (and a revisit's ``WARC-Refers-To-Date`` names)."""
    date: str = datetime_to_iso_date(
        datetime.fromtimestamp(fetch_time, UTC).replace(tzinfo=None), use_micros=True
    )
    return date


def sha1_label(data: bytes) -> str:
    """``data``'s SHA-1 as a WARC digest: ``sha1:`` and base32, FastWARC's own form.

    The base32 of the 160-bit digest is 16 pairs of characters of 10 bits each, looked
    up in a table: what base64.b32encode gives (tested), whose loop is Python code in
    CPython 3.11 and slower.
    """
    digest = int.from_bytes(hashlib.sha1(data).digest(), "big")
    return "sha1:" + "".join([_BASE32_PAIRS[digest >> shift & 0x3FF] for shift in _PAIR_SHIFTS])


_BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"  # RFC 4648
_BASE32_PAIRS = [a + b for a in _BASE32 for b in _BASE32]
_PAIR_SHIFTS = range(150, -1, -10)


def written_bytes(record: WarcRecord) -> bytes:
    """``record`` as FastWARC's ``write`` gives it (no digest added): what
    :data:`record_bytes` is where :func:`state_is_written_record` is False."""
    buffer = io.BytesIO()
    record.write(buffer)
    return buffer.getvalue()


def state_is_written_record() -> bool:
    """Whether FastWARC's pickled state of a record built in memory, digest included,
    is the record as ``write(checksum_data=True)`` gives it (checked on a sample)."""
    block = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody"
    record = WarcRecord()
    record.init_headers(record_type=WarcRecordType.response)
    record.headers[WarcHeader.WARC_TARGET_URI] = "http://example.test/"
    record.headers[WarcHeader.WARC_BLOCK_DIGEST] = sha1_label(block)
    record.set_bytes_content(block)
    state = record.__getstate__()
    written = io.BytesIO()
    record.write(written, checksum_data=True)
    return isinstance(state, tuple) and state[:1] == (written.getvalue(),)


# A record's bytes: its pickled state where that is the serialized record (FastWARC 2:
# checked once, above), else write()'s. write() calls back into Python for its output
# stream, which costs more a record.
record_bytes: Callable[[WarcRecord], bytes] = (
    (lambda record: record.__getstate__()[0]) if state_is_written_record() else written_bytes
)


class Exchange(Protocol):
    """What :meth:`WarcWriter.write_fetches` reads of a fetch (a FetchResponse is one):
    the arguments of :meth:`WarcWriter.write_fetch`."""

    url: str
    ip: str | None
    request_head: bytes
    response_head: bytes
    body: bytes
    truncated: str | None
    fetch_time: float


@dataclass(slots=True)
class _Exchange:
    url: str
    ip: str | None
    request_head: bytes
    response_head: bytes
    body: bytes
    truncated: str | None
    fetch_time: float


@dataclass(frozen=True, slots=True)
class Revisit:
    """What makes a fetch a ``revisit`` record: its ``profile`` (one of the WARC 1.1
    profiles above) and the earlier record it refers to, by ``refers_to_uri`` (its
    ``WARC-Target-URI``) and ``refers_to_date`` (its ``WARC-Date``, :func:`warc_date`'s
    form). ``payload_digest`` (``sha1:`` base32, :func:`sha1_label`) is the payload's,
    the same as the earlier record's: required for identical-payload-digest, and given
    for server-not-modified where the earlier record's is known. ``refers_to``: the
    earlier record's ``WARC-Record-ID``, when known."""

    profile: str
    refers_to_uri: str
    refers_to_date: str
    payload_digest: str | None = None
    refers_to: str | None = None

    def __post_init__(self) -> None:
        if self.profile == IDENTICAL_PAYLOAD_DIGEST and not self.payload_digest:
            raise ValueError("an identical-payload-digest revisit needs its payload_digest")


@dataclass(frozen=True, slots=True)
class WarcLocation:
    """Where a record lives: ``filename`` (final name, no directory) and the byte
    ``offset``/``length`` of its gzip member. ``str()`` gives the crawl-log form
    ``"file:offset"``."""

    filename: str
    offset: int
    length: int

    def __str__(self) -> str:
        return f"{self.filename}:{self.offset}"


@dataclass(frozen=True, slots=True)
class WarcWriterStats:
    files_finished: int
    records: int
    bytes_written: int  # compressed bytes, warcinfo records included
    current_file: str | None


@dataclass(frozen=True, slots=True)
class RecoveredFile:
    """Outcome of recovering one ``.open`` file. ``final_path`` is None when the file
    held no complete record and was removed."""

    open_path: Path
    final_path: Path | None
    bytes_cut: int
    records_kept: int


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """One record read back by :func:`iter_records`. ``content`` is the payload (the
    block minus the HTTP head) exactly as stored, not content-decoded."""

    offset: int
    length: int
    rec_type: str
    rec_headers: StatusAndHeaders
    http_headers: StatusAndHeaders | None
    content: bytes

    def header(self, name: str) -> str | None:
        value: str | None = self.rec_headers.get_header(name)
        return value


class WarcWriter:
    """Writes fetches as WARC/1.1 records into size-rotated files in ``directory``.

    A file is opened on the first write after construction or rotation, so an idle
    writer leaves no file behind. A writer never appends to an existing file. One
    thread writes; another may flush, sync or close it meanwhile (a fetcher archives a
    lane's pages in a thread of its own while its event loop answers the manager's
    syncs): a lock orders what touches the open file, and records are compressed
    outside it.
    """

    def __init__(
        self,
        directory: Path,
        *,
        prefix: str = "drumbeat",
        max_file_bytes: int = 1 << 30,
        gzip_level: int = 6,
        software: str = "drumbeat/0.1",
    ) -> None:
        if max_file_bytes <= 0:
            raise ValueError("max_file_bytes must be positive")
        self._dir = Path(directory)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._prefix = prefix
        self._max_file_bytes = max_file_bytes
        self._level = gzip_level
        self._software = software
        self._seq = 0
        self._file: BinaryIO | None = None
        self._name = ""
        self._size = 0
        self._files_finished = 0
        self._records = 0
        self._bytes_written = 0
        self._closed = False
        self._lock = threading.RLock()  # the open file and the counters: see the class

    def write_fetch(
        self,
        url: str,
        *,
        ip: str | None,
        request_head: bytes,
        response_head: bytes,
        body: bytes,
        truncated: str | None,
        fetch_time: float,
    ) -> WarcLocation:
        """Write a ``response`` record then its ``request`` record; return the
        response's location.

        ``response_head`` is the status line + headers + CRLFCRLF as received and
        ``body`` the bytes that followed it (the fetcher must not decode them: a
        ``Content-Encoding`` or ``Transfer-Encoding`` named in the head must still
        describe ``body``, or readers will mis-decode it). ``fetch_time`` (epoch
        seconds) becomes ``WARC-Date`` with microseconds. ``truncated`` (None, or
        ``length``, ``time``, ``disconnect``) marks a body cut short: ``WARC-Truncated``.
        """
        [location] = self._write_all(
            [
                self._exchange_records(
                    url, ip, request_head, response_head, body, truncated, fetch_time
                )
            ]
        )
        if isinstance(location, OSError):
            raise location
        return location

    def write_revisit(
        self,
        url: str,
        *,
        ip: str | None,
        request_head: bytes,
        response_head: bytes,
        fetch_time: float,
        revisit: Revisit,
    ) -> WarcLocation:
        """Write a ``revisit`` record of ``revisit.profile`` then its ``request`` record;
        return the revisit's location.

        The revisit's block is ``response_head`` (the HTTP status line and headers as
        received, kept) and no payload; it carries ``WARC-Profile``,
        ``WARC-Refers-To-Target-URI``, ``WARC-Refers-To-Date`` and, where given,
        ``WARC-Payload-Digest`` and ``WARC-Refers-To``. The one writer of both WARC 1.1
        profiles: the fetcher's duplicate detection writes identical-payload-digest
        revisits through :meth:`write_fetches`, and a conditional GET answered ``304 Not
        Modified`` (issue 52) calls this with :data:`SERVER_NOT_MODIFIED`.
        """
        exchange = _Exchange(url, ip, request_head, response_head, b"", None, fetch_time)
        [location] = self.write_fetches([exchange], revisits=[revisit])
        if isinstance(location, OSError):
            raise location
        return location

    def write_fetches(
        self,
        exchanges: Sequence[Exchange],
        *,
        revisits: Sequence[Revisit | None] | None = None,
        digests: Sequence[str | None] | None = None,
    ) -> list[WarcLocation | OSError]:
        """Write each exchange as :meth:`write_fetch` does, in order; return each one's
        location, or the OSError that stopped its write (a full disk: the exchanges
        after it are still tried). ``revisits[i]``, where given and not None, makes
        exchange ``i`` a revisit record instead (see :meth:`write_revisit`; its body is
        not written). ``digests[i]``, where given, is exchange ``i``'s payload digest
        already computed (:func:`sha1_label` of its body), to save computing it again.

        Three passes over all of them: records made, then compressed, then written (a
        pass keeps one library's code and data in the CPU's caches: less time than
        exchange by exchange). Any other exception is raised
        before anything is written.
        """
        records: list[tuple[bytes, bytes]] = []
        for i, e in enumerate(exchanges):
            revisit = revisits[i] if revisits is not None else None
            if revisit is not None:
                records.append(self._revisit_records(e, revisit))
                continue
            digest = digests[i] if digests is not None else None
            records.append(
                self._exchange_records(
                    e.url,
                    e.ip,
                    e.request_head,
                    e.response_head,
                    e.body,
                    e.truncated,
                    e.fetch_time,
                    digest,
                )
            )
        return self._write_all(records)

    def _write_all(self, records: list[tuple[bytes, bytes]]) -> list[WarcLocation | OSError]:
        """Compress and write each (response, request) pair of records."""
        level = self._level
        members = [
            (gzip_member(response, level), gzip_member(request, level))
            for response, request in records
        ]
        locations: list[WarcLocation | OSError] = []
        with self._lock:
            if self._closed:
                raise ValueError("write to a closed WarcWriter")
            for response, request in members:
                try:
                    f = self._ensure_open()
                    locations.append(WarcLocation(self._name, self._size, len(response)))
                    f.write(response)
                    f.write(request)
                    self._advance(2, len(response) + len(request))
                    if self._size >= self._max_file_bytes:
                        self._finish_file()
                except OSError as e:
                    locations.append(e)
        return locations

    def _exchange_records(
        self,
        url: str,
        ip: str | None,
        request_head: bytes,
        response_head: bytes,
        body: bytes,
        truncated: str | None,
        fetch_time: float,
        payload_digest: str | None = None,
    ) -> tuple[bytes, bytes]:
        """The response and request records of one exchange, uncompressed."""
        date = warc_date(fetch_time)
        # Header names as FastWARC's constants: a str name costs it a failed conversion
        # to WarcHeader first, for every header of every record.
        response_headers = [
            (WarcHeader.WARC_DATE, date),
            (WarcHeader.WARC_TARGET_URI, url),
            (WarcHeader.CONTENT_TYPE, _RESPONSE_TYPE),
        ]
        if ip:
            response_headers.append((WarcHeader.WARC_IP_ADDRESS, ip))
        if truncated:
            response_headers.append((WarcHeader.WARC_TRUNCATED, truncated))
        # The block is the head exactly as received, then the body as stored (transfer
        # framing removed, content coding kept): the payload digest is over that body.
        response_headers.append(
            (WarcHeader.WARC_PAYLOAD_DIGEST, payload_digest or sha1_label(body))
        )
        response_id, response = self.build_record(
            WarcRecordType.response, response_headers, response_head + body
        )
        return response, self._request_record(url, date, response_id, request_head)

    def _revisit_records(self, e: Exchange, revisit: Revisit) -> tuple[bytes, bytes]:
        """The revisit and request records of one exchange, uncompressed."""
        date = warc_date(e.fetch_time)
        headers = [
            (WarcHeader.WARC_DATE, date),
            (WarcHeader.WARC_TARGET_URI, e.url),
            (WarcHeader.CONTENT_TYPE, _RESPONSE_TYPE),
        ]
        if e.ip:
            headers.append((WarcHeader.WARC_IP_ADDRESS, e.ip))
        headers += [
            (WarcHeader.WARC_PROFILE, revisit.profile),
            (WarcHeader.WARC_REFERS_TO_TARGET_URI, revisit.refers_to_uri),
            (WarcHeader.WARC_REFERS_TO_DATE, revisit.refers_to_date),
        ]
        if revisit.refers_to:
            headers.append((WarcHeader.WARC_REFERS_TO, revisit.refers_to))
        if revisit.payload_digest:
            headers.append((WarcHeader.WARC_PAYLOAD_DIGEST, revisit.payload_digest))
        record_id, record = self.build_record(WarcRecordType.revisit, headers, e.response_head)
        return record, self._request_record(e.url, date, record_id, e.request_head)

    def _request_record(self, url: str, date: str, concurrent_to: str, head: bytes) -> bytes:
        _, request = self.build_record(
            WarcRecordType.request,
            [
                (WarcHeader.WARC_DATE, date),
                (WarcHeader.WARC_TARGET_URI, url),
                (WarcHeader.WARC_CONCURRENT_TO, concurrent_to),
                (WarcHeader.CONTENT_TYPE, "application/http; msgtype=request"),
            ],
            head,
        )
        return request

    def flush(self) -> None:
        """Hand buffered bytes to the OS (survives a process kill, not a power loss)."""
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def sync(self) -> None:
        """Flush and fsync the current file: everything written so far is durable (once
        the thread's deferred fsyncs are synced, if it defers them: store.durable)."""
        with self._lock:
            if self._file is not None:
                self._file.flush()
                durable.fsync(self._file.fileno())

    async def sync_off_loop(self) -> None:
        """:meth:`sync`, with the fsync run on a worker thread: the event loop (and this
        writer) go on meanwhile. Everything written before the call is durable when it
        returns; the file may be rotated meanwhile (the fsync holds its own descriptor).

        fsync waits for the disk: with a few hundred MB written since the last one
        (half a minute of a fast crawl), it blocked a fetcher for seconds.
        """
        with self._lock:
            if self._file is None:
                return
            self._file.flush()
            descriptor = os.dup(self._file.fileno())
        fsynced = asyncio.get_running_loop().run_in_executor(None, _fsync_and_close, descriptor)
        await asyncio.shield(fsynced)  # cancelled or not, the thread closes the descriptor

    def close(self) -> None:
        """Sync and rename the current file to its final name. Idempotent."""
        with self._lock:
            if self._file is not None:
                self._finish_file()
            self._closed = True

    def stats(self) -> WarcWriterStats:
        return WarcWriterStats(
            files_finished=self._files_finished,
            records=self._records,
            bytes_written=self._bytes_written,
            current_file=self._name if self._file is not None else None,
        )

    def __enter__(self) -> WarcWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def build_record(
        rec_type: WarcRecordType, headers: list[tuple[WarcHeader, str]], block: bytes
    ) -> tuple[str, bytes]:
        """One record with ``headers`` (after WARC-Type, WARC-Date, WARC-Record-ID and
        Content-Length; a given WARC-Date replaces the current time) and then its block
        digest; returns (its WARC-Record-ID, the record, uncompressed)."""
        record = WarcRecord()
        record.init_headers(record_type=rec_type)
        fields = record.headers
        for name, value in headers:
            fields[name] = value
        # What FastWARC's write(checksum_data=True) appends, computed here: see record_bytes.
        fields[WarcHeader.WARC_BLOCK_DIGEST] = sha1_label(block)
        record.set_bytes_content(block)
        record_id = record.record_id
        assert record_id is not None  # init_headers made one
        return record_id, record_bytes(record)

    def _advance(self, records: int, nbytes: int) -> None:
        self._size += nbytes
        self._records += records
        self._bytes_written += nbytes

    def _ensure_open(self) -> BinaryIO:
        if self._file is not None:
            return self._file
        while True:
            stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime())
            name = f"{self._prefix}-{stamp}-{self._seq:05d}-{os.getpid()}{WARC_SUFFIX}"
            self._seq += 1
            path = self._dir / (name + OPEN_SUFFIX)
            if (self._dir / name).exists():
                continue
            try:
                # "x": a restarted process may reuse a pid within the same second. Held
                # open (no with-block) as the writer's current file until it rotates.
                f = open(path, "xb", buffering=_WRITE_BUFFER_BYTES)
            except FileExistsError:
                continue
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            # Another process's recovery may have locked and removed the new, empty
            # file before we locked it: then our descriptor points to no name.
            try:
                if os.stat(path).st_ino == os.fstat(f.fileno()).st_ino:
                    break
            except FileNotFoundError:
                pass
            f.close()
        durable.fsync_dir(self._dir)
        self._file, self._name, self._size = f, name, 0
        info = {
            "software": self._software,
            "format": "WARC File Format 1.1",
            "conformsTo": _WARC_1_1_SPEC,
            "hostname": socket.gethostname(),
        }
        _, record = self.build_record(
            WarcRecordType.warcinfo,
            [
                (WarcHeader.WARC_FILENAME, name),
                (WarcHeader.CONTENT_TYPE, "application/warc-fields"),
            ],
            "".join(f"{key}: {value}\r\n" for key, value in info.items()).encode(),
        )
        member = gzip_member(record, self._level)
        f.write(member)
        self._advance(1, len(member))
        return f

    def _finish_file(self) -> None:
        assert self._file is not None
        self.sync()
        self._file.close()
        self._file = None
        os.rename(self._dir / (self._name + OPEN_SUFFIX), self._dir / self._name)
        durable.fsync_dir(self._dir)
        self._files_finished += 1


def _fsync_and_close(descriptor: int) -> None:
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def recover_directory(directory: Path) -> list[RecoveredFile]:
    """Make every ``*.warc.gz.open`` file in ``directory`` (left by a killed writer)
    a valid, final WARC file.

    Each file is cut right after its last complete gzip member that holds one
    readable record (digests checked) and renamed to its final name; a file with no
    such record is removed. Nothing before the first bad member is lost. Files locked
    by a live writer are skipped. Call it at startup, before creating a writer.
    """
    directory = Path(directory)
    results: list[RecoveredFile] = []
    if not directory.is_dir():
        return results
    for open_path in sorted(directory.glob("*" + WARC_SUFFIX + OPEN_SUFFIX)):
        recovered = _recover_file(open_path)
        if recovered is not None:
            results.append(recovered)
    if results:
        durable.fsync_dir(directory)
    return results


def _recover_file(open_path: Path) -> RecoveredFile | None:
    """Recover one file, or return None if a live writer holds it or it is gone."""
    try:
        # The with-block below closes it; this try covers the open alone.
        f = open(open_path, "r+b")
    except FileNotFoundError:  # another process recovered it first
        return None
    with f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        size = os.fstat(f.fileno()).st_size
        keep = 0
        records = 0
        for offset, length, data in _complete_members(f):
            if not _is_one_readable_record(data):
                break
            keep = offset + length
            records += 1
        if records and keep < size:
            f.truncate(keep)
            os.fsync(f.fileno())
        # Rename or unlink while still holding the lock; see WarcWriter._ensure_open.
        if not records:
            open_path.unlink()
            return RecoveredFile(open_path, None, size, 0)
        final_path = open_path.with_name(open_path.name[: -len(OPEN_SUFFIX)])
        os.rename(open_path, final_path)
    return RecoveredFile(open_path, final_path, size - keep, records)


def _complete_members(f: BinaryIO) -> Iterator[tuple[int, int, bytes]]:
    """Yield ``(offset, length, decompressed)`` for each complete, CRC-valid gzip
    member from the start of ``f``; stop silently at the first torn or invalid one."""
    offset = 0  # start of the member being decoded
    consumed = 0  # its compressed bytes fed to the decoder so far
    decoder = zlib.decompressobj(_GZIP_WBITS)
    parts: list[bytes] = []
    pending = b""
    while True:
        if not pending:
            pending = f.read(_SCAN_CHUNK_BYTES)
            if not pending:
                return
        try:
            parts.append(decoder.decompress(pending))
        except zlib.error:
            return
        if not decoder.eof:
            consumed += len(pending)
            pending = b""
            continue
        length = consumed + len(pending) - len(decoder.unused_data)
        yield offset, length, b"".join(parts)
        offset += length
        pending = decoder.unused_data
        decoder = zlib.decompressobj(_GZIP_WBITS)
        parts = []
        consumed = 0


def _is_one_readable_record(data: bytes) -> bool:
    """True if ``data`` is exactly one WARC record that warcio reads in full with a
    matching block digest."""
    try:
        records = 0
        for record in ArchiveIterator(io.BytesIO(data), check_digests="raise"):
            records += 1
            if records > 1 or not record.rec_headers.get_header("WARC-Block-Digest"):
                return False
            expected = record.payload_length if record.http_headers else record.length
            # A short block never reaches the digest check, so compare lengths too.
            if len(record.raw_stream.read()) != expected:
                return False
        return records == 1
    except (ArchiveLoadFailed, StatusAndHeadersParserException, ValueError, EOFError):
        return False


def iter_records(path: Path) -> Iterator[StoredRecord]:
    """Read every record of a WARC file with warcio, checking digests (a mismatch
    raises ``warcio.exceptions.ArchiveLoadFailed``)."""
    with open(path, "rb") as f:
        it = ArchiveIterator(f, check_digests="raise")
        for record in it:
            content = record.raw_stream.read()
            yield StoredRecord(
                offset=it.get_record_offset(),
                length=it.get_record_length(),
                rec_type=record.rec_type,
                rec_headers=record.rec_headers,
                http_headers=record.http_headers,
                content=content,
            )
