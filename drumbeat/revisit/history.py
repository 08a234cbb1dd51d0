"""Each fetched URL's compact history: a DRUM keyed by the URL's 64-bit fingerprint.

A record (:data:`RECORD`, 72 bytes, fixed: the RAM is DRUM's ``ram_bytes`` whatever the
number of URLs) sums up the URL's visits::

    first_s       f8  time of the first visit (the crawl's clock, seconds)
    last_s        f8  time of the latest visit
    first_digest  u8  64 bits of the payload digest at the first visit
    digest        u8  ... at the latest visit
    etag          u8  64-bit hash of the latest ETag (0: none); the ETag itself travels
                      with the URL's entry in the due-time queue, which sends it
    modified_s    f8  the latest Last-Modified, in seconds since the epoch (0: none)
    visits        u4  visits recorded
    changes       u4  intervals between consecutive visits whose digests differ
    changed_s     f8  total length of those intervals
    unchanged_s   f8  total length of the intervals without a change

A visit is recorded as a record of one visit (:func:`visit`); DRUM's merge folds it into
the stored one (:func:`fold`). The fold is associative -- a record is the summary of a
sequence of visits, and two summaries join by comparing the first's last digest with
the second's first -- as DRUM's vectorized merge requires. A 304 is recorded with the
digest the URL had (its due-queue entry carries it), so it counts as no change.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from drumbeat.drum import Drum
from drumbeat.revisit.estimate import ChangeStats

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
    ]
)


def visit(
    times_s: Sequence[float] | np.ndarray,
    digests: Sequence[int] | np.ndarray,
    etags: Sequence[int] | np.ndarray | None = None,
    modified_s: Sequence[float] | np.ndarray | None = None,
) -> np.ndarray:
    """Records of one visit each (the arrays align: one entry a URL)."""
    n = len(times_s)
    out = np.zeros(n, RECORD)
    out["first_s"] = out["last_s"] = times_s
    out["first_digest"] = out["digest"] = np.asarray(digests, np.uint64)
    if etags is not None:
        out["etag"] = np.asarray(etags, np.uint64)
    if modified_s is not None:
        out["modified_s"] = modified_s
    out["visits"] = 1
    return out


def fold(stored: np.ndarray, later: np.ndarray) -> np.ndarray:
    """The history of ``stored``'s visits followed by ``later``'s (element-wise)."""
    gap = np.maximum(later["first_s"] - stored["last_s"], 0.0)
    changed = stored["digest"] != later["first_digest"]
    out = later.copy()
    out["first_s"] = stored["first_s"]
    out["first_digest"] = stored["first_digest"]
    out["visits"] = stored["visits"] + later["visits"]
    out["changes"] = stored["changes"] + later["changes"] + changed
    out["changed_s"] = stored["changed_s"] + later["changed_s"] + np.where(changed, gap, 0.0)
    out["unchanged_s"] = stored["unchanged_s"] + later["unchanged_s"] + np.where(changed, 0.0, gap)
    return out


def change_stats(record: np.void | np.ndarray) -> ChangeStats:
    """What the visits of one record saw, for :func:`~drumbeat.revisit.estimate.estimate`."""
    return ChangeStats(
        float(max(int(record["visits"]) - 1, 0)),
        float(record["changes"]),
        float(record["changed_s"]),
        float(record["unchanged_s"]),
    )


@dataclass(frozen=True, slots=True)
class Visited:
    """A recorded visit, once merged: the URL's fingerprint, its history including this
    visit, the one before it (``None`` for a first visit) and the caller's payload."""

    fingerprint: int
    history: np.void
    before: np.void | None
    payload: bytes


class HistoryStore:
    """The history DRUM of one crawl in ``directory`` (see the module docstring).
    Visits are recorded in batches and come back, folded, from :meth:`take` after a
    merge round, with the payload given for each (e.g. the URL and its validators)."""

    def __init__(
        self,
        directory: Path,
        *,
        ram_bytes: int = 16 << 20,
        manifest: dict[str, Any] | None = None,
        fsync: bool | str = True,
    ) -> None:
        self.drum = Drum(
            directory,
            value_dtype=RECORD,
            merge=fold,
            ram_bytes=ram_bytes,
            manifest=manifest,
            fsync=fsync,
            compress_log=False,
        )

    def record(
        self, fingerprints: Sequence[int] | np.ndarray, visits: np.ndarray, payloads: list[bytes]
    ) -> None:
        """Queue visits (records from :func:`visit`) of the URLs ``fingerprints``."""
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
                    yield Visited(int(key), fold(before, seen)[0], before[0], aux[size:])

    @property
    def urls(self) -> int:
        """URLs with a history (as of the last merge round)."""
        return self.drum.stats().keys_stored

    def commit(self) -> dict[str, Any]:
        return dict(self.drum.commit())

    def close(self) -> None:
        self.drum.close()
