"""The content index: the payloads and page fingerprints a crawl has archived, on disk.

Fetchers decide, as they write each record, whether its payload is a copy of one already
archived (then the record is a WARC ``revisit``) and whether its page's text is a near
copy of an earlier page's (marked in the crawl log). They are separate processes and
otherwise stateless, so the index they share is on disk: one LMDB environment per state
directory (per crawl in a cluster fetcher's state directory), which the fetcher
processes of that directory open together. LMDB serializes write transactions across
processes, so a batch's inserts are one transaction, and an insert never replaces what
another process recorded first.

In a cluster each fetcher machine's state directory has its own index: a payload first
archived on another machine is archived in full here too, so that a revisit record
always refers to a record in the same machine's WARC files (they stay self-contained).
The managers partition URLs by PLD but fetchers take any partition's tasks, so with M
fetcher machines about (M - 1) / M of the copies across machines are written in full;
copies on one machine (mirrored paths, session URLs of one site) are all caught.

Memory: the index is a file mapped into each process; the pages it touches
are the kernel's page cache (shared by the processes, dropped under memory pressure),
and the process's own memory does not grow with it. ``max_bytes`` caps the file (LMDB's
map size); when it is full the index stops growing (``full`` in :meth:`stats`) and goes
on answering: later copies are archived in full.

Durability is not needed: commits are not fsynced, and an index that does not open
(after a power loss) is removed and begun again. A lost index only means that copies
archived after it are written in full. A payload is added only once its record has been
handed to the OS, so a killed process never leaves an entry naming a record it did not
write; after a power loss an entry may outlive its record's lost tail (the WARC files
are fsynced at checkpoints, the index is not).

Format (``FORMAT_VERSION``), LMDB named databases:

``meta``      ``b"version"`` -> the format version, ASCII; ``b"near_tables"`` ->
              ``b"<blocks> <distance>"`` of the tables in ``near``.
``payload``   the first 16 characters (80 bits) of a payload's base32 SHA-1 ->
              ``b"<WARC-Date> <WARC-Target-URI>"`` of the record that holds it.
``near``      table number (1 byte) + a fingerprint under that table's mask (8 bytes,
              big-endian) -> the fingerprints under that key, uint64 little-endian,
              back to back (at most ``NEAR_BUCKET_MAX`` of them).
``near_url``  a fingerprint (8 bytes, big-endian) -> the URL of the first page with it.

Near-duplicate look-up (Manku, Jain and Das Sarma, WWW 2007): the 64 bits are split
into ``blocks`` blocks; two fingerprints within Hamming distance ``k`` < ``blocks``
agree on all bits of at least ``blocks - k`` blocks, so each choice of ``blocks - k``
blocks is one table keyed by those bits (:func:`table_masks`), and a query reads one
key of each table. With the default 4 blocks and k = 3 there are 4 tables keyed by 16
bits: a key holds about one in 65,536 fingerprints. Only fingerprints that had no near
copy are inserted: a cluster of near copies is stored once, as its first page.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import lmdb
import numpy as np

log = logging.getLogger("drumbeat.store.dedup")

FORMAT_VERSION = b"1"
PAYLOAD_KEY_CHARS = 16  # base32 characters of the SHA-1: 80 bits
NEAR_BUCKET_MAX = 8192  # fingerprints under one key: bounds a look-up's work (64 KiB)
_DATABASES = 4
_MAX_READERS = 1024  # processes reading at once (one slot each): fetchers, 256 at most


@dataclass(frozen=True, slots=True)
class ContentIndexStats:
    payloads_checked: int
    payload_copies: int  # payloads found already archived (by find_payloads)
    pages_checked: int
    near_copies: int  # pages found within the distance of an earlier one
    full: bool  # the index reached max_bytes and stopped growing
    file_bytes: int


@cache
def table_masks(blocks: int, k: int) -> tuple[int, ...]:
    """The bit masks of the tables for distance ``k`` with the 64 bits split into
    ``blocks`` near-equal blocks: one mask per choice of ``blocks - k`` blocks (4 blocks,
    k = 3: 4 tables keyed by 16 bits; 5 blocks: 10 tables by 25-26 bits; 6 blocks: 20
    tables by 32 bits). Two fingerprints within distance ``k`` are equal under at least
    one of the masks."""
    if not 0 <= k < blocks <= 64:
        raise ValueError("need 0 <= k < blocks <= 64")
    edges = [64 * i // blocks for i in range(blocks + 1)]
    block_masks = [((1 << (hi - lo)) - 1) << lo for lo, hi in itertools.pairwise(edges)]
    return tuple(sum(chosen) for chosen in itertools.combinations(block_masks, blocks - k))


def within(fingerprint: int, candidates: bytes, k: int) -> list[int]:
    """The fingerprints of ``candidates`` (uint64 little-endian, back to back) within
    Hamming distance ``k`` of ``fingerprint``, in their order."""
    count = len(candidates) // 8
    if count <= _SMALL_BUCKET:  # numpy's calls cost more than a few ints' bit counts
        return [
            c for c in struct.unpack(f"<{count}Q", candidates) if (c ^ fingerprint).bit_count() <= k
        ]
    array = np.frombuffer(candidates, dtype="<u8")
    xor = array ^ np.uint64(fingerprint)
    if _bitwise_count is not None:
        counts = _bitwise_count(xor)
    else:  # numpy < 2.0
        counts = np.unpackbits(xor.view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1)
    close: list[int] = array[counts <= k].tolist()
    return close


_SMALL_BUCKET = 48
_bitwise_count = getattr(np, "bitwise_count", None)


def _payload_key(digest: str) -> bytes:
    return digest.removeprefix("sha1:")[:PAYLOAD_KEY_CHARS].encode()


class ContentIndex:
    """Payload digests and page fingerprints of one crawl, shared by processes through
    the LMDB environment at ``path`` (a directory, made if missing).

    ``max_bytes``: the cap of the index file. ``blocks``/``distance``: the
    near-duplicate tables (:func:`table_masks`); every process of one index must use
    the same. Use from one thread.
    """

    def __init__(self, path: Path, *, max_bytes: int, blocks: int = 4, distance: int = 3) -> None:
        self.path = Path(path)
        self._masks = table_masks(blocks, distance)
        if len(self._masks) > 255:
            raise ValueError("more than 255 near-duplicate tables")
        self._k = distance
        self._max_bytes = max_bytes
        self._env = self._open()
        self._payload = self._env.open_db(b"payload")
        self._near = self._env.open_db(b"near")
        self._near_url = self._env.open_db(b"near_url")
        self._check_tables(f"{blocks} {distance}".encode())
        self._full = False
        self._counts = [0, 0, 0, 0]  # payloads checked, copies, pages checked, near copies

    def _open(self) -> lmdb.Environment:
        """The environment, begun again when what is there does not open or is of
        another format version."""
        for attempt in range(2):
            try:
                env = self._open_env()
                env.reader_check()  # free the read slots of processes killed mid-read
                with env.begin(write=True) as txn:
                    meta = env.open_db(b"meta", txn=txn)
                    version = txn.get(b"version", db=meta)
                    if version is None:
                        txn.put(b"version", FORMAT_VERSION, db=meta)
                    elif version != FORMAT_VERSION:
                        raise lmdb.Error(f"format version {version!r}")
                return env
            except lmdb.Error as e:
                if attempt:
                    raise
                log.warning("content index %s unusable (%s): beginning it again", self.path, e)
                shutil.rmtree(self.path, ignore_errors=True)
        raise AssertionError("unreachable")

    def _check_tables(self, layout: bytes) -> None:
        """Empty the near-duplicate tables when they were built with another number of
        blocks or distance (a resumed crawl with other settings): their keys would not
        be this index's."""
        with self._env.begin(write=True) as txn:
            meta = self._env.open_db(b"meta", txn=txn)
            if txn.get(b"near_tables", db=meta) != layout:
                txn.drop(self._near, delete=False)
                txn.drop(self._near_url, delete=False)
                txn.put(b"near_tables", layout, db=meta)

    def _open_env(self) -> lmdb.Environment:
        self.path.mkdir(parents=True, exist_ok=True)
        # sync/metasync off: a commit is not fsynced (see the module doc); readahead
        # off: look-ups are random, and readahead would fill the page cache with
        # neighbours never read; writemap: a commit writes into the mapping instead of
        # write() calls, half the CPU of an insert (docs/benchmarks.md). Every process
        # of an index must open it so. The file is then max_bytes long but sparse:
        # ``du``, not ``ls -l``, shows what it holds.
        return lmdb.open(
            str(self.path),
            map_size=self._max_bytes,
            max_dbs=_DATABASES,
            sync=False,
            metasync=False,
            readahead=False,
            writemap=True,
            lock=True,
            max_readers=_MAX_READERS,
        )

    def find_payloads(self, digests: Sequence[str]) -> list[tuple[str, str] | None]:
        """For each payload digest (``sha1:`` base32), in order: the ``(uri, date)`` of
        the record that holds that payload (its WARC-Target-URI and WARC-Date), or None
        when none is known."""
        self._counts[0] += len(digests)
        result: list[tuple[str, str] | None] = []
        with self._env.begin(db=self._payload) as txn:
            for digest in digests:
                value = txn.get(_payload_key(digest))
                if value is None:
                    result.append(None)
                    continue
                date, _, uri = bytes(value).decode().partition(" ")
                result.append((uri, date))
                self._counts[1] += 1
        return result

    def add_payloads(self, entries: Sequence[tuple[str, str, str]]) -> list[bool]:
        """Record each ``(payload digest, uri, date)`` as the record holding that
        payload, unless one is known already; say which were recorded.

        Call it once the records are written (handed to the OS): the index must never
        name a record that a killed process had not written. Two processes that
        archive one payload at once then both write it in full, which is harmless."""
        if self._full:
            return [False] * len(entries)
        try:
            with self._env.begin(write=True, db=self._payload) as txn:
                return [
                    bool(txn.put(_payload_key(digest), f"{date} {uri}".encode(), overwrite=False))
                    for digest, uri, date in entries
                ]
        except lmdb.MapFullError:
            self._fill()
            return [False] * len(entries)

    def near(self, entries: Sequence[tuple[int, str]]) -> list[str | None]:
        """For each ``(fingerprint, url)`` of a page, in order: the URL of an earlier
        page whose fingerprint is within the distance, else None (and the fingerprint
        is recorded as ``url``'s)."""
        self._counts[2] += len(entries)
        result: list[str | None] = []
        try:
            with self._env.begin(write=not self._full) as txn:
                for fingerprint, url in entries:
                    result.append(self._near_one(txn, fingerprint, url))
        except lmdb.MapFullError:
            self._fill()
            self._counts[2] -= len(entries)
            return self.near(entries)
        self._counts[3] += sum(r is not None for r in result)
        return result

    def _near_one(self, txn: lmdb.Transaction, fingerprint: int, url: str) -> str | None:
        keys = [
            bytes((t,)) + (fingerprint & mask).to_bytes(8, "big")
            for t, mask in enumerate(self._masks)
        ]
        buckets = [bytes(txn.get(key, b"", db=self._near)) for key in keys]
        close = within(fingerprint, b"".join(buckets), self._k)
        if close:
            earlier = bytes(txn.get(close[0].to_bytes(8, "big"), b"", db=self._near_url))
            if earlier.decode() != url:  # not the same page fetched again
                return earlier.decode()
            return None
        if self._full:
            return None
        own = fingerprint.to_bytes(8, "little")
        for key, bucket in zip(keys, buckets):
            if len(bucket) < 8 * NEAR_BUCKET_MAX:
                txn.put(key, bucket + own, db=self._near)
        txn.put(fingerprint.to_bytes(8, "big"), url.encode(), db=self._near_url)
        return None

    def _fill(self) -> None:
        if not self._full:
            log.warning("content index %s is full: it stops growing", self.path)
        self._full = True

    def stats(self) -> ContentIndexStats:
        info = self._env.info()
        pages = info["last_pgno"] + 1
        return ContentIndexStats(
            payloads_checked=self._counts[0],
            payload_copies=self._counts[1],
            pages_checked=self._counts[2],
            near_copies=self._counts[3],
            full=self._full,
            file_bytes=pages * self._env.stat()["psize"],
        )

    def close(self) -> None:
        self._env.close()

    def __enter__(self) -> ContentIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
