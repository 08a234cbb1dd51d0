"""Admission: URLs found go through URL-seen (DRUM); those it finds new get their STAR
budget and a place in BEAST's queues on disk. It also steps the PLD graph whose
in-degrees STAR's budgets follow."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from itertools import islice
from time import perf_counter, thread_time
from typing import TypeVar

import numpy as np

from drumbeat import urls
from drumbeat.frontier.politeness import PolitenessScheduler
from drumbeat.frontier.scope import MAX_DEPTH, Scope
from drumbeat.frontier.urlseen import Sent, encode_payloads, payload_url
from drumbeat.manager.gate import RobotsGate
from drumbeat.manager.pricing import Pricing
from drumbeat.manager.state import LoopState
from drumbeat.manager.stores import Stores
from drumbeat.manager.tuning import LoopTuning
from drumbeat.queue.base import FoundEdges, FoundURLs
from drumbeat.settings import Settings

_T = TypeVar("_T")
# The links of a scoped crawl mostly stay on a few hosts: a link that starts with one of
# these in-scope "scheme://authority/" prefixes is in the scope too, which one
# bytes.startswith per link tells.
_INSIDE_PREFIXES = 8


class Admission:
    def __init__(
        self,
        settings: Settings,
        tuning: LoopTuning,
        stores: Stores,
        pricing: Pricing,
        scheduler: PolitenessScheduler,
        gate: RobotsGate,
        state: LoopState,
        counters: Counter[str],
        stage_s: defaultdict[str, float],
        started: float,
        scope: Scope | None = None,
    ) -> None:
        """``scope``: the scope rules beyond ``settings.scope`` (none by default)."""
        self.settings = settings
        self.scope = scope = Scope(settings) if scope is None else scope
        # What admission asks of the rules, bound once (a crawl without rules: nothing).
        self._max_depth = scope.max_depth
        self._link_reason = scope.link_reason if scope.per_link else None
        self.tuning = tuning
        self.seen = stores.seen
        self.plds = stores.plds
        self.beast = stores.beast
        # The crawl order's policy, when it learns from the links found (frontier.order).
        order = stores.beast.order
        self._order_links = order.links_of_pages if order.observes_links else None
        self._focus = order if order.focused else None
        self.pricing = pricing
        self.scheduler = scheduler
        self.gate = gate
        self.state = state
        self.counters = counters
        self.stage_s = stage_s
        self._last_seen_flush = float("-inf")  # the seeds are merged at once
        self.last_pld_flush = started
        # URL-seen's new URLs being placed, when a turn's budget ran out (see
        # LoopTuning.place_budget_s).
        self.new_urls: Iterator[bytes] | None = None
        self.merge_busy_s = 0.0  # wall time of take_new_urls's DRUM merges, last call
        # Prefixes of links in the scope, and the seed hosts they were decided for.
        self._inside: tuple[bytes, ...] = ()
        self._inside_of: frozenset[str] | None = None

    def admit(self, candidates: list[str], depth: int, via: str | None) -> int:
        """Send in-scope URLs to URL-seen; new ones reach BEAST via take_new_urls. Seeds
        (``via`` None) are exempt from the scope rules (frontier.scope), not from
        ``settings.scope``.

        Returns the number of URLs submitted.
        """
        if self.settings.scope != "any":
            candidates = [u for u in candidates if self._in_scope(u)]
        if via is not None:
            if self._max_depth is not None and depth > self._max_depth:
                self.counters[f"links_dropped.{MAX_DEPTH}"] += len(candidates)
                candidates = []
            if self._link_reason is not None:
                candidates = [u for u in candidates if self._within_rules(u)]
        started = thread_time()
        n = len(candidates)
        self.counters["urlseen_cache_hits"] += self.seen.submit(
            [urls.fingerprint(u) for u in candidates],
            encode_payloads(candidates, [depth] * n, [via] * n),
        )
        self.stage_s["urlseen"] += thread_time() - started
        return len(candidates)

    def _in_scope(self, url: str) -> bool:
        if self._host_in_scope(url):
            return True
        self.counters["links_dropped.scope"] += 1
        return False

    def _host_in_scope(self, url: str) -> bool:
        p = self.pricing
        return urls.in_scope(urls.host_of(url), self.settings.scope, p.seed_hosts, p.seed_plds)

    def _within_rules(self, url: str) -> bool:
        reason = self._link_reason(url) if self._link_reason is not None else None
        if reason is None:
            return True
        self.counters[f"links_dropped.{reason}"] += 1
        return False

    def _within_depth(self, found: list[FoundURLs], max_depth: int) -> list[FoundURLs]:
        """The batches of links not deeper than ``max_depth``: the links of one fetch share
        their depth (fetcher_links.pack_found), so one payload tells for the whole batch."""
        kept = []
        for f in found:
            lengths = memoryview(f.lengths).cast("I")
            if not len(lengths):
                continue
            if int(f.payloads[: lengths[0]].split(b"\n", 2)[1]) <= max_depth:
                kept.append(f)
            else:
                self.counters[f"links_dropped.{MAX_DEPTH}"] += len(lengths)
        return kept

    def admit_found(self, found: list[FoundURLs], sent: Sent | None = None) -> None:
        """Send the URLs fetchers found to URL-seen in one batch (scoped crawls drop those
        outside the scope first, and the scope rules theirs). ``sent``: told the URLs that
        went on past URL-seen's cache (:meth:`DrumURLSeen.submit`)."""
        if self._max_depth is not None:
            found = self._within_depth(found, self._max_depth)
            if not found:
                return
        if self._order_links is not None:
            self._observe_links(found, self._order_links)
        fingerprints = b"".join(f.fingerprints for f in found)
        payloads = b"".join(f.payloads for f in found)
        lengths = b"".join(f.lengths for f in found)
        within_rules = self._within_rules if self._link_reason is not None else None
        if self.settings.scope != "any" or within_rules is not None:
            fingerprints, payloads, lengths, known = self._admissible(
                fingerprints, payloads, lengths, within_rules
            )
            self.counters["urlseen_cache_hits"] += known
        self.counters["urlseen_cache_hits"] += self.seen.submit_packed(
            fingerprints, payloads, lengths, sent
        )

    def _admissible(
        self,
        fingerprints: bytes,
        payloads: bytes,
        lengths: bytes,
        within_rules: Callable[[str], bool] | None,
    ) -> tuple[bytes, bytes, bytes, int]:
        """The packed links (as FoundURLs packs them) less those outside the scope or its
        rules, and how many URL-seen's cache dropped before the scope was asked.

        A link the cache holds was sent to URL-seen lately, so it passed the scope then
        and would be dropped as seen now: most links of a scoped crawl are of those, and
        only the others are looked at one by one. Whether a link is in the scope depends
        on its host alone, so it is decided once per scheme and authority (``verdicts``,
        for one call: a page's links mostly share one or a few), from the payload's
        bytes; only the rules, when there are any, look at each URL. A link that starts
        with an authority already found in the scope (:meth:`_inside_prefixes`) is in
        it."""
        sizes = np.frombuffer(lengths, np.uint32)
        ends = np.cumsum(sizes, dtype=np.int64)
        starts = ends - sizes
        todo = np.flatnonzero(~self.seen.known(np.frombuffer(fingerprints, np.uint64)))
        known = len(sizes) - len(todo)
        blob = payloads
        keep: list[int] = todo.tolist()
        if self.settings.scope != "any":
            inside = self._inside_prefixes()
            verdicts: dict[bytes, bool] = {}
            keep = [
                i
                for i, start in zip(keep, starts[todo].tolist())
                if blob.startswith(inside, start) or self._payload_in_scope(blob, start, verdicts)
            ]
        if within_rules is not None:
            keep = [i for i in keep if within_rules(payload_url(blob[starts[i] : ends[i]]))]
        if len(keep) == len(sizes):
            return fingerprints, payloads, lengths, known
        kept = np.array(keep, np.int64)
        return (
            np.frombuffer(fingerprints, np.uint64)[kept].tobytes(),
            b"".join([blob[starts[i] : ends[i]] for i in keep]),
            sizes[kept].tobytes(),
            known,
        )

    def _payload_in_scope(self, blob: bytes, start: int, verdicts: dict[bytes, bool]) -> bool:
        """Whether the link whose payload starts at ``start`` in ``blob`` is in the scope
        (see :meth:`_admissible`); one out of it is counted."""
        # A normalized http(s) URL has a path: its authority ends at that "/" (anything
        # else is its own key: the URL's host still decides).
        end = blob.index(b"\n", start)
        path = blob.find(b"/", start + 8, end)
        authority = blob[start : path if path >= 0 else end]
        verdict = verdicts.get(authority)
        if verdict is None:
            verdict = verdicts[authority] = self._host_in_scope(blob[start:end].decode())
            if verdict and path >= 0 and len(self._inside) < _INSIDE_PREFIXES:
                self._inside += (authority + b"/",)
        if not verdict:
            self.counters["links_dropped.scope"] += 1
        return verdict

    def _inside_prefixes(self) -> tuple[bytes, ...]:
        """The "scheme://authority/" of up to _INSIDE_PREFIXES authorities found in the
        scope, while the seeds that decide it stay the same."""
        seeds = self.pricing.seed_hosts
        if self._inside_of is not seeds:
            self._inside, self._inside_of = (), seeds
        return self._inside

    @staticmethod
    def _observe_links(
        found: list[FoundURLs], links: Callable[[np.ndarray, np.ndarray, np.ndarray], None]
    ) -> None:
        """Tell the crawl order each page's links, all in one call (a page: the via of
        its links)."""
        found = [f for f in found if len(f)]
        if not found:
            return
        vias = [f.payloads[: memoryview(f.lengths).cast("I")[0]].split(b"\n", 3)[2] for f in found]
        links(
            np.frombuffer(urls.xxh3_64_array(vias), np.uint64),
            np.frombuffer(b"".join(f.fingerprints for f in found), np.uint64),
            np.array([len(f) for f in found], np.int64),
        )

    def focus_links(self, found: FoundURLs, score: float) -> None:
        """A page's links and its focus score (fetcher), for a focused crawl order."""
        if self._focus is not None:
            self._focus.links(0, np.frombuffer(found.fingerprints, np.uint64), score)

    def frontier_short(self) -> bool:
        """Fetch slots are idle because no host in RAM is ready (Polybot: load more when
        fewer than H hosts are ready), and BEAST has nothing more to give (now: a paced
        turn holds the next queues back, and new URLs should be placed before it ends)."""
        return (
            self.state.slots_idle
            and not self.gate.to_route
            and (
                len(self.beast) == 0
                or self.beast.holding
                or self.scheduler.queued_urls >= self.settings.frontier_ram_urls // 2
            )
        )

    def frontier_low(self) -> bool:
        """BEAST is empty and the scheduler's RAM has fallen to half of
        ``frontier_ram_urls``: the fetchers are still busy, but only with what RAM holds.

        URL-seen's pending URLs should be merged now rather than when the fetchers run
        dry. From a merge to the first page of a new host there are robots checks and a
        robots.txt fetch; a merge that waits for idle slots can deliver the URLs of
        thousands of new hosts at once, and the crawl stalls while they are checked
        (docs/benchmarks.md)."""
        return len(self.beast) == 0 and self.gate.ram_room() >= self.settings.frontier_ram_urls // 2

    def frontier_dry(self) -> bool:
        """BEAST is empty, nothing waits to be routed, and the scheduler's RAM holds fewer
        URLs than there are fetch slots: what URL-seen holds is all the crawl has left to
        fill them with."""
        # Asked at every turn while URL-seen holds URLs: the cheapest test first (a broad
        # crawl's RAM holds far more than its slots; BEAST's length sums its queues').
        return (
            self.scheduler.queued_urls < self.state.fetch_slots
            and not self.gate.to_route
            and len(self.beast) == 0
        )

    def seen_merge_due(self, now: float) -> bool:
        """URL-seen's part-filled buffers are to be merged now (see take_new_urls)."""
        return self._seen_merge_counter(now) is not None

    def _seen_merge_counter(self, now: float) -> str | None:
        """The counter of the merge due now (see seen_merge_due), None if none is."""
        if not self.seen.pending:
            return None
        since = now - self._last_seen_flush
        if self.frontier_dry():
            wait = min(
                self.settings.urlseen_flush_interval_s,
                self.seen.last_round_s / self.tuning.dry_seen_merge_share,
            )
            return "urlseen_merges_dry" if since >= wait else None
        if since < self.settings.urlseen_flush_interval_s:
            return None
        if self.frontier_short() or (
            self.frontier_low()
            and since >= self.seen.last_round_s / self.tuning.early_seen_merge_share
        ):
            return "urlseen_merges_forced"
        return None

    def take_new_urls(self, now: float, budget_s: float | None = None) -> None:
        """Move URLs that URL-seen found new into BEAST with their STAR budget.

        DRUM merges by itself when its buffers fill (the cheap, sequential case IRLbot
        designs for). A merge of a part-filled buffer costs a pass over every bucket, so
        it is forced only when the frontier runs short of URLs, at most once per
        ``urlseen_flush_interval_s``, or runs low (BEAST empty, RAM half empty), at most
        ``early_seen_merge_share`` of the time: small crawls and crawl ends then do not
        wait for full buffers, and large crawls, whose BEAST is never empty, never pay
        for it. URL-seen's rounds, forced or not, run in the background: their new URLs
        come out of ``take_new`` in a later turn, and the time share counts the last
        round's wall time.

        With ``budget_s``, placing stops once that much time has passed (after a whole
        batch) and goes on in the next call, from the same point of URL-seen's delivery,
        and it takes at most ``place_share`` of the time; a re-split of BEAST's QF under
        way is stepped first, so that QF's URLs keep their places before new ones.
        Without it, every URL found new so far is placed.
        """
        seen, beast = self.seen, self.beast
        started = perf_counter()
        merge = self._seen_merge_counter(now)
        if merge is not None:
            self.counters[merge] += 1
            seen.flush(wait=False)  # its new URLs come out of take_new once it is done
            self._last_seen_flush = now
        self.counting_edges(lambda: self._step_pld_graph(now))
        self.merge_busy_s = perf_counter() - started
        if self.new_urls is None:
            self.new_urls = seen.take_new()
        stop = None
        placing = self.state.placing
        if budget_s is not None:
            granted = placing.allowance(budget_s, full_speed=not len(beast))
            if granted is None:
                return  # placing has had its share of the time
            stop = time.perf_counter() + granted
        batch = self.tuning.place_batch_urls
        try:
            # QF's URLs being placed again come before new ones (BEAST's order).
            while stop is not None and beast.resplitting:
                beast.resplit_step()
                if time.perf_counter() >= stop:
                    return  # the rest in the next turn
            while True:
                records = list(islice(self.new_urls, batch))
                self.place(records)
                if len(records) < batch:
                    break
                if stop is not None and time.perf_counter() >= stop:
                    return  # the rest in the next turn
            self.new_urls = None
        finally:
            if stop is not None:
                placing.spent()

    def _step_pld_graph(self, now: float) -> None:
        """Refresh the budgets when due (the edges merge in the background: budgets
        follow the in-degrees pumped so far), and move the new edges of the rounds that
        ended into the in-degrees, ``pump_budget_s`` at a time."""
        plds = self.plds
        if now - self.last_pld_flush >= max(
            self.settings.budget_refresh_s, plds.last_round_s / self.tuning.forced_pld_merge_share
        ):
            plds.refresh()
            self.last_pld_flush = now
        plds.pump(budget_s=self.tuning.pump_budget_s)

    def add_edges(self, edges: list[FoundEdges]) -> None:
        """The PLD edges fetchers found (or the journal replays), to the PLD graph."""
        if edges:
            self.plds.add_packed(
                b"".join(e.keys for e in edges),
                b"".join(e.targets for e in edges),
                b"".join(e.lengths for e in edges),
            )

    def counting_edges(self, step: Callable[[], _T]) -> _T:
        """``step()`` on the PLD graph, its newly moved edges counted in pld_edges_new."""
        before = self.plds.new_edges
        result = step()
        self.counters["pld_edges_new"] += self.plds.new_edges - before
        return result

    def place(self, records: list[bytes]) -> None:
        """Give URLs their STAR budget and put them into BEAST (whose ``admit`` is
        :func:`drumbeat.manager.gate.robots_admitter`)."""
        if not records:
            return
        self.beast.place_many(records, *self.pricing.places(records))
        self.counters["urls_admitted"] += len(records)
