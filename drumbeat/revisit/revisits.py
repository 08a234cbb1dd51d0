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
    text     the URL, its site, the ETag, the Last-Modified, the URL's crawl depth and
             the WARC date of the last fetch, UTF-8, separated by newlines (none of
             them holds one: normalized URLs and header values cannot); then the
             number of visits the URL's history had when the entry was planned (its
             *seq*) and the simhash of the last fetch's text (0: none); the last four
             may be missing (entries queued before they were added)

A URL has one due entry at a time, except where a sitemap's ``lastmod`` made it due
sooner (:meth:`Revisits.sitemap_lastmods`): the revisit that finds the history with
the visits its entry was planned at plans the next one; the other, finding a visit
more, is recorded but plans none (``superseded``), so that a second entry ends there.

A 304 carries no payload to digest: the digest (and simhash) a revisit was handed out
with is kept (in RAM, at most ``max_in_flight`` of them) until its fetch is recorded,
so that a 304 counts as "unchanged" in the history.

Wired into the crawl by :mod:`drumbeat.manager.revisiting` (``crawl --revisit``): the
fetcher sends the validators a :class:`Revisit` carries as a conditional GET and
archives a 304 as a WARC ``revisit`` record (server-not-modified), a 200 with the
digest the revisit was handed out with as one (identical-payload-digest); the manager
records each page's fetch here, plans and hands out what is due each turn, and its
checkpoints hold :meth:`Revisits.commit`.
"""

from __future__ import annotations

import dataclasses
import math
import struct
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import numpy as np
import xxhash

from drumbeat.drum import Snapshot
from drumbeat.frontier.urlseen import decode_payload
from drumbeat.revisit.duequeue import DueQueue, DueQueueState
from drumbeat.revisit.history import NEAR_BITS, HistoryStore, Visited, change_stats, hints, visit
from drumbeat.revisit.policy import RevisitPolicy
from drumbeat.urls import host_of, pld

_DIGEST = struct.Struct("<Q")


class RevisitsState(TypedDict):
    """A commit of :class:`Revisits`: the history DRUM's manifest and the due-time
    queue's state."""

    history: Snapshot
    due: DueQueueState


@dataclass(frozen=True, slots=True)
class Revisit:
    """A URL whose revisit is due, with the validators its last fetch was served with."""

    fingerprint: int
    url: str
    site: str
    etag: str | None
    last_modified: str | None
    depth: int = 0  # the URL's crawl depth (its links are one deeper)
    digest: int = 0  # digest64 of the payload its last fetch archived (0: unknown)
    date: str | None = None  # the WARC date of that fetch (None: unknown)
    seq: int = 0  # the visits in the URL's history when this was planned (0: unknown)
    simhash: int = 0  # the simhash of the last fetch's text (0: none)


def digest64(payload: bytes) -> int:
    """64 bits of a payload's digest (XXH3; 0 is kept for "none")."""
    return xxhash.xxh3_64_intdigest(payload) or 1


def _encode(
    digest: int,
    url: str,
    site: str,
    etag: str | None,
    modified: str | None,
    depth: int = 0,
    date: str | None = None,
    seq: int = 0,
    simhash: int = 0,
) -> bytes:
    fields = (url, site, etag or "", modified or "", str(depth), date or "", str(seq), str(simhash))
    return _DIGEST.pack(digest) + "\n".join(fields).encode()


def _decode(payload: bytes) -> Revisit:
    """The entry's fields (its fingerprint 0: the caller's to set)."""
    (digest,) = _DIGEST.unpack_from(payload)
    url, site, etag, modified, *more = payload[_DIGEST.size :].decode().split("\n")
    depth, date = (int(more[0]), more[1] or None) if len(more) >= 2 else (0, None)
    seq, simhash = (int(more[2]), int(more[3])) if len(more) >= 4 else (0, 0)
    return Revisit(
        0, url, site, etag or None, modified or None, depth, digest, date, seq, simhash
    )  # fmt: skip


def _planned(rv: Revisit, history: np.void) -> bytes:
    """The due entry of ``rv``'s next visit, planned after ``history`` (the URL's)."""
    digest, seq, simhash = int(history["digest"]), int(history["visits"]), int(history["simhash"])
    etag, modified = rv.etag, rv.last_modified
    return _encode(digest, rv.url, rv.site, etag, modified, rv.depth, rv.date, seq, simhash)


@dataclass(frozen=True, slots=True)
class RevisitStats:
    recorded: int  # fetches recorded
    not_modified: int  # of them 304s
    changed: int  # of them revisits whose page had changed
    scheduled: int  # revisits planned
    handed_out: int  # revisits handed to the crawl
    queued: int  # revisits waiting in the due-time queue
    expected_freshness: float  # the policy's estimate for the collection
    lastmods: int = 0  # sitemap lastmods recorded
    lastmod_due: int = 0  # of them newer than the URL's last visit: made due sooner
    superseded: int = 0  # revisits that found a visit since they were planned


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
        state: RevisitsState | None = None,
        near_bits: int = NEAR_BITS,
    ) -> None:
        """``state``: a :meth:`commit`'s, to reopen at (None: start empty). The clock
        must then run on from the one the state was made with: a crawl uses wall time,
        as sitemap lastmods and Last-Modified are compared with it. ``near_bits``:
        visits whose simhashes are at most this far apart saw no change."""
        self.policy = policy
        self.clock = clock
        self.history = HistoryStore(
            directory / "history",
            ram_bytes=history_ram_bytes,
            manifest=None if state is None else state["history"],
            fsync=fsync,
            near_bits=near_bits,
        )
        self.queue = DueQueue(
            directory / "due",
            slot_s=slot_s,
            now_s=clock(),
            state=None if state is None else state["due"],
            fsync=fsync,
        )
        # A lower bound on the next due time of what is queued (for the operator).
        self.next_due_s = math.inf
        self.max_in_flight = max_in_flight
        self._in_flight: OrderedDict[int, int] = OrderedDict()  # fingerprint -> digest
        # Visits recorded with plan=False and not merged yet (a replay's: bounded by
        # the journal's length).
        self._unplanned: set[int] = set()
        self._counts = dict.fromkeys(("recorded", "not_modified", "changed", "planned", "out"), 0)
        # Revisits handed out: fingerprint -> their entries' (seq, simhash).
        self._handed: OrderedDict[int, tuple[int, int]] = OrderedDict()
        self._lastmods = dict.fromkeys(("recorded", "due", "superseded"), 0)

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
        digest: int = 0,
        depth: int = 0,
        date: str | None = None,
        simhash: int = 0,
        modified_s: float = 0.0,
        at: float | None = None,
        plan: bool = True,
    ) -> None:
        """Record a fetch of ``url`` (a 200's ``payload``, or its :func:`digest64` as
        ``digest``; or a 304, with the digest its revisit was handed out with where the
        caller kept it) at the clock's time (or ``at``); ``date``: its WARC date;
        ``simhash``: its text's (0: none); ``modified_s``: its Last-Modified, seconds
        since the epoch. ``plan=False``: into the history (and the policy's learning)
        only, no next visit queued: one is queued already (a journal's replay of a
        revisit that the restored due-time queue still holds)."""
        seq, handed_simhash = self._handed.pop(fingerprint, (0, 0))
        if status == 304:  # ``digest``: the one it was handed out with, if known
            simhash = handed_simhash
            digest = self._in_flight.pop(fingerprint, 0) or digest
            if not digest:
                return  # not a revisit handed out here (or forgotten): nothing to compare
            self._counts["not_modified"] += 1
        else:
            self._in_flight.pop(fingerprint, None)
            digest = digest or digest64(payload)
        self._counts["recorded"] += 1
        if not plan:
            self._unplanned.add(fingerprint)
        self.history.record(
            [fingerprint],
            visit(
                [self.clock() if at is None else at],
                [digest],
                modified_s=[modified_s],
                simhashes=[simhash],
            ),
            [_encode(digest, url, site, etag, last_modified, depth, date, seq)],
        )

    def sitemap_lastmods(
        self, fingerprints: np.ndarray, lastmods_s: np.ndarray, payloads: list[bytes]
    ) -> None:
        """Record sitemaps' ``<lastmod>`` s (seconds since the epoch, > 0) of the URLs
        ``fingerprints``; ``payloads``: their URL-seen payloads (URL, depth, ...: see
        :func:`drumbeat.frontier.urlseen.encode_payload`). A URL not visited yet keeps
        its date for its first visit; one visited before its lastmod is due soon
        (:meth:`plan`). A date in the future is wrong (a server's clock, or a sitemap
        written ahead): it is dropped, lest it hide the true dates after it."""
        keep = np.flatnonzero(np.asarray(lastmods_s) <= self.clock())
        if len(keep) < len(lastmods_s):
            fingerprints, lastmods_s = fingerprints[keep], lastmods_s[keep]
            payloads = [payloads[i] for i in keep]
        self._lastmods["recorded"] += len(fingerprints)
        self.history.record(fingerprints, hints(lastmods_s), payloads)

    def plan(self) -> int:
        """Merge the fetches recorded so far and queue each URL's next visit; returns
        how many were planned."""
        self.history.flush()
        now = self.clock()
        planned = []
        for v in self.history.take():
            if v.history["visits"] == v.before_visits:  # a sitemap lastmod, no visit
                entry = self._lastmod_due(v, now)
                if entry is not None:
                    planned.append(entry)
                    self.next_due_s = min(self.next_due_s, entry[0])
                continue
            seen = change_stats(v.history)
            new = None
            if v.before is not None:
                new = seen - change_stats(v.before)
                self._counts["changed"] += int(new.changed > 0)
            rv = _decode(v.payload)
            wait = self.policy.visited(v.fingerprint, rv.site, seen, new)
            if v.fingerprint in self._unplanned:
                self._unplanned.discard(v.fingerprint)
                continue
            if rv.seq and rv.seq != v.before_visits:
                self._lastmods["superseded"] += 1  # another entry of the URL went first
                continue
            planned.append((now + wait, v.fingerprint, _planned(rv, v.history)))
            self.next_due_s = min(self.next_due_s, now + wait)
        self.queue.extend(planned)
        self._counts["planned"] += len(planned)
        return len(planned)

    def _lastmod_due(self, v: Visited, now: float) -> tuple[float, int, bytes] | None:
        """The due entry a sitemap lastmod calls for, if any.

        A lastmod newer than the URL's last visit (and than any lastmod seen before,
        and not in the future) means the page changed since: its revisit is due now, or
        ``min_interval_s`` after the last visit if that is later (the policy's floor; the
        politeness of the crawl spaces it as any page). Sent without validators: the
        page is said to have changed. Its next visit is then planned by the policy."""
        before = v.before
        t = float(v.history["sitemap_s"])
        if before is None or not float(before["last_s"]) < t <= now:
            return None
        if t <= float(before["sitemap_s"]):
            return None  # seen before: it made the URL due then
        url, depth, _, _ = decode_payload(v.payload)
        host = host_of(url)
        rv = Revisit(0, url, pld(host) if host else "", None, None, depth)
        self._lastmods["due"] += 1
        due_s = max(now, float(before["last_s"]) + self.policy.min_interval_s)
        return due_s, v.fingerprint, _planned(rv, before)

    def due(self, n: int) -> list[Revisit]:
        """Up to ``n`` revisits due by now."""
        out = []
        now = self.clock()
        for e in self.queue.pop(n, now):
            rv = dataclasses.replace(_decode(e.payload), fingerprint=e.fingerprint)
            self._in_flight[e.fingerprint] = rv.digest
            if len(self._in_flight) > self.max_in_flight:
                self._in_flight.popitem(last=False)
            if rv.seq:
                self._handed[e.fingerprint] = rv.seq, rv.simhash
                if len(self._handed) > self.max_in_flight:
                    self._handed.popitem(last=False)
            out.append(rv)
        if len(out) < n:  # all that was due is out: the next is due later
            self.next_due_s = math.inf if not len(self.queue) else max(self.next_due_s, now)
        self._counts["out"] += len(out)
        return out

    def defer(self, revisit: Revisit, wait_s: float) -> None:
        """Queue a revisit handed out and not made (refused by a cap, blocked, failed)
        again, due ``wait_s`` from now, with what it was handed out with."""
        self._in_flight.pop(revisit.fingerprint, None)
        rv = revisit
        due_s = self.clock() + wait_s
        payload = _encode(rv.digest, rv.url, rv.site, rv.etag, rv.last_modified, rv.depth,
                          rv.date, rv.seq, rv.simhash)  # fmt: skip
        self.queue.push(due_s, rv.fingerprint, payload)
        self.next_due_s = min(self.next_due_s, due_s)

    def stats(self) -> RevisitStats:
        c = self._counts
        fresh = self.policy.stats().mean_freshness
        m = self._lastmods
        return RevisitStats(
            c["recorded"], c["not_modified"], c["changed"], c["planned"], c["out"],
            len(self.queue), float(np.round(fresh, 4)), m["recorded"], m["due"],
            m["superseded"],
        )  # fmt: skip

    def commit(self) -> RevisitsState:
        """Make the history and the due-time queue durable (the visits recorded so far
        merged and planned first); the state to reopen with. What the policy learned
        (its threshold, sample and the sites' priors) is the caller's to keep
        (:meth:`RevisitPolicy.state`: the manager saves it with the checkpoint)."""
        self.plan()
        return {"history": self.history.commit(), "due": self.queue.commit()}

    def close(self) -> None:
        self.queue.close()
        self.history.close()
