"""Which manager of a cluster owns a URL: its pay-level domain's hash modulo the number of
partitions (Polybot's partitioning by site).

Every host of a PLD falls in one partition, so one manager holds a host's politeness
clock, its robots.txt and its PLD's budget. Fetchers split what a page found by owner
before they report it (:func:`split_found`, :func:`split_edges`): links and PLD edges of
other partitions go straight to their owners' inboxes, so that no manager spends CPU on
URLs it does not own.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import TypeVar

import xxhash

from drumbeat import urls
from drumbeat.queue.base import FoundEdges, FoundURLs
from drumbeat.settings import SettingsError

_T = TypeVar("_T")


def parse_partition(text: str) -> tuple[int, int]:
    """``I/M`` (``--partition``) -> (I, M), with 0 <= I < M; SettingsError otherwise."""
    left, sep, right = text.partition("/")
    try:
        part, parts = int(left), int(right)
    except ValueError:
        part, parts = -1, 0
    if not sep or parts < 1 or not 0 <= part < parts:
        raise SettingsError(f"--partition {text!r}: give I/M with 0 <= I < M, e.g. 0/2")
    return part, parts


def partition_of_pld(pld: str, partitions: int) -> int:
    """The partition (0 .. ``partitions``-1) that owns the PLD ``pld``."""
    if partitions == 1:
        return 0
    return xxhash.xxh3_64_intdigest(pld.encode()) % partitions


def partition_of(url: str, partitions: int) -> int:
    """The partition that owns the normalized ``url``."""
    if partitions == 1:
        return 0
    return partition_of_pld(urls.pld(urls.host_of(url)), partitions)


class Splitter:
    """Splits found links and PLD edges among ``partitions`` owners, remembering the
    owner of each PLD it met (a page's links mostly share a few), up to a bound."""

    MAX_ORIGINS = 1 << 16  # PLDs remembered

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._pld_owners: dict[str, int] = {}

    def split_page(
        self, source_url: str, links: list[str]
    ) -> tuple[str, dict[int, list[str]], dict[int, list[str]]]:
        """The PLD of ``source_url``, its ``links`` (normalized) by owning partition and
        the other PLDs they point to by owner, the order kept within each
        (:func:`drumbeat.urls.split_targets`). A fetcher splits a page's links so before
        it packs them, and packs each group for its owner, which costs less than packing
        them all and splitting the packed payloads (:meth:`split_found`)."""
        return urls.split_targets(source_url, links, self._pld_owners, self.owner_of_pld)

    def owner_of_pld(self, pld: str) -> int:
        """The partition of the PLD ``pld``, remembered (the PLDs are emptied first when
        MAX_ORIGINS are: a crawl meets PLDs without end, and RAM is bounded)."""
        owner = self._pld_owners.get(pld)
        if owner is None:
            owner = partition_of_pld(pld, self.partitions)
            if len(self._pld_owners) >= self.MAX_ORIGINS:
                self._pld_owners.clear()
            self._pld_owners[pld] = owner
        return owner

    def owner_of_payload(self, payload: bytes) -> int:
        """The partition of the URL that opens a URL-seen payload (``url\\n...``)."""
        end = payload.find(b"/", 8)  # a normalized http(s) URL has a path
        origin = payload[: end if end > 0 else payload.find(b"\n")].decode()
        return self.owner_of_pld(urls.pld(urls.host_of(origin + "/")))

    def split_found(self, found: FoundURLs) -> dict[int, FoundURLs]:
        """``found`` as one FoundURLs per owning partition (the order kept within each)."""
        if self.partitions == 1:
            return {0: found}
        return _split(
            found.fingerprints,
            found.payloads_list(),
            self.owner_of_payload,
            lambda fps, blobs, lens: FoundURLs(fps, blobs, lens),
        )

    def split_edges(self, edges: FoundEdges) -> dict[int, FoundEdges]:
        """``edges`` as one FoundEdges per partition owning their target PLDs."""
        if self.partitions == 1:
            return {0: edges}
        targets: list[bytes] = []
        start = 0
        for n in memoryview(edges.lengths).cast("I"):
            targets.append(edges.targets[start : start + n])
            start += n
        return _split(
            edges.keys,
            targets,
            lambda t: self.owner_of_pld(t.decode()),
            lambda keys, blobs, lens: FoundEdges(edges.source, keys, blobs, lens),
        )


def _split(
    keys: bytes,
    blobs: list[bytes],
    owner: Callable[[bytes], int],
    make: Callable[[bytes, bytes, bytes], _T],
) -> dict[int, _T]:
    """Group ``blobs`` (with their 8-byte ``keys``) by ``owner``; each group packed by
    ``make(keys, blobs joined, uint32 lengths)``."""
    groups: dict[int, list[int]] = {}
    for i, blob in enumerate(blobs):
        groups.setdefault(owner(blob), []).append(i)
    if len(groups) == 1:
        (part,) = groups
        lengths = array("I", map(len, blobs))
        return {part: make(keys, b"".join(blobs), lengths.tobytes())}
    view = memoryview(keys)
    out: dict[int, _T] = {}
    for part, indexes in groups.items():
        chosen = [blobs[i] for i in indexes]
        out[part] = make(
            b"".join(view[8 * i : 8 * i + 8] for i in indexes),
            b"".join(chosen),
            array("I", map(len, chosen)).tobytes(),
        )
    return out
