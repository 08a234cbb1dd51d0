"""DRUM on-disk format: file headers and checksummed blocks.

Every DRUM data file is ``header block* [footer]``; all integers little-endian.

header (20 bytes)::

    magic    4s   b"DRUM"
    version  u16  FORMAT_VERSION (6: arrival-log blocks may be deflate-compressed;
                  5: a c file is one of several runs, newest wins)
    kind     u8   b"q" pending records, b"a" arrival log (with aux),
                  b"c" sorted run, b"r" merge results
    pad      u8   0
    bucket   u32  bucket number of a ``q`` file (0 for the other kinds)
    itemsize u32  bytes per fixed-size record (0 for the arrival log)
    crc      u32  zlib.crc32 of the 16 bytes above

block::

    count    u32  records in the block
    length   u32  payload bytes
    crc      u32  low 32 bits of the payload's XXH3-64 (xxhash: several times
                  faster than zlib.crc32, which was a large share of a merge round)
    payload  length bytes

Payloads per kind:

- ``q``: ``count`` records in arrival order, as columns: ``count`` u64 keys,
  ``count`` u8 ops, ``count`` values (before format 6: packed records).
- ``a``: one entry per tuple, in global arrival order: ``count`` u64 keys, then
  ``rawlen`` u64 and ``codec`` u8, then the *rest* -- as columns ``count`` u32 aux
  lengths, ``count`` u8 ops, ``count`` values, then the aux bytes concatenated --
  stored as is (codec 0, ``rawlen`` bytes) or as a raw deflate stream of those
  ``rawlen`` bytes (codec 1, :data:`LOG_LEVEL`; ISA-L's deflate via ``isal``,
  zlib when it is missing: both read either). The keys are random and stay
  raw; URL text, lengths and ops compress several-fold, and the arrival log was
  most of the bytes a merge round writes with URL aux. A block is compressed only
  when that makes it smaller. The checksum covers the stored bytes, so a damaged
  block fails it before inflating.
- ``c``: a sorted run (a base or a delta, see ``repository``): one *section*
  per bucket it holds records of, in bucket order, each a sequence of blocks of
  ``count`` u64 keys (strictly increasing across the section), then ``count``
  values, and a footer. Offsets, lengths and record counts of the sections are
  in the repository state.
- ``r``: ``count`` packed ``(unique bool, value)``; the file holds either one
  run of blocks in arrival order (a round merged from RAM) or one run per
  bucket (in bucket order, lengths in the repository state), each in its
  bucket's arrival order.

A ``c`` section ends with a footer block whose count is ``0xFFFFFFFF`` and
whose 8-byte payload is the section's record count, so a cut-off cache is
detected even when it ends on a block boundary. Append-only files (q, a) have no footer:
their valid length is recorded in the repository state (see ``repository``).

Any mismatch (bad magic, unknown version, short read, checksum) raises
:class:`DrumCorruptError` naming the file and offset.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import numpy as np
import xxhash

_deflate: ModuleType
try:
    from isal import isal_zlib as _deflate  # ISA-L deflate, faster than zlib
except ImportError:  # pragma: no cover - isal is a dependency; zlib writes the same streams
    _deflate = zlib

MAGIC = b"DRUM"
FORMAT_VERSION = 6
_HEADER = struct.Struct("<4sHBxII")
HEADER_SIZE = _HEADER.size + 4
_BLOCK = struct.Struct("<III")
BLOCK_HEADER_SIZE = _BLOCK.size
FOOTER_COUNT = 0xFFFFFFFF
RAW, DEFLATE = 0, 1  # arrival-log block codecs
LOG_LEVEL = 1  # deflate level of the arrival log: 0..3 for isal (1: fast, URLs deflate well)
_ARRIVAL_REST = struct.Struct("<QB")  # after an arrival block's keys: rawlen, codec


class DrumError(Exception):
    """Base class of DRUM errors."""


class DrumCorruptError(DrumError):
    """A DRUM file is truncated, has a bad checksum or is not a DRUM file."""

    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(f"corrupt DRUM file {path}: {problem}")
        self.path = Path(path)


@dataclass(frozen=True, slots=True)
class Header:
    kind: bytes
    bucket: int
    itemsize: int


def encode_header(kind: bytes, bucket: int, itemsize: int) -> bytes:
    body = _HEADER.pack(MAGIC, FORMAT_VERSION, kind[0], bucket, itemsize)
    return body + struct.pack("<I", zlib.crc32(body))


def decode_header(path: Path, raw: bytes, kind: bytes) -> Header:
    if len(raw) < HEADER_SIZE:
        raise DrumCorruptError(path, "file shorter than its header")
    body = raw[: _HEADER.size]
    magic, version, k, bucket, itemsize = _HEADER.unpack(body)
    if magic != MAGIC:
        raise DrumCorruptError(path, "bad magic, not a DRUM file")
    if version != FORMAT_VERSION:
        raise DrumCorruptError(path, f"format version {version}, expected {FORMAT_VERSION}")
    (crc,) = struct.unpack_from("<I", raw, _HEADER.size)
    if crc != zlib.crc32(body):
        raise DrumCorruptError(path, "header checksum mismatch")
    if bytes([k]) != kind:
        raise DrumCorruptError(path, f"file kind {bytes([k])!r}, expected {kind!r}")
    return Header(kind, bucket, itemsize)


def _checksum(data: bytes | memoryview) -> int:
    return xxhash.xxh3_64_intdigest(data) & 0xFFFFFFFF


def encode_block(count: int, payload: bytes | memoryview) -> bytes:
    return _BLOCK.pack(count, len(payload), _checksum(payload)) + bytes(payload)


def block_parts(count: int, parts: Iterable[Any]) -> list[memoryview | bytes]:
    """The block ``encode_block(count, b"".join(parts))`` as a list of buffers, without copying.

    ``parts`` are bytes-like objects or C-contiguous numpy arrays (taken as raw
    bytes). Write the result with :func:`write_parts`; the parts must not change
    before that.
    """
    views = [_raw(p) for p in parts]
    h = xxhash.xxh3_64()
    for v in views:
        h.update(v)
    length = sum(len(v) for v in views)
    return [_BLOCK.pack(count, length, h.intdigest() & 0xFFFFFFFF), *views]


def write_parts(f: IO[bytes], buffers: Iterable[Any]) -> int:
    """Write ``buffers`` to the binary file ``f`` in order; return the bytes written.

    Goes straight to the file (no joined copy of the data): large blocks stay views.
    """
    n = 0
    for b in buffers:
        if len(b):
            n += f.write(b)
    return n


def _raw(part: Any) -> memoryview:
    if isinstance(part, np.ndarray):
        if not part.nbytes:
            return memoryview(b"")
        return memoryview(np.ascontiguousarray(part).reshape(-1).view(np.uint8))  # type: ignore[arg-type]
    return memoryview(part).cast("B")


def arrival_parts(
    keys: np.ndarray, rest: list[Any], compress: bool, scratch: bytearray | None = None
) -> list[Any]:
    """The payload of an ``a`` block as parts for :func:`block_parts`: the u64
    ``keys``, then ``rest`` (the other columns and the aux bytes), deflated when
    ``compress`` and that makes it smaller.

    ``scratch``: a buffer reused to join ``rest`` before deflating when it is large
    enough (a fresh join of a few MiB costs new zeroed pages each time, see sizing).
    """
    views = [_raw(p) for p in rest]
    raw_len = sum(len(v) for v in views)
    if compress and raw_len:
        if scratch is not None and len(scratch) >= raw_len:
            whole = memoryview(scratch)
            at = 0
            for v in views:
                whole[at : at + len(v)] = v
                at += len(v)
            joined: bytes | memoryview = whole[:raw_len]
        else:
            joined = b"".join(views)
        packed = _deflate.compress(joined, LOG_LEVEL, -15)
        if len(packed) < raw_len:
            return [keys, _ARRIVAL_REST.pack(raw_len, DEFLATE), packed]
    return [keys, _ARRIVAL_REST.pack(raw_len, RAW), *views]


def arrival_rest(path: Path, offset: int, count: int, payload: bytes) -> tuple[bytes, int]:
    """``(buffer, start)``: the rest of the ``a`` block at ``offset`` (see the module)
    is ``buffer[start:]``; inflated if it was stored compressed, else ``payload`` itself."""
    start = 8 * count + _ARRIVAL_REST.size
    if len(payload) < start:
        raise DrumCorruptError(path, f"arrival block at offset {offset} is too short")
    raw_len, codec = _ARRIVAL_REST.unpack_from(payload, 8 * count)
    if codec == RAW:
        if len(payload) - start != raw_len:
            raise DrumCorruptError(path, f"arrival block at offset {offset}: length mismatch")
        return payload, start
    if codec != DEFLATE:
        raise DrumCorruptError(path, f"arrival block at offset {offset}: unknown codec {codec}")
    try:
        rest = _deflate.decompress(memoryview(payload)[start:], -15, raw_len)
    except (_deflate.error, zlib.error, ValueError) as exc:
        raise DrumCorruptError(
            path, f"arrival block at offset {offset}: compressed data unreadable ({exc})"
        ) from None
    if len(rest) != raw_len:
        raise DrumCorruptError(
            path,
            f"arrival block at offset {offset}: inflated to {len(rest)} bytes, {raw_len} recorded",
        )
    return rest, 0


def encode_footer(total: int) -> bytes:
    return encode_block(FOOTER_COUNT, struct.pack("<Q", total))


def read_block(path: Path, f: IO[bytes], offset: int, end: int) -> tuple[int, bytes, int]:
    """Read the block at ``offset`` (``f`` positioned there); return (count, payload, next).

    ``end`` is where valid data stops; a block reaching past it is a truncation.
    """
    raw = f.read(BLOCK_HEADER_SIZE)
    if len(raw) < BLOCK_HEADER_SIZE or offset + BLOCK_HEADER_SIZE > end:
        raise DrumCorruptError(path, f"truncated block header at offset {offset}")
    count, length, crc = _BLOCK.unpack(raw)
    nxt = offset + BLOCK_HEADER_SIZE + length
    if nxt > end:
        raise DrumCorruptError(path, f"block at offset {offset} runs past the end of the file")
    payload = f.read(length)
    if len(payload) < length:
        raise DrumCorruptError(path, f"truncated block at offset {offset}")
    if _checksum(payload) != crc:
        raise DrumCorruptError(path, f"checksum mismatch in block at offset {offset}")
    return count, payload, nxt


def iter_blocks(
    path: Path,
    kind: bytes,
    *,
    start: int = HEADER_SIZE,
    end: int | None = None,
    footer: bool = False,
) -> Iterator[tuple[int, bytes]]:
    """Yield ``(count, payload)`` for each block of ``path`` from ``start`` up to ``end``.

    With ``footer`` the file must end with a cache footer whose total matches the
    records seen; the footer itself is not yielded.
    """
    for _, count, payload in iter_blocks_at(path, kind, start=start, end=end, footer=footer):
        yield count, payload


def iter_blocks_at(
    path: Path,
    kind: bytes,
    *,
    start: int = HEADER_SIZE,
    end: int | None = None,
    footer: bool = False,
) -> Iterator[tuple[int, int, bytes]]:
    """:func:`iter_blocks` yielding ``(offset, count, payload)``: where each block starts."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise DrumCorruptError(path, "file is missing") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        end = size if end is None else end
        if end > size:
            raise DrumCorruptError(path, f"file has {size} bytes, {end} expected")
        decode_header(path, f.read(HEADER_SIZE), kind)
        f.seek(start)
        offset, seen = start, 0
        while offset < end:
            at = offset
            count, payload, offset = read_block(path, f, offset, end)
            if count == FOOTER_COUNT:
                if not footer or offset != end:
                    raise DrumCorruptError(path, "footer in the middle of the file")
                (total,) = struct.unpack("<Q", payload)
                if total != seen:
                    raise DrumCorruptError(path, f"footer says {total} records, read {seen}")
                return
            seen += count
            yield at, count, payload
        if footer:
            raise DrumCorruptError(path, "missing footer (file cut off)")


def check_header(path: Path, kind: bytes) -> Header:
    """Validate the header of ``path`` (which must exist)."""
    try:
        with open(path, "rb") as f:
            return decode_header(path, f.read(HEADER_SIZE), kind)
    except FileNotFoundError:
        raise DrumCorruptError(path, "file is missing") from None
