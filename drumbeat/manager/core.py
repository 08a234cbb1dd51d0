"""The crawl manager's loop: it owns the crawl's parts and drives them in turns."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from time import perf_counter, thread_time

from drumbeat import urls
from drumbeat.fetch.dns import DnsCache
from drumbeat.frontier.urlseen import encode_payload
from drumbeat.manager.controls import BLOCKED
from drumbeat.manager.journal import Journal
from drumbeat.manager.parts import Parts, Shared
from drumbeat.manager.revisiting import Revisiting
from drumbeat.manager.tuning import TUNING, LoopTuning
from drumbeat.queue.base import FoundEdges, FoundURLs, Inbox, ItemResult, ManagerQueue
from drumbeat.runtime.stalls import Stalls
from drumbeat.runtime.wake import Wake
from drumbeat.settings import Settings
from drumbeat.store.crawllog import CrawlLog

log = logging.getLogger("drumbeat.manager")


@dataclass(frozen=True, slots=True)
class ManagerStats:
    pages_done: int
    in_flight: int
    queued: int  # URLs waiting anywhere: RAM, BEAST, QR, robots checks
    queued_ram: int
    hosts: int
    seen: int
    resolving: int
    elapsed_s: float
    counters: dict[str, int]


class Manager:
    """Opens the stores at the live checkpoint (if any) and builds the parts that share
    them (manager.parts, whose fields it binds to attributes once, named alike);
    :meth:`restore` then loads the rest of that checkpoint. It is made in the event loop
    it runs in."""

    def __init__(
        self,
        settings: Settings,
        queue: ManagerQueue,
        crawl_log: CrawlLog,
        *,
        durables: Iterable[Callable[[], None]] = (),
        journal_syncs: Iterable[Callable[[], None]] = (),
        inbox: Inbox | None = None,
        clock: Callable[[], float] = time.monotonic,
        tuning: LoopTuning = TUNING,
    ) -> None:
        """``inbox``: a cluster manager's links from other partitions (queue.base.Inbox);
        with one, the crawl is done when no partition has work left, not this one."""
        state_dir = settings.state_dir
        if state_dir is None:
            raise ValueError("the manager needs a state directory")
        self.settings, self.tuning, self.clock = settings, tuning, clock
        self.queue, self.inbox, self.crawl_log = queue, inbox, crawl_log
        self._wake = Wake()
        # The loop the manager is made and run in: other threads wake it through it.
        self._loop = asyncio.get_running_loop()
        sh = Shared.open(
            settings,
            tuning,
            crawl_log,
            state_dir,
            clock=clock,
            wake=self._wake.set,
            wake_from_thread=self._wake_from_thread,
        )
        self.checkpoints, self.counters, self.stage_s = sh.checkpoints, sh.counters, sh.stage_s
        self._resume_from = sh.resume_from
        self.star, self.scheduler, self.state = sh.star, sh.scheduler, sh.state
        self.pricing, self.drops, self.stores = sh.pricing, sh.drops, sh.stores
        self.history, self.controls, self.scope = sh.history, sh.controls, sh.scope
        self._started = sh.started
        p = Parts.build(
            sh,
            queue,
            crawl_log,
            inbox=inbox,
            durables=list(durables),
            journal_syncs=list(journal_syncs),
            wake=self._wake.set,
        )
        self.gate, self.dispatch, self.revisiting = p.gate, p.dispatch, p.revisiting
        self.admission, self.journal, self.checkpointer = p.admission, p.journal, p.checkpointer
        self.controls.on_unblock = self._lift_block_refusals
        # The loop's long turns (wall time), for the operator and the benchmark.
        self.stalls = Stalls()
        self._last_sweep = self._next_sample = self._started
        self.stop_reason: str | None = None
        self._force_stop = False
        self._collect_busy_s = 0.0  # wall time _collect spent applying results, last call
        self._collector: asyncio.Future[list[ItemResult]] | None = None

    def _lift_block_refusals(self) -> None:
        """A host or PLD block was lifted: the robots refusals it left (Dispatcher._blocked)
        no longer hold for the hosts now free."""
        lifted = self.gate.lift_refusals(BLOCKED, self.controls.blocks.host_blocked)
        log.info("block lifted: %d origins may be fetched again", lifted)

    # -- what other modules read -----------------------------------------------------------

    @property
    def dns(self) -> DnsCache:
        return self.gate.dns

    @property
    def pages_done(self) -> int:
        return self.dispatch.pages_done

    @property
    def seeds(self) -> list[str]:
        return self.pricing.seeds

    # -- lifecycle -------------------------------------------------------------------------

    def restore(self) -> bool:
        """Load the rest of the live checkpoint, if there is one (the stores were opened at
        its commits), and replay the journal's fetches after it (Checkpointer.restore).
        Returns True when resuming."""
        if self._resume_from is None:
            return False  # (a journal follows a checkpoint: Checkpointer.initial)
        self.checkpointer.restore(self._resume_from, self.state)
        return True

    def add_seeds(
        self, seeds: Iterable[str], keep: Callable[[str], bool] | None = None
    ) -> list[str]:
        """Normalize seed URLs and send them to URL-seen; returns "URL: reason" for rejects.

        ``keep``: which normalized seeds this manager crawls (a cluster partition's own);
        all of them still define the crawl's scope and trusted hosts."""
        good: list[str] = []
        rejected: list[str] = []
        for raw in seeds:
            try:
                good.append(urls.normalize(raw, max_bytes=self.settings.max_url_bytes))
            except urls.URLRejected as e:
                self.counters[f"seeds_rejected.{e.reason}"] += 1
                log.warning("seed %r rejected: %s", raw, e.reason)
                rejected.append(f"{raw[:100]!r}: {e.reason}")
        self.pricing.set_seeds(self.seeds + [u for u in good if u not in self.seeds])
        self.admission.admit([u for u in good if keep is None or keep(u)], depth=0, via=None)
        return rejected

    def readmit(self, seeds: Iterable[str]) -> None:
        """Send seeds an earlier run refused past URL-seen (which has seen them) again, their
        origins' refusals expired: this run's DNS and address policy decide (seedrefusals)."""
        for url in seeds:
            self.stores.robots.record_refused(urls.origin_of(url), "readmitted", 0.0)
            self.gate.route(encode_payload(url, 0, None, 0))

    def request_stop(self, reason: str, *, force: bool = False) -> None:
        """Stop dispatching; ``force`` also skips the grace period for in-flight fetches."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self._force_stop = self._force_stop or force
        self._wake.set()

    async def run(self) -> str:
        """Crawl until done, a limit, or request_stop(); checkpoint; return the stop reason."""
        s, t = self.settings, self.tuning
        admission, gate, dispatch, cp = self.admission, self.gate, self.dispatch, self.checkpointer
        deadline = self._started + s.max_time_s if s.max_time_s else None
        journal, controls, revisiting = self.journal, self.controls, self.revisiting
        # What this run starts from (the seeds, or what the last run's checkpoint and
        # journal hold) is durable before the first fetch.
        cp.initial()
        try:
            while self.stop_reason is None:
                now = self.clock()
                if deadline is not None and now >= deadline:
                    self.request_stop("max_time")
                    break
                t0, w0 = thread_time(), perf_counter()
                admission.take_new_urls(now, budget_s=t.place_budget_s)
                w1 = perf_counter()
                gate.feed(now, budget_s=t.route_budget_s)
                if revisiting is not None:
                    revisiting.turn(time.time(), self._idle)
                t1, w2 = thread_time(), perf_counter()
                # The clock read now: with host_connections > 1 a request's start times
                # its host's next one, and placing and routing took part of this turn.
                dispatch.dispatch(self.clock())
                self.stage_s["frontier"] += t1 - t0
                self.stage_s["scheduling"] += thread_time() - t1
                w3 = perf_counter()
                if self._crawl_done():
                    self.request_stop("max_pages" if dispatch.page_limit_reached() else "done")
                    break
                await self._collect(self._wait_time(now, deadline))
                # Hosts the results freed (and hosts whose delay the wait ran out) send their
                # next URL now, not after the next turn's placing and routing.
                t2 = thread_time()
                dispatch.dispatch(self.clock())
                self.stage_s["scheduling"] += thread_time() - t2
                if journal is not None:
                    journal.commit_if_due(now)
                w4 = perf_counter()
                if cp.due(now, asked=controls.checkpoint_requested):
                    controls.checkpoint_started()
                    # The fetchers live on what is in flight while the checkpoint's turn
                    # runs: the slots the collect just freed are filled first.
                    dispatch.dispatch(self.clock())
                    await cp.synced()
                else:
                    cp.presync_if_due(now)
                self._upkeep(now)
                self._note_turn(now, w0, w1, w2, w3, w4)
            await self._drain_in_flight()
        finally:
            self._cancel_waits()
        await self._close(journal, revisiting)
        return self.stop_reason or "done"

    def _upkeep(self, now: float) -> None:
        """A turn's last steps: the scheduler's sweep of idle hosts and the history's
        sample, each when due."""
        if now - self._last_sweep >= self.tuning.host_sweep_interval_s:
            self.scheduler.sweep(now)
            self._last_sweep = now
        if now >= self._next_sample:
            self._sample_history()
            self._next_sample = now + 1.0

    def _note_turn(self, now: float, w0: float, w1: float, w2: float, w3: float, w4: float) -> None:
        """Count a turn that kept the fetchers waiting (see drumbeat.runtime.stalls); one of a
        second or more is logged, as the crawl's pages/s show a dip there. ``w0``..``w4``:
        the wall clock (perf_counter) as run() started placing, feeding, dispatching,
        collecting (its end) and checkpointing."""
        merge_s = self.admission.merge_busy_s
        parts = {
            "merge": merge_s,
            "place": w1 - w0 - merge_s,
            "feed": w2 - w1,
            "dispatch": w3 - w2,
            "collect": self._collect_busy_s,
            "checkpoint+sweep": perf_counter() - w4,
        }
        if self.stalls.turn(now - self._started, parts):
            total = sum(parts.values())
            if total >= 1.0:
                log.info(
                    "manager loop turn took %.2f s: %s",
                    total,
                    ", ".join(f"{k} {v:.2f} s" for k, v in parts.items() if v >= 0.01),
                )

    def _cancel_waits(self) -> None:
        """At the loop's end, however it ended: stop the DNS lookups under way and the
        outstanding collect."""
        for task in self.gate.resolving.values():
            task.cancel()
        if self._collector is not None:
            # Results it may still bring are lost to this run, but their items are
            # still in flight and so saved as queued: they are fetched again later.
            self._collector.cancel()

    async def _close(self, journal: Journal | None, revisiting: Revisiting | None) -> None:
        """After the loop: the last checkpoint (once a periodic one being written is
        written), then the journal and the revisits closed."""
        cp = self.checkpointer
        if cp.writing is not None:
            await cp.writing
        await cp.synced(final=True)
        if journal is not None:
            journal.close()
        if revisiting is not None:
            log.info("%s", revisiting.summary())
            revisiting.close()

    def _sample_history(self) -> None:
        """The totals of drumbeat.stats.HISTORY_SERIES, to the history."""
        c = self.counters
        errors = dropped = 0
        for k, v in c.items():
            if k.startswith("error."):
                errors += v
            elif k.startswith("dropped."):
                dropped += v
        self.history.observe(
            (self.pages_done, c.get("bytes_fetched", 0), c.get("fetches", 0), errors, dropped)
        )

    async def _drain_in_flight(self) -> None:
        """After a stop: let in-flight fetches finish for a short grace period."""
        end = self.clock() + min(self.settings.total_timeout_s, 10.0)
        while self.dispatch.in_flight and self.clock() < end and not self._force_stop:
            await self._collect(min(0.2, max(0.0, end - self.clock())))

    def _crawl_done(self) -> bool:
        """This manager's work is done and, in a cluster, every other partition's too."""
        finished = self.finished()
        if self.inbox is None or self.dispatch.page_limit_reached():
            return finished
        return self.inbox.idle(finished)

    def finished(self) -> bool:
        """Nothing is in flight and nothing is left to fetch anywhere (or the page limit
        is reached)."""
        if self.dispatch.in_flight:
            return False
        if self.dispatch.page_limit_reached():
            return True
        if self.revisiting is not None:
            return False  # a crawl with revisits never runs out of work
        return self._nothing_queued()

    def _idle(self) -> bool:
        """Nothing is in flight or queued (revisits aside, the frontier is done)."""
        return not self.dispatch.in_flight and self._nothing_queued()

    def _nothing_queued(self) -> bool:
        """No URL waits anywhere: URL-seen, BEAST, robots checks, QR, the scheduler."""
        st, gate = self.stores, self.gate
        return not (
            gate.resolving
            or st.seen.pending
            or st.seen.busy
            or self.admission.new_urls is not None
            or gate.to_route
            or st.robots.pending
            or gate.checking
            or self.scheduler.queued_urls
            or len(st.beast)
            or len(st.qr)
            or len(st.qr_retry)
            or len(st.robots_todo)
            or st.qr.working_origins()
        )

    def _wake_from_thread(self) -> None:
        """Wake the loop from another thread: a URL-seen round has merged, and the new
        URLs it found may be all the fetchers wait for (a crawl's start, one site)."""
        with contextlib.suppress(RuntimeError):  # the loop has closed
            self._loop.call_soon_threadsafe(self._wake.set)

    def _wait_time(self, now: float, deadline: float | None) -> float:
        """How long a turn waits for results: until the next host is due, the robots
        checks are to be flushed, or at most 0.25 s (a merge round's end, a result, an
        operator's change or a DNS answer wake it sooner)."""
        wait = 0.25
        robots_due = self.gate.robots_due_s(now)
        if robots_due is not None:
            wait = min(wait, robots_due)
        due = self.scheduler.next_due_time()
        controls = self.controls
        if controls.speed is not None and (token_s := controls.speed.wait_s(now)) > 0:
            wait = min(wait, token_s)
        if (
            not controls.paused
            and due is not None
            and len(self.dispatch.in_flight) < self.dispatch.limit
            and not self.dispatch.page_limit_reached()
        ):
            wait = min(wait, max(0.0, due - now))
        if deadline is not None:
            wait = min(wait, max(0.0, deadline - now))
        return wait

    async def _collect(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for results (or a DNS answer / stop request) and apply them.

        One collect() call stays outstanding across iterations and is never cancelled: a
        cancelled collect can have taken results off the queue already (asyncio.wait_for
        may swallow the cancel and return them to nobody).
        """
        if self._collector is None:
            self._collector = asyncio.ensure_future(self.queue.collect(4096, 1.0))
        if timeout_s > 0 and not self._wake.is_set() and not self._collector.done():
            await self._wake.wait(timeout_s, self._collector)
        else:
            await asyncio.sleep(0)  # always let fetchers and DNS answers run
        self._wake.clear()
        self._collect_busy_s = 0.0
        if not self._collector.done():
            return
        results, self._collector = self._collector.result(), None
        now = self.clock()
        if any(r.fetch_ended for r in results):
            on_ended = self.dispatch.on_fetch_ended
            for r in results:
                if r.fetch_ended:
                    on_ended(r, now)
            results = [r for r in results if not r.fetch_ended]
        started, wall = thread_time(), perf_counter()
        for r in results:
            if r.log is not None:
                self.crawl_log.append(r.log)
        logged = thread_time()
        found: list[FoundURLs] = []
        edges: list[FoundEdges] = []
        on_result = self.dispatch.on_result
        for r in results:
            on_result(r, now, found, edges)
        if self.revisiting is not None:
            self.revisiting.record(results)
        if self.inbox is not None:
            more_found, more_edges = self.inbox.take()
            found += more_found
            edges += more_edges
            if self.journal is not None:
                self.journal.note_forwarded(more_found, more_edges)
        if self.journal is not None:
            self.journal.note(results)
        self.admission.add_edges(edges)
        applied = thread_time()
        if found:
            journal = self.journal
            sent = journal.note_links if journal is not None and journal.links_apart else None
            self.admission.admit_found(found, sent)
        self.stage_s["crawl_log"] += logged - started
        self.stage_s["results"] += applied - logged
        self.stage_s["urlseen"] += thread_time() - applied
        self._collect_busy_s = perf_counter() - wall

    def stats(self) -> ManagerStats:
        st, gate = self.stores, self.gate
        ram = self.scheduler.queued_urls + len(gate.to_route)
        disk = gate.checking + len(st.beast) + len(st.qr) + len(st.qr_retry)
        return ManagerStats(
            pages_done=self.pages_done,
            in_flight=len(self.dispatch.in_flight),
            queued=ram + disk,
            queued_ram=ram,
            hosts=len(self.scheduler.hosts),
            seen=len(st.seen),
            resolving=len(gate.resolving),
            elapsed_s=self.clock() - self._started,
            counters=dict(self.counters),
        )
