"""Each fetched URL's compact history: a DRUM keyed by the URL's 64-bit fingerprint.

A record (:data:`RECORD`, 132 bytes, fixed: the RAM is DRUM's ``ram_bytes`` whatever the
number of URLs) sums up the URL's visits and the sitemap ``<lastmod>`` s seen for it::

    first_s       f8  time of the first visit (the crawl's clock, seconds)
    last_s        f8  time of the latest visit
    first_digest  u8  64 bits of the payload digest at the first visit
    digest        u8  ... at the latest visit
    etag          u8  64-bit hash of the latest ETag (0: none); the ETag itself travels
                      with the URL's entry in the due-time queue, which sends it
    modified_s    f8  the latest Last-Modified, in seconds since the epoch (0: none)
    visits        u4  visits recorded
    changes       u4  intervals between consecutive visits that saw a change
    changed_s     f8  total length of those intervals
    unchanged_s   f8  total length of the intervals without a change
    first_simhash u8  the 64-bit simhash of the text at the first visit (0: none)
    simhash       u8  ... at the latest visit
    first_modified_s f8  the first visit's Last-Modified (0: none)
    sitemap_s     f8  the newest sitemap <lastmod> seen, seconds since the epoch (0: none)
    pre_sitemap_s f8  ... of those seen before the first visit
    dated         u4  changed intervals whose last change time was known
    dated_s       f8  total length of those intervals
    since_s       f8  total time from their last change to the visit that saw it

A visit is recorded as a record of one visit (:func:`visit`), a sitemap's ``lastmod``
as a record of no visit (:func:`hints`); DRUM's merge folds them into the stored one
(:func:`fold`). The fold is associative -- a record is the summary of a sequence of
visits and hints, and two summaries join by comparing the first's last visit with the
second's first -- as DRUM's vectorized merge requires. A 304 is recorded with the
digest and simhash the URL had (its due-queue entry carries them), so it counts as no
change.

When two consecutive visits count as a change: when both have a simhash (the page is
HTML and ``near_dup`` is on), only if the simhashes are more than ``near`` bits apart
(``near_dup_distance``: what is a near-duplicate of the page is the same page, as a new
date line or ad block does not make a page worth revisiting sooner); the payload
digests differ, otherwise.

When a change is dated: the later visit's Last-Modified, or else the newest sitemap
``lastmod`` seen before it, falls after the earlier visit and no later than this one
(the crawl's clock is wall time: :mod:`drumbeat.manager.revisiting`). The change
estimator then knows when the page last changed (:mod:`.estimate`). A date in the
future or before the earlier visit says nothing about this interval and is ignored.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from drumbeat.drum import Drum, Snapshot
from drumbeat.revisit.estimate import ChangeStats

log = logging.getLogger("drumbeat.revisit")

RECORD = np.dtype(
    [
        ("first_s", "<f8"),
        ("last_s", "<f8"),
        ("first_digest", "<u8"),
        ("digest", "<u8"),
        ("etag", "<u8"),
        ("modified_s", "<f8"),
        ("visits", "<u4"),
        ("changes", "<u4"),
        ("changed_s", "<f8"),
        ("unchanged_s", "<f8"),
        ("first_simhash", "<u8"),
        ("simhash", "<u8"),
        ("first_modified_s", "<f8"),
        ("sitemap_s", "<f8"),
        ("pre_sitemap_s", "<f8"),
        ("dated", "<u4"),
        ("dated_s", "<f8"),
        ("since_s", "<f8"),
    ]
)
NEAR_BITS = 3  # near_dup_distance's default (drumbeat.settings)
_FIRST = ("first_s", "first_digest", "first_simhash", "first_modified_s")
_LAST = ("last_s", "digest", "simhash", "modified_s", "etag")


def visit(
    times_s: Sequence[float] | np.ndarray,
    digests: Sequence[int] | np.ndarray,
    etags: Sequence[int] | np.ndarray | None = None,
    modified_s: Sequence[float] | np.ndarray | None = None,
    simhashes: Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """Records of one visit each (the arrays align: one entry a URL)."""
    n = len(times_s)
    out = np.zeros(n, RECORD)
    out["first_s"] = out["last_s"] = times_s
    out["first_digest"] = out["digest"] = np.asarray(digests, np.uint64)
    if etags is not None:
        out["etag"] = np.asarray(etags, np.uint64)
    if modified_s is not None:
        out["first_modified_s"] = out["modified_s"] = modified_s
    if simhashes is not None:
        out["first_simhash"] = out["simhash"] = np.asarray(simhashes, np.uint64)
    out["visits"] = 1
    return out


def hints(lastmods_s: Sequence[float] | np.ndarray) -> np.ndarray:
    """Records of no visit, each a sitemap ``<lastmod>`` (seconds since the epoch)."""
    out = np.zeros(len(lastmods_s), RECORD)
    out["sitemap_s"] = out["pre_sitemap_s"] = lastmods_s
    return out


def changed(stored: np.ndarray, later: np.ndarray, near: int = NEAR_BITS) -> np.ndarray:
    """Whether ``later``'s first visit saw a change since ``stored``'s last (see the
    module docstring: simhashes where both have one, digests otherwise)."""
    a, b = stored["simhash"], later["first_simhash"]
    both = (a != 0) & (b != 0)
    far: np.ndarray = np.bitwise_count(a ^ b) > near
    return np.where(both, far, stored["digest"] != later["first_digest"])


def fold(stored: np.ndarray, later: np.ndarray, near: int = NEAR_BITS) -> np.ndarray:
    """The history of ``stored``'s visits and hints followed by ``later``'s (element-wise)."""
    had, has = stored["visits"] > 0, later["visits"] > 0
    joined = had & has  # an interval between two visits
    gap = np.where(joined, np.maximum(later["first_s"] - stored["last_s"], 0.0), 0.0)
    change = joined & changed(stored, later, near)
    known = np.maximum(stored["sitemap_s"], later["pre_sitemap_s"])
    m = np.where(later["first_modified_s"] > 0, later["first_modified_s"], known)
    dated = change & (m > stored["last_s"]) & (m <= later["first_s"])
    out = later.copy()
    for name in _FIRST:
        out[name] = np.where(had, stored[name], later[name])
    for name in _LAST:
        out[name] = np.where(has, later[name], stored[name])
    out["sitemap_s"] = np.maximum(stored["sitemap_s"], later["sitemap_s"])
    out["pre_sitemap_s"] = np.where(had, stored["pre_sitemap_s"], known)
    for name in ("visits", "changes", "dated", "changed_s", "unchanged_s", "dated_s", "since_s"):
        out[name] = stored[name] + later[name]
    out["changes"] += change
    out["dated"] += dated
    out["changed_s"] += np.where(change, gap, 0.0)
    out["unchanged_s"] += np.where(joined & ~change, gap, 0.0)
    out["dated_s"] += np.where(dated, gap, 0.0)
    out["since_s"] += np.where(dated, later["first_s"] - m, 0.0)
    return out


def change_stats(record: np.void | np.ndarray) -> ChangeStats:
    """What the visits of one record saw, for :func:`~drumbeat.revisit.estimate.estimate`."""
    return ChangeStats(
        float(max(int(record["visits"]) - 1, 0)),
        float(record["changes"]),
        float(record["changed_s"]),
        float(record["unchanged_s"]),
        float(record["dated"]),
        float(record["dated_s"]),
        float(record["since_s"]),
    )


@dataclass(frozen=True, slots=True)
class Visited:
    """A recorded visit, once merged: the URL's fingerprint, its history including this
    visit, the one before it (``None`` for a first visit) and the caller's payload."""

    fingerprint: int
    history: np.void
    before: np.void | None
    payload: bytes

    @property
    def before_visits(self) -> int:
        """The visits of the history before this record (0: none)."""
        return 0 if self.before is None else int(self.before["visits"])


class HistoryStore:
    """The history DRUM of one crawl in ``directory`` (see the module docstring).
    Visits are recorded in batches and come back, folded, from :meth:`take` after a
    merge round, with the payload given for each (e.g. the URL and its validators)."""

    def __init__(
        self,
        directory: Path,
        *,
        ram_bytes: int = 16 << 20,
        manifest: Snapshot | None = None,
        fsync: bool | str = True,
        near_bits: int = NEAR_BITS,
    ) -> None:
        """``near_bits``: simhashes at most this many bits apart are the same page."""
        self._fold = partial(fold, near=near_bits)

        def open_drum(at: Snapshot | None) -> Drum:
            return Drum(
                directory,
                value_dtype=RECORD,
                merge=self._fold,
                ram_bytes=ram_bytes,
                manifest=at,
                fsync=fsync,
                compress_log=False,
            )

        try:
            self.drum = open_drum(manifest)
        except ValueError as e:
            if manifest is None:
                raise
            # Records of another layout (an older drumbeat's, before simhashes and
            # lastmods): a history is a summary that visits build again, so it starts
            # anew rather than stop the crawl; the due-time queue keeps every URL.
            log.warning("revisit history not reopened (%s): starting it anew", e)
            shutil.rmtree(directory)
            self.drum = open_drum(None)

    def record(
        self, fingerprints: Sequence[int] | np.ndarray, visits: np.ndarray, payloads: list[bytes]
    ) -> None:
        """Queue visits (records from :func:`visit`, or :func:`hints`) of the URLs
        ``fingerprints``."""
        keys = np.asarray(fingerprints, np.uint64)
        if not (len(keys) == len(visits) == len(payloads)):
            raise ValueError("fingerprints, visits and payloads must align")
        if not len(keys):
            return
        visits = np.ascontiguousarray(visits, RECORD)
        # DRUM gives back a tuple's aux but not its value: the visit rides in the aux
        # too, so that take() can fold it into the history it found.
        raw = visits.tobytes()
        size = RECORD.itemsize
        aux = [raw[i * size : (i + 1) * size] + p for i, p in enumerate(payloads)]
        self.drum.check_update(keys, visits, aux=aux)

    def flush(self) -> None:
        """Merge every visit queued so far."""
        self.drum.flush()

    def take(self) -> Iterator[Visited]:
        """The visits merged so far, in the order recorded, each with its history."""
        size = RECORD.itemsize
        for result in self.drum.take_results():
            for i, key in enumerate(result.keys.tolist()):
                aux = result.aux[i]
                seen = np.frombuffer(aux[:size], RECORD).copy()
                if result.unique[i]:
                    yield Visited(int(key), seen[0], None, aux[size:])
                else:
                    before = result.values[i : i + 1].copy()
                    yield Visited(int(key), self._fold(before, seen)[0], before[0], aux[size:])

    @property
    def urls(self) -> int:
        """URLs with a history (as of the last merge round)."""
        return self.drum.stats().keys_stored

    def commit(self) -> Snapshot:
        return self.drum.commit()

    def close(self) -> None:
        self.drum.close()
