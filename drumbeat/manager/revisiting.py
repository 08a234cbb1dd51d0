"""Revisits in the crawl (``Settings.revisit``, ``crawl --revisit``): each page fetched
goes to the revisit schedule (drumbeat.revisit.revisits), and what falls due enters the
politeness scheduler as a new page does, carrying its validators for a conditional GET.

Where revisits enter: past URL-seen (a revisited URL is seen already), into BEAST, as a
new URL does: its PLD's STAR budget rations them with the new URLs of the PLD (a PLD
gets at most its budget of URLs a turn, revisits and new pages together); then robots
rules, the host's and IP's politeness delays (scaled by the PLD's budget), the
operator's blocks and the scope's dispatch rules (blocklist, caps) apply to them as to
any page.

A revisit dropped on its way (:meth:`Revisiting.on_drop`) stays in the schedule, due
again a new URL's interval later (``default_interval_s``): a cap, a block, a robots.txt
that cannot be had, a host that does not resolve or fetches that kept failing may all
end (an operator lifts a block, raises a cap at a restart; a server comes back), and the
URL was crawled already, so it would never come back otherwise. Except a robots.txt
that disallows it: the site asked not to be crawled there, and a URL it disallows is
not fetched as a new page either; it leaves the schedule (its history stays).

How many: while new URLs remain, the revisits handed out each turn are paced at
``revisit_share`` of the recent fetch rate; once the new-URL frontier is empty they may
use all of it (politeness still spaces them). The policy's bandwidth is the same share
of the best fetch rate seen (all of it once the frontier is done), so that the schedule
plans no more revisits than the crawl can make.

Sitemap lastmods: a sitemap's fetch carries each of its URLs' ``<lastmod>`` (the
fetcher parses them only with revisits on); :meth:`Revisiting.record` puts them in the
history, keyed by fingerprint, whether URL-seen finds the URL new or not: a new URL's
date waits in its history record for its first visit, and a known URL visited before
its lastmod is made due soon (drumbeat.revisit.revisits). Nothing per URL stays in
RAM. Each page's Last-Modified and simhash (with ``near_dup``) go to its history too.

After a crash: a checkpoint holds the history and the due-time queue as of its commit,
and (``revisits.npz``, :meth:`Revisiting.saver`) what the policy learned (``mu``, its
hash sample, the sites' pooled rates), the fetch rate revisits are paced by, and the
revisits handed out and not recorded yet, with their validators: those waiting for
dispatch and those in flight, whose URLs the checkpoint's RAM rows route again, so
that they leave as conditional GETs again. The journal (drumbeat.manager.journal)
holds each page fetch's *visit* (:func:`journal_visit`), replayed into the history
(:meth:`Revisiting.replay`): a SIGKILL loses at most the visits of one group commit,
as it does pages. One cost remains: a revisit handed out after the checkpoint is still
in the checkpoint's due-time queue, so it is due again at once and fetched once more
(its replayed visit is kept in the history but not planned, so that the URL is not
queued twice). The sitemap lastmods recorded since the checkpoint are not journaled:
they come back when the sitemap is fetched again.
"""

from __future__ import annotations

import json
import logging
import math
import struct
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from datetime import UTC
from email.utils import parsedate_to_datetime
from pathlib import Path

import numpy as np

from drumbeat import urls
from drumbeat.frontier.backoff import retryable
from drumbeat.frontier.urlseen import encode_payload
from drumbeat.manager.gate import RobotsGate
from drumbeat.queue.base import PAGE, FetchItem, FoundURLs, ItemResult
from drumbeat.revisit.policy import RevisitPolicy
from drumbeat.revisit.revisits import Revisit, Revisits, RevisitsState
from drumbeat.settings import Settings
from drumbeat.store.durable import save_npz
from drumbeat.store.warc import warc_date

log = logging.getLogger("drumbeat.manager")

DIR_NAME = "revisits"
ROBOTS_DISALLOWED = "robots_disallowed"  # (manager.gate's drop reason)
# Plan and hand out revisits at most this often (a DRUM merge each), or twice per
# shortest revisit interval where that is shorter.
TURN_S = 1.0
RATE_HALF_LIFE_S = 10.0  # of the recent fetch rate's moving average
MAX_WAITING = 100_000  # revisits handed out and not yet dispatched, validators kept
STATE_FILE = "revisits.npz"  # in a checkpoint: Revisiting.saver
# A journaled visit (journal_visit): its time, the payload's digest64, the digest the
# revisit was handed out with (0: not a revisit), the depth, the text's simhash (0:
# none), the Last-Modified in seconds (0.0: none); then the ETag, Last-Modified, WARC
# date of the payload and the revisit's WARC date ("": none), UTF-8, separated by
# newlines (header values hold none).
_VISIT = struct.Struct("<dQQiQd")
_MAX_VISIT = 0xFFFF  # the journal's bound on a visit's bytes


class Revisiting:
    """The manager's side of the crawl's revisits (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        state_dir: Path,
        saved: RevisitsState | None,
        gate: RobotsGate,
        counters: Counter[str],
        *,
        place: Callable[[list[bytes]], None],
        clock: Callable[[], float] = time.time,
        in_flight: Callable[[], int] | None = None,
    ) -> None:
        """``saved``: the checkpoint's commit of the revisits (None: none yet).
        ``place``: puts URL-seen payloads into BEAST with their PLDs' budgets (the
        manager's). The clock is wall time: a resumed crawl's due times are the last
        run's. ``in_flight``: the fetches the manager keeps in flight at most now (its
        dispatch's limit, which a cluster's manager sizes to the fleet): a turn may hand
        out that many at once even beyond its share's refill; ``settings.concurrency``
        when None, and never less."""
        s = self.settings = settings
        self.in_flight = in_flight
        self.gate = gate
        self.place = place
        self.counters = counters
        self.clock = clock
        self.policy = RevisitPolicy(
            1.0,  # set each turn from the fetch rate
            min_interval_s=s.revisit_min_interval_s,
            max_interval_s=s.revisit_max_interval_s,
            default_interval_s=max(s.revisit_min_interval_s, s.revisit_max_interval_s / 30),
            resolve_s=min(3600.0, 60 * s.revisit_min_interval_s),
            clock=clock,
        )
        self.revisits = Revisits(
            state_dir / DIR_NAME,
            self.policy,
            clock=clock,
            # The schedule's resolution: a few slots per shortest interval.
            slot_s=min(60.0, s.revisit_min_interval_s / 4),
            max_in_flight=MAX_WAITING,
            state=saved,
            near_bits=s.near_dup_distance,
        )
        # Revisits handed out and not recorded yet, by URL: their FetchItems get the
        # validators at dispatch (on_item; each retry too). One dropped on its way is
        # rescheduled (on_drop); one never heard of again is forgotten, oldest first,
        # past MAX_WAITING.
        self.waiting: OrderedDict[str, Revisit] = OrderedDict()
        # After a restore, until the journal's replay: the revisits the checkpoint saw
        # handed out (load), whose replayed visits are planned (replay).
        self._handed_out: set[int] = set()
        self.turn_s = min(TURN_S, s.revisit_min_interval_s / 2)
        self._last_turn = -math.inf
        self._last_fetches = counters.get("fetches", 0)
        self._rate = 0.0  # fetches a second, moving average
        self._best_rate = 0.0
        self._tokens = 0.0
        self._frontier_done = False

    def on_item(self, item: FetchItem) -> None:
        """A page leaves for the fetchers: a revisit's carries its validators."""
        rv = self.waiting.get(item.url)
        if rv is not None:
            item.etag, item.last_modified = rv.etag, rv.last_modified
            item.revisit_digest, item.revisit_date = rv.digest, rv.date

    def record(self, results: list[ItemResult]) -> None:
        """Each page fetched (that is not retried) to the history."""
        for r in results:
            fields = _visit_fields(r)
            if fields is not None and r.status is not None:
                if r.lastmods is not None and r.found is not None:
                    self._lastmods(r.found, r.lastmods)
                self.waiting.pop(r.item.url, None)
                self._record(r.item.url, r.status, *fields)

    def on_drop(self, url: str, reason: str) -> None:
        """A URL was dropped (Drops.on_drop): a revisit's goes back to the schedule, but
        for a robots.txt that disallows it (see the module docstring)."""
        rv = self.waiting.pop(url, None)
        if rv is None:
            return  # not a revisit (or one forgotten)
        if reason == ROBOTS_DISALLOWED:
            self.counters["revisit.dropped"] += 1
            return
        self.counters["revisit.deferred"] += 1
        self.revisits.defer(rv, self.policy.default_interval_s)

    def replay(self, url: str, status: int | None, visit: bytes) -> None:
        """A journaled page fetch's visit (:func:`journal_visit`) to the history, after
        the checkpoint's state was loaded (:meth:`load`). A revisit handed out after the
        checkpoint is still in its due-time queue: its visit is not planned again."""
        if status is None or not visit:
            return
        at, digest, revisit_digest, depth, simhash, modified_s = _VISIT.unpack_from(visit)
        etag, modified, date, revisit_date = visit[_VISIT.size :].decode().split("\n")
        fp = urls.fingerprint(url)
        plan = revisit_digest == 0 or fp in self._handed_out
        self._handed_out.discard(fp)
        self.waiting.pop(url, None)  # its outcome: no longer out
        self._record(url, status, depth, digest, revisit_digest, revisit_date or None,
                     etag or None, modified or None, date or None, simhash, modified_s, at,
                     plan=plan)  # fmt: skip

    def _record(
        self,
        url: str,
        status: int,
        depth: int,
        digest: int,
        revisit_digest: int,
        revisit_date: str | None,
        etag: str | None,
        modified: str | None,
        date: str | None,
        simhash: int,
        modified_s: float,
        at: float | None = None,
        *,
        plan: bool = True,
    ) -> None:
        counters = self.counters
        if revisit_date is not None:
            counters["revisit.fetched"] += 1
            if status == 304:
                counters["revisit.not_modified"] += 1
            elif revisit_digest != 0 and digest == revisit_digest:
                counters["revisit.unchanged"] += 1
            else:
                counters["revisit.changed"] += 1
        host = urls.host_of(url)
        self.revisits.fetched(
            urls.fingerprint(url),
            url,
            urls.pld(host) if host else "",
            status=status,
            digest=revisit_digest if status == 304 else digest,
            etag=etag,
            last_modified=modified,
            depth=depth,
            date=date,
            simhash=simhash,
            modified_s=modified_s,
            at=at,
            plan=plan,
        )

    def _lastmods(self, found: FoundURLs, lastmods: bytes) -> None:
        """A sitemap's URLs with a ``<lastmod>`` (see queue.base.ItemResult) to the
        history, those of ``found`` only (in a cluster, this partition's)."""
        n = len(lastmods) // 16
        own = np.frombuffer(found.fingerprints, np.uint64)
        if not n or not len(own):
            return
        fps = np.frombuffer(lastmods, np.uint64, n)
        times = np.frombuffer(lastmods, np.float64, n, offset=8 * n)
        order = np.argsort(own, kind="stable")
        at = order[np.minimum(np.searchsorted(own, fps, sorter=order), len(own) - 1)]
        mine = np.flatnonzero((own[at] == fps) & (times > 0))
        if not len(mine):
            return
        payloads = found.payloads_list()
        self.revisits.sitemap_lastmods(
            fps[mine], times[mine], [payloads[i] for i in at[mine].tolist()]
        )
        self.counters["revisit.sitemap_lastmods"] += len(mine)

    def turn(self, now: float, idle: Callable[[], bool]) -> None:
        """At most every ``turn_s``: plan the visits recorded, then hand out what is due.
        ``idle()``: nothing is in flight or queued: the new-URL frontier is done (from
        then on revisits may take all of the fetch rate)."""
        dt = now - self._last_turn
        if dt < self.turn_s:
            return
        self._handed_out.clear()  # the journal's replay, if any, is over
        frontier_empty = self._frontier_done or idle()
        fetches = self.counters.get("fetches", 0)
        if math.isfinite(dt):
            rate = (fetches - self._last_fetches) / dt
            keep = 0.5 ** (dt / RATE_HALF_LIFE_S) if self._rate else 0.0
            self._rate = keep * self._rate + (1 - keep) * rate
            self._best_rate = max(self._best_rate, self._rate)
            # The bucket holds one turn's refill, or a burst of what the manager keeps
            # in flight if that is more: a fast crawl gets its whole share each turn, and
            # tokens unused while nothing is due do not pile up.
            refill = self.settings.revisit_share * rate * dt
            self._tokens = min(self._tokens + refill, max(refill, float(self._burst())))
        self._last_turn, self._last_fetches = now, fetches
        rv = self.revisits
        rv.plan()
        share = 1.0 if frontier_empty else self.settings.revisit_share
        self.policy.bandwidth = max(0.01, share * self._best_rate)
        room = max(0, self.gate.ram_room())
        if frontier_empty:  # as many as the crawl has fetched at its best, or more
            best = 2 * self._best_rate * min(dt, 10 * self.turn_s)
            n = min(room, max(self._burst(), math.ceil(best)))
        else:
            n = min(room, int(self._tokens))
        due = rv.due(n) if n > 0 else []
        self._tokens = max(0.0, self._tokens - len(due))
        for r in due:
            self.waiting[r.url] = r
            self.waiting.move_to_end(r.url)
        if due:
            self.place([encode_payload(r.url, r.depth, None) for r in due])
        while len(self.waiting) > MAX_WAITING:
            self.waiting.popitem(last=False)
        self._note(now, frontier_empty)

    def _burst(self) -> int:
        """The revisits a turn may hand out at once, beyond its share's refill if that
        is less: what the manager keeps in flight (a cluster's sizes it to its fleet)."""
        floor = self.settings.concurrency
        return floor if self.in_flight is None else max(floor, self.in_flight())

    def _note(self, now: float, frontier_empty: bool) -> None:
        """The schedule's figures to the counters (``drumbeat stats``), and the end of
        the new-URL frontier to the log, once."""
        st = self.revisits.stats()
        c = self.counters
        c["revisit.scheduled"] = st.scheduled
        c["revisit.queued"] = st.queued
        c["revisit.lastmod_due"] = st.lastmod_due
        # In basis points: the counters are integers.
        fresh = st.expected_freshness if math.isfinite(st.expected_freshness) else 0.0
        c["revisit.expected_freshness_bp"] = round(10_000 * fresh)
        if frontier_empty and not self._frontier_done and st.recorded:
            wait = max(0.0, self.revisits.next_due_s - now)
            log.info(
                "frontier done; revisiting %d URLs, next due in %s",
                st.queued + len(self.waiting),
                f"{wait:.0f} s" if math.isfinite(wait) else "- (none queued)",
            )
        self._frontier_done = self._frontier_done or frontier_empty

    def summary(self) -> str:
        """The revisits' figures, for the crawl's last log line."""
        self._note(self.clock(), self._frontier_done)
        c = self.counters
        return (
            f"revisits: {c['revisit.fetched']} fetched ({c['revisit.not_modified']} 304s, "
            f"{c['revisit.unchanged']} unchanged 200s, {c['revisit.changed']} changed), "
            f"{c['revisit.queued']} queued, expected freshness "
            f"{c['revisit.expected_freshness_bp'] / 10_000:.3f}"
        )

    def commit(self) -> RevisitsState:
        return self.revisits.commit()

    def saver(self, flying: Iterable[FetchItem]) -> Callable[[Path], None]:
        """A checkpoint saver of ``STATE_FILE`` (a copy taken now): the policy's state
        (:meth:`RevisitPolicy.state`), the best fetch rate seen, and the revisits handed
        out and not recorded (those waiting for dispatch, and the pages of ``flying``,
        the items in flight, that are revisits) as JSON rows [url, site, etag,
        last_modified, depth, digest, date, seq, simhash]. Bounded: the policy's sample and sites,
        MAX_WAITING and the items in flight."""
        policy = self.policy.snapshot()
        best_rate = self._best_rate
        waiting = list(self.waiting.values())  # (frozen: encoded in the writing thread)
        # (Those in flight are in waiting until recorded, unless forgotten.)
        revisits = [
            i
            for i in flying
            if i.kind == PAGE and i.revisit_digest != 0 and i.url not in self.waiting
        ]

        def save(target: Path) -> None:
            rows = [
                [rv.url, rv.site, rv.etag, rv.last_modified, rv.depth, rv.digest, rv.date,
                 rv.seq, rv.simhash]
                for rv in waiting
            ]  # fmt: skip
            for i in revisits:
                host = urls.host_of(i.url)
                site = urls.pld(host) if host else ""
                rows.append([i.url, site, i.etag, i.last_modified, i.depth,
                             i.revisit_digest, i.revisit_date])  # fmt: skip
            arrays = policy()
            arrays["pacing"] = np.array([best_rate])
            arrays["out"] = np.frombuffer(json.dumps(rows).encode(), np.uint8)
            save_npz(target / STATE_FILE, arrays)

        return save

    def load(self, checkpoint: Path) -> None:
        """Take back what :meth:`saver` wrote into ``checkpoint`` (nothing if it did not:
        a checkpoint of an older version); before the journal's :meth:`replay`."""
        try:
            with np.load(checkpoint / STATE_FILE) as z:
                arrays = {k: z[k] for k in z.files}
        except FileNotFoundError:
            return
        self.policy.load_state(arrays)
        (self._best_rate,) = arrays["pacing"].tolist()
        for url, site, etag, modified, depth, digest, date, *more in json.loads(
            arrays["out"].tobytes()
        ):
            fp = urls.fingerprint(url)
            seq, simhash = more if len(more) == 2 else (0, 0)
            self.waiting[url] = Revisit(
                fp, url, site, etag, modified, depth, digest, date, seq, simhash
            )
            self._handed_out.add(fp)

    def close(self) -> None:
        self.revisits.close()


def _http_date_s(value: str | None) -> float:
    """An HTTP date (Last-Modified) in seconds since the epoch; 0.0 for none or a
    malformed one (a server's header must not stop the crawl)."""
    if not value:
        return 0.0
    try:
        when = parsedate_to_datetime(value)
        if when.tzinfo is None:  # no zone given: HTTP dates are GMT
            when = when.replace(tzinfo=UTC)
        return max(when.timestamp(), 0.0)
    except (TypeError, ValueError, IndexError, OverflowError):
        return 0.0


def _payload_date(r: ItemResult, same: bool) -> str | None:
    """The WARC date of the record holding ``r``'s payload, that the next revisit's
    record refers to: the last one's when the payload is the same, the one a
    Duplicates revisit record of the URL refers to, or this fetch's."""
    item, line = r.item, r.log or {}
    if same and item.revisit_date:
        return item.revisit_date
    earlier = line.get("revisit_of_date")
    if line.get("revisit_of") == item.url and isinstance(earlier, str):
        return earlier
    started = line.get("time")
    return warc_date(started) if isinstance(started, float) else None


def _visit_fields(
    r: ItemResult,
) -> tuple[int, int, int, str | None, str | None, str | None, str | None, int, float] | None:
    """What the history records of a result (see :meth:`Revisiting._record`'s
    arguments after the status), or None: not a page fetched for good."""
    item = r.item
    if item.kind != PAGE or r.status is None or retryable(r.status, r.error):
        return None
    same = r.status == 304 or (item.revisit_digest != 0 and r.digest == item.revisit_digest)
    return (
        item.depth,
        r.digest,
        item.revisit_digest,
        item.revisit_date,
        r.etag or item.etag,
        r.last_modified or item.last_modified,
        _payload_date(r, same),
        r.simhash,
        _http_date_s(r.last_modified) if r.status != 304 else 0.0,
    )


def journal_visit(r: ItemResult) -> bytes:
    """What the journal keeps of ``r`` for the history (b"": nothing; see _VISIT).
    Called as the journal writes it: its time is then, on the manager's wall clock as
    the live record's is, later than that by at most a group commit's wait."""
    fields = _visit_fields(r)
    if fields is None:
        return b""
    depth, digest, revisit_digest, revisit_date, etag, modified, date, simhash, modified_s = fields
    at = time.time()
    text = "\n".join((etag or "", modified or "", date or "", revisit_date or ""))
    out = _VISIT.pack(at, digest, revisit_digest, depth, simhash, modified_s) + text.encode()
    return out if len(out) <= _MAX_VISIT else b""
