"""Revisits of one crawl: the history, the policy and the due-time queue put together,
for the manager to call (a fetch done; what is due).

:meth:`Revisits.fetched` records a fetch of a page (200 with its payload digest, or 304)
in the history; :meth:`Revisits.plan` folds the merged visits, estimates each URL's rate,
and queues its next visit by the policy; :meth:`Revisits.due` hands back the URLs whose
revisit is due, each with the validators to send (:class:`Revisit`). What a revisit
fetch then finds goes back to :meth:`Revisits.fetched`, and so on: a crawl with revisits
never runs out of work.

A due entry's payload (see :mod:`.duequeue`)::

    digest   u8   64 bits of the payload digest of the last fetch
    text     the URL, the ETag and the Last-Modified, UTF-8, separated by newlines
             (none of them holds one: normalized URLs and header values cannot)

A 304 carries no payload to digest: the digest a revisit was handed out with is kept
(in RAM, at most ``max_in_flight`` of them) until its fetch is recorded, so that a 304
counts as "unchanged" in the history.

Not wired into the crawl yet (issue 52's ``crawl --revisit``); the plan:

* fetcher: ``Fetcher._fetch`` passes ``etag=item.etag, last_modified=item.last_modified``
  to ``http.fetch``; its ItemResult gains the payload's :func:`digest64` and the
  response's validators (``drumbeat.fetch.client.validators``); a 304, and a 200 whose
  digest is the one the revisit was handed out with, are archived as WARC ``revisit``
  records (server-not-modified / identical-payload-digest: the dedup branch's writer).
* manager: each PAGE result with a status goes to :meth:`Revisits.fetched`; each turn,
  :meth:`Revisits.plan` and then :meth:`Revisits.due` up to the revisit share of the
  fetch rate; each due URL enters the politeness scheduler as a new page does (robots,
  politeness and budgets apply) and its FetchItem carries the validators; a crawl with
  revisits never finishes; ``drumbeat stats`` shows :meth:`Revisits.stats`;
  checkpoints store ``history.commit()`` and ``queue.commit()``.
"""

from __future__ import annotations

import struct
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xxhash

from drumbeat.revisit.duequeue import DueQueue
from drumbeat.revisit.history import HistoryStore, change_stats, visit
from drumbeat.revisit.policy import RevisitPolicy

_DIGEST = struct.Struct("<Q")


@dataclass(frozen=True, slots=True)
class Revisit:
    """A URL whose revisit is due, with the validators its last fetch was served with."""

    fingerprint: int
    url: str
    site: str
    etag: str | None
    last_modified: str | None


def digest64(payload: bytes) -> int:
    """64 bits of a payload's digest (XXH3; 0 is kept for "none")."""
    return xxhash.xxh3_64_intdigest(payload) or 1


def _encode(digest: int, url: str, site: str, etag: str | None, modified: str | None) -> bytes:
    text = "\n".join((url, site, etag or "", modified or ""))
    return _DIGEST.pack(digest) + text.encode()


def _decode(payload: bytes) -> tuple[int, str, str, str | None, str | None]:
    (digest,) = _DIGEST.unpack_from(payload)
    url, site, etag, modified = payload[_DIGEST.size :].decode().split("\n")
    return digest, url, site, etag or None, modified or None


@dataclass(frozen=True, slots=True)
class RevisitStats:
    recorded: int  # fetches recorded
    not_modified: int  # of them 304s
    changed: int  # of them revisits whose page had changed
    scheduled: int  # revisits planned
    handed_out: int  # revisits handed to the crawl
    queued: int  # revisits waiting in the due-time queue
    expected_freshness: float  # the policy's estimate for the collection


class Revisits:
    """The revisits of one crawl, its state in ``directory``."""

    def __init__(
        self,
        directory: Path,
        policy: RevisitPolicy,
        *,
        clock: Callable[[], float] = time.monotonic,
        history_ram_bytes: int = 16 << 20,
        slot_s: float = 60.0,
        max_in_flight: int = 100_000,
        fsync: bool = True,
    ) -> None:
        self.policy = policy
        self.clock = clock
        self.history = HistoryStore(directory / "history", ram_bytes=history_ram_bytes, fsync=fsync)
        self.queue = DueQueue(directory / "due", slot_s=slot_s, now_s=clock(), fsync=fsync)
        self.max_in_flight = max_in_flight
        self._in_flight: OrderedDict[int, int] = OrderedDict()  # fingerprint -> digest
        self._counts = dict.fromkeys(("recorded", "not_modified", "changed", "planned", "out"), 0)

    def fetched(
        self,
        fingerprint: int,
        url: str,
        site: str,
        *,
        status: int,
        payload: bytes = b"",
        etag: str | None = None,
        last_modified: str | None = None,
    ) -> None:
        """Record a fetch of ``url`` (a 200's ``payload``, or a 304) at the clock's time."""
        if status == 304:
            digest = self._in_flight.pop(fingerprint, 0)
            if not digest:
                return  # not a revisit handed out here (or forgotten): nothing to compare
            self._counts["not_modified"] += 1
        else:
            self._in_flight.pop(fingerprint, None)
            digest = digest64(payload)
        self._counts["recorded"] += 1
        self.history.record(
            [fingerprint],
            visit([self.clock()], [digest]),
            [_encode(digest, url, site, etag, last_modified)],
        )

    def plan(self) -> int:
        """Merge the fetches recorded so far and queue each URL's next visit; returns
        how many were planned."""
        self.history.flush()
        now = self.clock()
        planned = []
        for v in self.history.take():
            seen = change_stats(v.history)
            new = None
            if v.before is not None:
                before = change_stats(v.before)
                new = type(seen)(
                    seen.intervals - before.intervals,
                    seen.changed - before.changed,
                    seen.changed_s - before.changed_s,
                    seen.unchanged_s - before.unchanged_s,
                )
                self._counts["changed"] += int(new.changed > 0)
            site = _decode(v.payload)[2]
            wait = self.policy.visited(v.fingerprint, site, seen, new)
            planned.append((now + wait, v.fingerprint, v.payload))
        self.queue.extend(planned)
        self._counts["planned"] += len(planned)
        return len(planned)

    def due(self, n: int) -> list[Revisit]:
        """Up to ``n`` revisits due by now."""
        out = []
        for e in self.queue.pop(n, self.clock()):
            digest, url, site, etag, modified = _decode(e.payload)
            self._in_flight[e.fingerprint] = digest
            if len(self._in_flight) > self.max_in_flight:
                self._in_flight.popitem(last=False)
            out.append(Revisit(e.fingerprint, url, site, etag, modified))
        self._counts["out"] += len(out)
        return out

    def stats(self) -> RevisitStats:
        c = self._counts
        fresh = self.policy.stats().mean_freshness
        return RevisitStats(
            c["recorded"], c["not_modified"], c["changed"], c["planned"], c["out"],
            len(self.queue), float(np.round(fresh, 4)),
        )  # fmt: skip

    def close(self) -> None:
        self.queue.close()
        self.history.close()
