"""A RAM cache of the fingerprints URL-seen was sent lately (IRLbot §V.A-B: URL caching).

Most links a crawl finds were found before: a site's pages link to the same pages of it
again and again. Each of those duplicates costs URL-seen a tuple in its arrival log
(compressed, written, read back, sorted, merged and delivered) only to be found old. A
fingerprint in this cache was sent to URL-seen already, so a later copy can be dropped
before it: the first copy decides whether the URL is new, and carries its payload
(depth, via) as before, so what the crawl admits does not change.

IRLbot measured LRU hit rates of 60-73 % once the cache holds more URLs than a crawl
finds between two visits to a site, and chose CLOCK for its speed. This one is simpler
still: a direct-mapped table of 8-byte fingerprints, looked up and updated with a few
numpy passes a batch, in which a newer fingerprint takes over its slot. On the polite
throughput bench the default size catches most links, and the manager uses less CPU a
page with it than without. The table lookups and dropping the repeats cost more than
DRUM's own handling of a tuple in the caller's thread; the gain is DRUM's merge rounds
(far fewer tuples to sort and merge, in the background) and their delivery (far fewer
to inflate and reorder).

RAM is the table: ``ram_bytes`` rounded down to a power of two of entries. Only
fingerprints already handed to URL-seen are remembered, and the cache lives and dies
with the URL-seen it filters (a crawl reopened at a checkpoint starts with an empty
one), so it never hides a URL whose first copy was lost.
"""

from __future__ import annotations

import numpy as np

from drumbeat.runtime import tables


class RecentFingerprints:
    """Fingerprints (uint64) sent to URL-seen lately, in a table of ``ram_bytes`` at most."""

    def __init__(self, ram_bytes: int) -> None:
        if ram_bytes < 8:
            raise ValueError(f"ram_bytes must be at least 8, got {ram_bytes}")
        entries = 1 << ((ram_bytes // 8).bit_length() - 1)
        # 0 marks an empty slot: a fingerprint of 0 is never taken for remembered.
        self._table = tables.zeros(entries, np.uint64)
        self._mask = np.uint64(entries - 1)

    @property
    def entries(self) -> int:
        return len(self._table)

    def unseen(self, fingerprints: np.ndarray) -> np.ndarray:
        """A bool array: which of ``fingerprints`` (uint64) the cache does not hold. Two
        copies of one fingerprint in ``fingerprints`` that it does not hold are both
        unseen (URL-seen tells them apart)."""
        slots = fingerprints & self._mask
        unseen: np.ndarray = (self._table[slots] != fingerprints) | (fingerprints == 0)
        return unseen

    def remember(self, fingerprints: np.ndarray) -> None:
        """Note ``fingerprints`` (uint64) as sent to URL-seen: call once they have been."""
        self._table[fingerprints & self._mask] = fingerprints
