"""Revisits in the crawl (``Settings.revisit``, ``crawl --revisit``): each page fetched
goes to the revisit schedule (drumbeat.revisit.revisits), and what falls due enters the
politeness scheduler as a new page does, carrying its validators for a conditional GET.

Where revisits enter: past URL-seen (a revisited URL is seen already) and BEAST (STAR's
budgets ration the *new* URLs of a PLD), at the robots gate's ``route``, as the URLs of
a checkpoint's RAM do: robots rules, the host's and IP's politeness delays (scaled by
the PLD's budget), the operator's blocks and the scope's dispatch rules (blocklist,
caps) apply to them as to any page.

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

After a crash: a checkpoint holds the history and the due-time queue as of its commit.
The journal replays the fetches made since (URL-seen, the done set, the counts), but
not their visits to the history: the pages first fetched since the last checkpoint
are not revisited, and the revisits made since count as not made (they are due again,
and fetched again at once). Neither loses a URL of the crawl, only some freshness.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from datetime import UTC
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import numpy as np

from drumbeat import urls
from drumbeat.frontier.backoff import retryable
from drumbeat.frontier.urlseen import encode_payload
from drumbeat.manager.gate import RobotsGate
from drumbeat.queue.base import PAGE, FetchItem, FoundURLs, ItemResult
from drumbeat.revisit.policy import RevisitPolicy
from drumbeat.revisit.revisits import Revisit, Revisits
from drumbeat.settings import Settings
from drumbeat.store.warc import warc_date

log = logging.getLogger("drumbeat.manager")

DIR_NAME = "revisits"
# Plan and hand out revisits at most this often (a DRUM merge each), or twice per
# shortest revisit interval where that is shorter.
TURN_S = 1.0
RATE_HALF_LIFE_S = 10.0  # of the recent fetch rate's moving average
MAX_WAITING = 100_000  # revisits handed out and not yet dispatched, validators kept


class Revisiting:
    """The manager's side of the crawl's revisits (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        state_dir: Path,
        saved: dict[str, Any] | None,
        gate: RobotsGate,
        counters: Counter[str],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``saved``: the checkpoint's commit of the revisits (None: none yet). The
        clock is wall time: a resumed crawl's due times are the last run's."""
        s = self.settings = settings
        self.gate = gate
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
        # Revisits on their way to the fetchers, by URL: their FetchItems get the
        # validators at dispatch (Dispatcher.revisit_of). One that never gets there
        # (robots, a refused host) is forgotten, oldest first, past MAX_WAITING.
        self.waiting: OrderedDict[str, Revisit] = OrderedDict()
        self.turn_s = min(TURN_S, s.revisit_min_interval_s / 2)
        self._last_turn = -math.inf
        self._last_fetches = counters.get("fetches", 0)
        self._rate = 0.0  # fetches a second, moving average
        self._best_rate = 0.0
        self._tokens = 0.0
        self._frontier_done = False

    def on_item(self, item: FetchItem) -> None:
        """A page leaves for the fetchers: a revisit's carries its validators."""
        rv = self.waiting.pop(item.url, None)
        if rv is not None:
            item.etag, item.last_modified = rv.etag, rv.last_modified
            item.revisit_digest, item.revisit_date = rv.digest, rv.date

    def record(self, results: list[ItemResult]) -> None:
        """Each page fetched (that is not retried) to the history."""
        fetched, counters = self.revisits.fetched, self.counters
        for r in results:
            item = r.item
            if item.kind != PAGE or r.status is None or retryable(r.status, r.error):
                continue
            same = r.status == 304 or (item.revisit_digest != 0 and r.digest == item.revisit_digest)
            if item.revisit_date is not None:
                counters["revisit.fetched"] += 1
                if r.status == 304:
                    counters["revisit.not_modified"] += 1
                elif same:
                    counters["revisit.unchanged"] += 1
                else:
                    counters["revisit.changed"] += 1
            if r.lastmods is not None and r.found is not None:
                self._lastmods(r.found, r.lastmods)
            host = urls.host_of(item.url)
            fetched(
                urls.fingerprint(item.url),
                item.url,
                urls.pld(host) if host else "",
                status=r.status,
                digest=item.revisit_digest if r.status == 304 else r.digest,
                etag=r.etag or item.etag,
                last_modified=r.last_modified or item.last_modified,
                depth=item.depth,
                date=_payload_date(r, same),
                simhash=r.simhash,
                modified_s=_http_date_s(r.last_modified) if r.status != 304 else 0.0,
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
        frontier_empty = self._frontier_done or idle()
        fetches = self.counters.get("fetches", 0)
        if math.isfinite(dt):
            rate = (fetches - self._last_fetches) / dt
            keep = 0.5 ** (dt / RATE_HALF_LIFE_S) if self._rate else 0.0
            self._rate = keep * self._rate + (1 - keep) * rate
            self._best_rate = max(self._best_rate, self._rate)
            self._tokens = min(
                self._tokens + self.settings.revisit_share * rate * dt,
                float(self.settings.concurrency),
            )
        self._last_turn, self._last_fetches = now, fetches
        rv = self.revisits
        rv.plan()
        share = 1.0 if frontier_empty else self.settings.revisit_share
        self.policy.bandwidth = max(0.01, share * self._best_rate)
        room = max(0, self.gate.ram_room())
        if frontier_empty:  # as many as the crawl has fetched at its best, or more
            best = 2 * self._best_rate * min(dt, 10 * self.turn_s)
            n = min(room, max(self.settings.concurrency, math.ceil(best)))
        else:
            n = min(room, int(self._tokens))
        due = rv.due(n) if n > 0 else []
        self._tokens = max(0.0, self._tokens - len(due))
        for r in due:
            self.waiting[r.url] = r
            self.waiting.move_to_end(r.url)
            self.gate.route(encode_payload(r.url, r.depth, None))
        while len(self.waiting) > MAX_WAITING:
            self.waiting.popitem(last=False)
        self._note(now, frontier_empty)

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

    def commit(self) -> dict[str, Any]:
        return self.revisits.commit()

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
