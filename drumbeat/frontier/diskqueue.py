"""An append-only FIFO of byte records on disk, rolled back to a commit after a crash.

Directory layout::

    SSSSSSSSSS.seg      segment number S (zero-padded), read and written sequentially

A segment is ``header frame*``; all integers little-endian.

header (20 bytes)::

    magic    4s   b"DQSG"
    version  u16  FORMAT_VERSION (3; version 2 wrote blocks without keys, version 1
                  record frames only)
    pad      u16  0
    segment  u64  the segment number, as in the file name
    crc      u32  zlib.crc32 of the 16 bytes above

frame, of one of two kinds told apart by the top bit of its first word:

block frame (what :meth:`DiskQueue.extend` writes: the records of one call, or of
one part of it that fits the segment and about ``buffer_bytes``)::

    head     u32  BLOCK (2**31) | width << 24 | count: the bytes of each record's key
                  (0 to 127; in a version-2 segment always 0, and count takes the 31
                  bits) and the number of records (at least 1)
    size     u32  bytes of ``data``
    check    u64  XXH3-64 of ``lengths``, ``keys`` and ``data``, seeded with
                  ``head << 32 | size``
    lengths  count x u32, one a record
    keys     count x width bytes, one key a record (none when width is 0)
    data     the records back to back

record frame (version 1; still read, no longer written)::

    length   u32  payload bytes (below 2**31)
    check    u32  xxh32 of the payload, seeded with ``length`` (so a damaged length
                  is caught as well as a damaged payload)
    payload  length bytes

A block costs one checksum and no per-record header to write and read, several times
cheaper a record than record frames (BEAST appends nearly every URL of a crawl to QF,
and reads and appends it again at each re-split that leaves it there).
A new segment starts when the next frame would take the current one past
``segment_bytes`` (a single larger record gets a segment of its own).

Keys: :meth:`DiskQueue.extend` may give each record a key of a fixed width (BEAST: the
hashes QF's URLs are placed by), stored apart from the records in its block.
:meth:`DiskQueue.read_packed` and :meth:`DiskQueue.extend_packed` move records with
their keys as :class:`PackedRecords` (numpy arrays and one buffer), so that a caller
can choose records by their keys and pass them on without a Python object a record.

Crash consistency: :meth:`DiskQueue.commit` writes the buffer, fsyncs the segments
written since the last commit and the directory (:mod:`drumbeat.store.durable`'s fsyncs,
which a checkpoint defers), and returns a JSON-able state: the write position, the read
position (a frame's offset and the records of it already read), the unread count, the
counters and ``keep``, the oldest segment a state still reopenable may need.
Reopening with a state cuts what was appended after it (truncate/delete) and rereads
what was read after it. Fully read segments are deleted at a commit, and only those
that neither this commit nor the previous one needs, so either of the last two states
returned by ``commit()`` can be reopened.

Memory is one write buffer and one read buffer (about ``buffer_bytes`` each, the write
buffer up to one ``extend`` call's records more, the read buffer up to one block or
record more); at most two files are open (the write segment, and the read segment once
reading starts).
"""

from __future__ import annotations

import os
import shutil
import struct
import zlib
from collections.abc import Callable, Iterable
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, NotRequired, TypedDict, final

import numpy as np
import xxhash

from drumbeat.store import durable

FORMAT_VERSION = 3
_READABLE_VERSIONS = (1, 2, 3)


@final  # no other state has these keys: a check for another's key tells them apart
class QueueState(TypedDict):
    """A committed state of a :class:`DiskQueue` (JSON; checkpoints hold it as is)."""

    format: int  # FORMAT_VERSION when committed
    write: list[int]  # [segment, length]: where the next record goes
    read: list[int]  # [segment, offset]: the frame the next record is read from
    read_in_block: NotRequired[int]  # records already read of that frame (not in version 1)
    count: int  # records queued
    keep: int  # the oldest segment a reopen may need (older ones are deleted)
    bytes_written: int
    bytes_read: int


MAGIC = b"DQSG"
_HEADER = struct.Struct("<4sHxxQ")
HEADER_SIZE = _HEADER.size + 4
_FRAME = struct.Struct("<II")
FRAME_SIZE = _FRAME.size
_BLOCK_HEAD = struct.Struct("<IIQ")
BLOCK_HEAD_SIZE = _BLOCK_HEAD.size
BLOCK = 1 << 31  # the top bit of a frame's first word: a block frame
MAX_RECORD = BLOCK - 1
_WIDTH_SHIFT = 24  # a block head's key width, in a version-3 segment
MAX_KEY_BYTES = 127
MAX_BLOCK_RECORDS = (1 << _WIDTH_SHIFT) - 1


class DiskQueueCorruptError(Exception):
    """A segment is missing, truncated, not a segment, or fails a checksum."""

    def __init__(self, path: Path | str, offset: int | None, problem: str) -> None:
        where = f" at offset {offset}" if offset is not None else ""
        super().__init__(f"corrupt disk queue segment {path}{where}: {problem}")
        self.path = Path(path)
        self.offset = offset


def _seg_name(seg: int) -> str:
    return f"{seg:010d}.seg"


def _encode_header(seg: int) -> bytes:
    body = _HEADER.pack(MAGIC, FORMAT_VERSION, seg)
    return body + struct.pack("<I", zlib.crc32(body))


def _check_header(path: Path, raw: bytes, seg: int) -> int:
    """The segment's format version, once its header is checked."""
    if len(raw) < HEADER_SIZE:
        raise DiskQueueCorruptError(path, 0, "shorter than its header")
    body = raw[: _HEADER.size]
    version: int
    magic, version, number = _HEADER.unpack(body)
    if magic != MAGIC:
        raise DiskQueueCorruptError(path, 0, "bad magic, not a disk queue segment")
    if version not in _READABLE_VERSIONS:
        raise DiskQueueCorruptError(
            path, 0, f"format version {version}, expected one of {_READABLE_VERSIONS}"
        )
    if struct.unpack_from("<I", raw, _HEADER.size)[0] != zlib.crc32(body):
        raise DiskQueueCorruptError(path, 0, "header checksum mismatch")
    if number != seg:
        raise DiskQueueCorruptError(path, 0, f"header names segment {number}")
    return version


class PackedRecords:
    """Records back to back in one buffer: record i is ``data[offsets[i]:offsets[i + 1]]``
    and ``keys[i]`` its key (``keys``: a (records, key bytes) uint8 array, or None when
    they have none). What :meth:`DiskQueue.read_packed` returns and
    :meth:`DiskQueue.extend_packed` appends: no Python object a record."""

    __slots__ = ("data", "keys", "offsets")

    def __init__(
        self, offsets: np.ndarray, data: bytes | memoryview, keys: np.ndarray | None = None
    ) -> None:
        self.offsets = offsets  # int64, one more than the records, the first 0
        self.data = data
        self.keys = keys

    @classmethod
    def of(cls, records: list[bytes], keys: np.ndarray | None = None) -> PackedRecords:
        offsets = np.zeros(len(records) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, records), np.int64, len(records)), out=offsets[1:])
        return cls(offsets, b"".join(records), keys)

    @classmethod
    def joined(cls, parts: list[PackedRecords]) -> PackedRecords:
        """The records of ``parts`` (all with keys of one width, or all without) in order."""
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return cls.of([])
        offsets = np.zeros(sum(map(len, parts)) + 1, np.int64)
        np.cumsum(np.concatenate([part.lengths() for part in parts]), out=offsets[1:])
        keys = None if parts[0].keys is None else np.concatenate([p.keys for p in parts])
        return cls(offsets, b"".join([part.data for part in parts]), keys)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def records(self, index: np.ndarray | None = None) -> list[bytes]:
        """The records (those at ``index``, in its order) as bytes objects."""
        if index is None:
            starts, ends = self.offsets[:-1], self.offsets[1:]
        else:
            starts, ends = self.offsets[index], self.offsets[index + 1]
        data = self.data
        return [bytes(data[a:b]) for a, b in zip(starts.tolist(), ends.tolist())]

    def select(self, mask: np.ndarray) -> PackedRecords:
        """The records where ``mask`` is true, in order, with their keys: their data is
        copied a run of consecutive records at a time."""
        index = np.flatnonzero(mask)
        if not len(index):
            return PackedRecords(
                np.zeros(1, np.int64), b"", None if self.keys is None else self.keys[:0]
            )
        breaks = np.flatnonzero(np.diff(index) != 1) + 1
        firsts = index[np.concatenate(([0], breaks))]
        lasts = index[np.concatenate((breaks - 1, [len(index) - 1]))] + 1
        data = memoryview(self.data)
        joined = b"".join(
            [data[a:b] for a, b in zip(self.offsets[firsts].tolist(), self.offsets[lasts].tolist())]
        )
        offsets = np.zeros(len(index) + 1, np.int64)
        np.cumsum(self.lengths()[index], out=offsets[1:])
        return PackedRecords(offsets, joined, None if self.keys is None else self.keys[index])


class _SegmentWriter:
    """The write side of a :class:`DiskQueue`: the write segment ``seg`` (``length``
    bytes, the last of them in the write buffer ``buf``), block frames appended to it,
    new segments, and the fsyncs a commit owes. ``queued`` is the queue's count of
    records not yet read: appends add to it, reads take from it."""

    def __init__(self, directory: Path, segment_bytes: int, buffer_bytes: int, fsync: bool) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.buffer_bytes = buffer_bytes
        self.fsync = fsync
        self.file: BinaryIO | None = None
        self.buf = bytearray()
        self.seg, self.length = 0, HEADER_SIZE
        self.queued = 0
        self.bytes_written = 0
        # Segments closed since the last commit, which it must fsync (with fsync on).
        self.unsynced: list[int] = []
        self.dir_dirty = False

    def start(self) -> None:
        """Begin an empty queue's first segment."""
        self._create(0)
        self.dir_dirty = True

    def reopen(self, version: int) -> None:
        """Go on writing the committed write segment ``seg`` (of format ``version``) at
        ``length``, cutting what was appended after the commit."""
        path = self.directory / _seg_name(self.seg)
        size = path.stat().st_size
        if size < self.length:
            raise DiskQueueCorruptError(
                path, size, f"truncated: {size} bytes, {self.length} committed"
            )
        # Held open (no with-block): appends go on until the next segment replaces it.
        self.file = open(path, "r+b", buffering=0)
        self.file.truncate(self.length)
        self.file.seek(self.length)
        if version < FORMAT_VERSION:
            # Its blocks are read by its version's rules: new ones go to a new segment.
            self.rotate()

    def append_blocks(
        self,
        lengths: np.ndarray,
        data: Callable[[int, int], bytes | memoryview],
        keys: np.ndarray | None,
    ) -> None:
        """Append records of ``lengths`` as block frames; ``data(i, j)`` gives records i
        to j - 1 back to back."""
        count = len(lengths)
        if count and lengths.max() > MAX_RECORD:
            raise ValueError(f"record of {lengths.max()} bytes is too long for a disk queue")
        width, table = 0, b""
        if keys is not None:
            if len(keys) != count:
                raise ValueError(f"{len(keys)} keys for {count} records")
            if count:
                width = keys.nbytes // count
                if not 1 <= width <= MAX_KEY_BYTES:
                    raise ValueError(f"keys of {width} bytes: 1 to {MAX_KEY_BYTES} allowed")
                table = np.ascontiguousarray(keys).tobytes()
        ends = np.cumsum(lengths + (4 + width))  # block bytes up to each record, inclusive
        i = 0
        while i < count:
            done = int(ends[i - 1]) if i else 0
            room = self.segment_bytes - self.length - BLOCK_HEAD_SIZE
            j = int(np.searchsorted(ends, done + min(room, self.buffer_bytes), "right"))
            j = min(j, i + MAX_BLOCK_RECORDS)
            if j <= i:  # the next record does not fit where a block may go
                if ends[i] - done > room and self.length > HEADER_SIZE:
                    self.rotate()
                    continue
                j = i + 1  # a block of its own (past buffer_bytes, or a whole segment)
            self._append_block(lengths[i:j], table[i * width : j * width], data(i, j), width)
            i = j

    def _append_block(
        self, lengths: np.ndarray, keys: bytes, data: bytes | memoryview, width: int
    ) -> None:
        """Append one block frame of records of ``lengths`` (``data`` back to back, with
        ``keys`` of ``width`` bytes each) to the write segment."""
        table = lengths.astype("<u4").tobytes()
        count = len(lengths)
        head = BLOCK | width << _WIDTH_SHIFT | count
        size = len(data)
        check = xxhash.xxh3_64(table, seed=head << 32 | size)
        check.update(keys)
        check.update(data)
        wbuf = self.buf
        wbuf += _BLOCK_HEAD.pack(head, size, check.intdigest())
        wbuf += table
        wbuf += keys
        wbuf += data
        total = BLOCK_HEAD_SIZE + len(table) + len(keys) + size
        self.length += total
        self.queued += count
        self.bytes_written += total
        if len(wbuf) >= self.buffer_bytes:
            self.flush()

    def flushed(self) -> int:
        """Bytes of the write segment already in its file."""
        return self.length - len(self.buf)

    def flush(self) -> None:
        if self.buf:
            assert self.file is not None
            view = memoryview(self.buf)
            while view:
                written = self.file.write(view)
                view = view[written:]
            self.buf = bytearray()

    def _create(self, seg: int) -> None:
        header = _encode_header(seg)
        # Held open (no with-block): appends go on until the next segment replaces it.
        self.file = open(self.directory / _seg_name(seg), "xb", buffering=0)
        self.file.write(header)
        self.bytes_written += len(header)

    def rotate(self) -> None:
        self.flush()
        assert self.file is not None
        if self.fsync:
            # Made durable by the next commit: fsynced here, a full segment of QF held
            # the crawl's loop noticeably, and a checkpoint defers its commits' fsyncs.
            self.unsynced.append(self.seg)
        self.file.close()
        self.seg += 1
        self.length = HEADER_SIZE
        self._create(self.seg)
        self.dir_dirty = True

    def sync(self) -> None:
        """Write the buffer and, with fsync on, make the segments written since the last
        call and the directory durable."""
        self.flush()
        assert self.file is not None
        if self.fsync:
            for seg in self.unsynced:
                durable.fsync_path(self.directory / _seg_name(seg))
            durable.fsync(self.file.fileno())
            if self.dir_dirty:
                durable.fsync_dir(self.directory)
        self.unsynced.clear()
        self.dir_dirty = False


class DiskQueue:
    """FIFO of byte records in ``directory`` (which it owns).

    ``state=None`` starts an empty queue, wiping ``directory``; a state from
    :meth:`commit` (one of the last two) reopens exactly that commit's contents.
    """

    def __init__(
        self,
        directory: Path,
        *,
        state: QueueState | None = None,
        segment_bytes: int = 64 << 20,
        fsync: bool = True,
        buffer_bytes: int = 1 << 20,
    ) -> None:
        if segment_bytes <= HEADER_SIZE:
            raise ValueError(f"segment_bytes must exceed the {HEADER_SIZE}-byte header")
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self.buffer_bytes = buffer_bytes
        self._w = _SegmentWriter(self.directory, segment_bytes, buffer_bytes, fsync)
        self._rfile: BinaryIO | None = None
        self._rbuf = b""
        self._rpos = 0  # index in _rbuf of the frame at _roff, the next one to read from
        self._rin = 0  # records of the block frame at _roff already read
        # The block at _roff once checked: its offset, its records' offsets in it (a list,
        # and an array) and where its keys start, with their width.
        self._block: tuple[int, list[int], np.ndarray, int, int] | None = None
        self._rversion = FORMAT_VERSION  # the read segment's format, once it is open
        self._rsize: int | None = None  # size of the read segment once it is complete
        self._closed = False
        if state is None:
            if self.directory.exists():
                shutil.rmtree(self.directory)
            self.directory.mkdir(parents=True)
            self._rs, self._roff = 0, HEADER_SIZE
            self.bytes_read = 0
            self._floor = 0
            self._last_commit_rs: int | None = None
            self._w.start()
        else:
            self._reopen(state)

    # -- writing -----------------------------------------------------------------------

    def append(self, record: bytes) -> None:
        """Queue one record (it is readable at once, durable at the next commit)."""
        self.extend((record,))

    def extend(self, records: Iterable[bytes], keys: np.ndarray | None = None) -> None:
        """Queue records in order, as block frames, each with its key if ``keys`` is
        given: an array of one row a record, of 1 to MAX_KEY_BYTES bytes each (its bytes
        are stored as they are; :meth:`read_packed` gives them back).

        The records that fit in the write segment (and in about ``buffer_bytes``) make
        one block; a new segment starts where the next record does not fit, and a
        record larger than a whole segment gets one of its own."""
        self._usable()
        records = records if isinstance(records, list) else list(records)
        lengths = np.fromiter(map(len, records), np.int64, len(records))

        def data(i: int, j: int) -> bytes:
            return b"".join(records if i == 0 and j == len(records) else records[i:j])

        self._w.append_blocks(lengths, data, keys)

    def extend_packed(self, packed: PackedRecords) -> None:
        """Queue the records of ``packed`` in order, with their keys if it has them (as
        :meth:`extend` would)."""
        self._usable()
        offsets, data = packed.offsets.tolist(), memoryview(packed.data)
        self._w.append_blocks(
            packed.lengths(), lambda i, j: data[offsets[i] : offsets[j]], packed.keys
        )

    @property
    def bytes_written(self) -> int:
        """Bytes appended to the segments (headers included)."""
        return self._w.bytes_written

    # -- reading -----------------------------------------------------------------------

    def __len__(self) -> int:
        """Records appended and not yet read."""
        return self._w.queued

    def read(self, n: int) -> list[bytes]:
        """Up to ``n`` records in FIFO order (including records still in the write buffer).

        Raises :class:`DiskQueueCorruptError` naming the segment and the offset of a
        frame that fails its checksum or runs past its segment.
        """
        self._usable()
        out: list[bytes] = []
        digest = xxhash.xxh32_intdigest
        while len(out) < n and self._w.queued:
            length, check = self._frame_head()
            if length & BLOCK:
                self._read_block(out, n)
                continue
            if self._roff + FRAME_SIZE + length > self._read_end():
                raise DiskQueueCorruptError(
                    self._read_path(),
                    self._roff,
                    f"record of {length} bytes runs past the segment end",
                )
            self._ensure(FRAME_SIZE + length)
            start = self._rpos + FRAME_SIZE
            record = self._rbuf[start : start + length]
            if digest(record, length) != check:
                raise DiskQueueCorruptError(
                    self._read_path(), self._roff, "record checksum mismatch"
                )
            self._rpos = start + length
            self._roff += FRAME_SIZE + length
            self._w.queued -= 1
            self.bytes_read += FRAME_SIZE + length
            out.append(record)
            self._read_buffered(out, n)
        if self._rpos == len(self._rbuf):
            self._rbuf, self._rpos = b"", 0
        return out

    def read_packed(self, n: int) -> PackedRecords:
        """Up to ``n`` records in FIFO order as :meth:`read` gives them, with their keys
        (None if they have none), packed. They come from consecutive blocks whose keys
        have one width (or that have none), so there may be fewer than ``n`` (none only
        when the queue is empty)."""
        self._usable()
        parts: list[PackedRecords] = []
        parts_width = 0  # the key width of the blocks taken
        while self._w.queued and n > 0:
            if not self._frame_head()[0] & BLOCK:
                if parts:
                    break
                return PackedRecords.of(self.read(1))  # a record frame (version 1)
            _, offsets, array, keys_at, width = self._checked_block()
            if parts and width != parts_width:
                break
            parts_width = width
            base, first = self._rpos, self._rin
            last = self._take_from_block(offsets, n)
            data = memoryview(self._rbuf)[base + offsets[first] : base + offsets[last]]
            keys = None
            if width:
                at = base + keys_at + first * width
                keys = np.frombuffer(self._rbuf, np.uint8, (last - first) * width, at).reshape(
                    last - first, width
                )
            parts.append(PackedRecords(array[first : last + 1] - offsets[first], data, keys))
            n -= last - first
        return PackedRecords.joined(parts)

    def _frame_head(self) -> tuple[int, int]:
        """The first two words of the frame at the read position (there must be a record
        to read), once past segments read to their end."""
        while self._rs < self._w.seg and self._roff >= self._read_end():
            self._next_segment()
        if self._rfile is None:
            self._open_read()
        self._ensure(FRAME_SIZE)
        return _FRAME.unpack_from(self._rbuf, self._rpos)

    def _read_block(self, out: list[bytes], n: int) -> None:
        """Append to ``out`` (up to ``n`` records in all) the next records of the block
        frame at the read position, checking it whole first."""
        offsets = self._checked_block()[1]
        first, base, rbuf = self._rin, self._rpos, self._rbuf
        last = self._take_from_block(offsets, n - len(out))
        bounds = offsets[first : last + 1]
        out += [rbuf[base + a : base + b] for a, b in pairwise(bounds)]

    def _take_from_block(self, offsets: list[int], n: int) -> int:
        """Count up to ``n`` more records of the checked block at the read position as
        read (moving past it once it has been read to its end); return the index of
        the one after the last taken."""
        first = self._rin
        last = min(len(offsets) - 1, first + n, first + self._w.queued)
        taken = last - first
        self._w.queued -= taken
        assert self._block is not None
        width = self._block[4]
        self.bytes_read += offsets[last] - offsets[first] + (4 + width) * taken
        if last < len(offsets) - 1:
            self._rin = last
            return last
        self.bytes_read += BLOCK_HEAD_SIZE
        self._rpos += offsets[-1]
        self._roff += offsets[-1]
        self._rin, self._block = 0, None
        return last

    def _checked_block(self) -> tuple[int, list[int], np.ndarray, int, int]:
        """The block frame at the read position, read into the buffer and checked whole:
        its offset, the offsets (from the frame's start) of its records and of its end,
        as a list and as an array, the offset of its keys and their width."""
        if self._block is not None and self._block[0] == self._roff:
            return self._block
        self._ensure(BLOCK_HEAD_SIZE)
        head, size, check = _BLOCK_HEAD.unpack_from(self._rbuf, self._rpos)
        count, width = head & MAX_RECORD, 0
        if self._rversion >= 3:
            count, width = head & MAX_BLOCK_RECORDS, head >> _WIDTH_SHIFT & MAX_KEY_BYTES
        total = BLOCK_HEAD_SIZE + (4 + width) * count + size
        if not count or self._roff + total > self._read_end():
            raise DiskQueueCorruptError(
                self._read_path(),
                self._roff,
                f"block of {total} bytes runs past the segment end"
                if count
                else "block of no records",
            )
        self._ensure(total)
        frame = memoryview(self._rbuf)[self._rpos : self._rpos + total]
        if xxhash.xxh3_64_intdigest(frame[BLOCK_HEAD_SIZE:], head << 32 | size) != check:
            raise DiskQueueCorruptError(self._read_path(), self._roff, "block checksum mismatch")
        lengths = np.frombuffer(frame, "<u4", count, BLOCK_HEAD_SIZE)
        keys_at = BLOCK_HEAD_SIZE + 4 * count
        data_start = keys_at + width * count
        offsets = np.empty(count + 1, np.int64)
        offsets[0] = data_start
        np.cumsum(lengths, out=offsets[1:])
        offsets[1:] += data_start
        if offsets[-1] != total:
            raise DiskQueueCorruptError(
                self._read_path(), self._roff, "block lengths do not add up to its size"
            )
        self._block = (self._roff, offsets.tolist(), offsets, keys_at, width)
        return self._block

    def _read_buffered(self, out: list[bytes], n: int) -> None:
        """Append to ``out`` (up to ``n`` records in all) the records that lie whole in
        the read buffer and in the read segment, checked as :meth:`read` checks them; the
        first one that does not is left to :meth:`read`'s own steps, which fetch more,
        move on to the next segment, or report the damage. One tight loop for what
        those steps would do record by record (BEAST reads thousands at a time)."""
        rbuf, pos = self._rbuf, self._rpos
        first = pos
        # The buffer's end, or the segment's if that comes first.
        stop = min(len(rbuf), pos + self._read_end() - self._roff)
        left = min(n - len(out), self._w.queued)
        unpack, digest = _FRAME.unpack_from, xxhash.xxh32_intdigest
        taken = 0
        while taken < left and pos + FRAME_SIZE <= stop:
            length, check = unpack(rbuf, pos)
            if length & BLOCK:
                break  # read() takes the block
            start = pos + FRAME_SIZE
            end = start + length
            if end > stop:
                break
            record = rbuf[start:end]
            if digest(record, length) != check:
                break  # read() raises, naming the record's offset
            out.append(record)
            pos = end
            taken += 1
        self._rpos = pos
        self._roff += pos - first
        self._w.queued -= taken
        self.bytes_read += pos - first

    def _read_path(self) -> Path:
        return self.directory / _seg_name(self._rs)

    def _read_end(self) -> int:
        if self._rs == self._w.seg:
            return self._w.length
        if self._rsize is None:
            self._rsize = (
                os.fstat(self._rfile.fileno()).st_size
                if self._rfile is not None
                else self._read_path().stat().st_size
            )
        return self._rsize

    def _open_read(self) -> None:
        path = self._read_path()
        try:
            # Held open (no with-block) until the segment is read to its end.
            self._rfile = open(path, "rb", buffering=0)
        except FileNotFoundError:
            raise DiskQueueCorruptError(path, None, "segment file missing") from None
        self._rversion = _check_header(
            path, os.pread(self._rfile.fileno(), HEADER_SIZE, 0), self._rs
        )

    def _next_segment(self) -> None:
        if self._rfile is not None:
            self._rfile.close()
            self._rfile = None
        self._rs += 1
        self._roff = HEADER_SIZE
        self._rsize = None
        self._rbuf, self._rpos = b"", 0
        self._rin, self._block = 0, None

    def _ensure(self, k: int) -> None:
        """Make ``k`` bytes from the read position available in the read buffer."""
        have = len(self._rbuf) - self._rpos
        if have >= k:
            return
        start = self._roff + have
        more = self._fetch(start, max(k - have, self.buffer_bytes))
        if have + len(more) < k:
            raise DiskQueueCorruptError(
                self._read_path(), self._roff, f"segment ends {k - have - len(more)} bytes early"
            )
        self._rbuf = self._rbuf[self._rpos :] + more
        self._rpos = 0

    def _fetch(self, offset: int, want: int) -> bytes:
        """Up to ``want`` bytes of the read segment at ``offset``, from its file or,
        past what has been flushed, from the write buffer."""
        assert self._rfile is not None
        end = min(offset + want, self._read_end())
        on_disk = self._w.flushed() if self._rs == self._w.seg else end
        parts = []
        if offset < on_disk:
            parts.append(os.pread(self._rfile.fileno(), min(end, on_disk) - offset, offset))
        if end > on_disk:
            lo = max(offset, on_disk) - on_disk
            parts.append(bytes(self._w.buf[lo : end - on_disk]))
        return b"".join(parts)

    # -- commits -----------------------------------------------------------------------

    def commit(self) -> QueueState:
        """Make everything appended so far durable; return the state to reopen with."""
        self._usable()
        self._w.sync()
        keep = self._rs if self._last_commit_rs is None else self._last_commit_rs
        state: QueueState = {
            "format": FORMAT_VERSION,
            "write": [self._w.seg, self._w.length],
            "read": [self._rs, self._roff],
            "read_in_block": self._rin,
            "count": self._w.queued,
            "keep": keep,
            "bytes_written": self.bytes_written,
            "bytes_read": self.bytes_read,
        }
        for seg in range(self._floor, keep):
            (self.directory / _seg_name(seg)).unlink(missing_ok=True)
        self._floor = keep
        self._last_commit_rs = self._rs
        return state

    def _reopen(self, state: QueueState) -> None:
        if state.get("format") not in _READABLE_VERSIONS:
            raise ValueError(
                f"disk queue state format {state.get('format')!r}, "
                f"expected one of {_READABLE_VERSIONS}"
            )
        self._w.seg, self._w.length = state["write"]
        self._rs, self._roff = state["read"]
        self._rin = state.get("read_in_block", 0)  # version 1: no blocks
        self._w.queued = state["count"]
        self._w.bytes_written = state["bytes_written"]
        self.bytes_read = state["bytes_read"]
        self._floor = state["keep"]
        self._last_commit_rs = self._rs
        if not self.directory.is_dir():
            raise DiskQueueCorruptError(self.directory, None, "queue directory missing")
        for path in self.directory.iterdir():
            stem = path.name.removesuffix(".seg")
            if (
                path.suffix == ".seg"
                and stem.isdigit()
                and not self._floor <= int(stem) <= self._w.seg
            ):
                path.unlink()
        for seg in range(self._rs, self._w.seg + 1):  # the write segment's version last
            path = self.directory / _seg_name(seg)
            try:
                with open(path, "rb") as f:
                    version = _check_header(path, f.read(HEADER_SIZE), seg)
            except FileNotFoundError:
                raise DiskQueueCorruptError(path, None, "segment file missing") from None
        self._w.reopen(version)

    def close(self) -> None:
        """Write the buffer (without fsync) and close the files. Idempotent."""
        if self._closed:
            return
        self._w.flush()
        for f in (self._w.file, self._rfile):
            if f is not None:
                f.close()
        self._w.file = self._rfile = None
        self._closed = True

    def _usable(self) -> None:
        if self._closed:
            raise ValueError(f"disk queue {self.directory} is closed")

    def __repr__(self) -> str:
        return (
            f"<DiskQueue {self.directory} "
            f"[{self._w.queued} queued | segments {self._rs}..{self._w.seg}]>"
        )


if TYPE_CHECKING:

    def _durable(queue: DiskQueue) -> durable.Durable[QueueState]:
        return queue  # DiskQueue keeps the store contract: commit() -> its state
