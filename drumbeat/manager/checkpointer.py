"""The checkpointer: commits every store and saves what the manager holds in RAM, at
``checkpoint_interval_s`` and at the end (see ``drumbeat.checkpoint``); at a restart it
loads the live checkpoint back and replays the journal's fetches after it
(:meth:`Checkpointer.restore`): what a checkpoint holds is read next to where it is
written."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from pathlib import Path
from time import perf_counter
from typing import Any, TypeVar

from drumbeat import urls
from drumbeat.checkpoint import CheckpointMeta, Checkpoints
from drumbeat.frontier.politeness import PolitenessScheduler, QueuedURL
from drumbeat.frontier.scope import save_counts
from drumbeat.frontier.star import Star
from drumbeat.frontier.urlseen import decode_payload, encode_payload
from drumbeat.manager.admission import Admission
from drumbeat.manager.dispatch import Dispatcher
from drumbeat.manager.gate import RobotsGate
from drumbeat.manager.journal import DIR_NAME as JOURNAL_DIR
from drumbeat.manager.journal import (
    Journal,
    count_entry,
    load_done,
    replay_entries,
    save_done,
)
from drumbeat.manager.pricing import Pricing
from drumbeat.manager.revisiting import Revisiting
from drumbeat.manager.state import LoopState
from drumbeat.manager.stores import FrontierState, Stores
from drumbeat.manager.tuning import LoopTuning
from drumbeat.queue.base import PAGE, FetchItem, FoundEdges, FoundURLs, Inbox, ManagerQueue
from drumbeat.settings import Settings
from drumbeat.stats import History
from drumbeat.store.crawllog import CrawlLog
from drumbeat.store.durable import deferring_fsyncs, sync_filesystem

log = logging.getLogger("drumbeat.manager")
_T = TypeVar("_T")


class Checkpointer:
    def __init__(
        self,
        settings: Settings,
        tuning: LoopTuning,
        checkpoints: Checkpoints,
        state_dir: Path,
        *,
        queue: ManagerQueue,
        durables: list[Callable[[], None]],
        crawl_log: CrawlLog,
        stores: Stores,
        gate: RobotsGate,
        admission: Admission,
        pricing: Pricing,
        dispatch: Dispatcher,
        scheduler: PolitenessScheduler,
        star: Star,
        counters: Counter[str],
        clock: Callable[[], float],
        started: float,
        journal: Journal | None = None,
        inbox: Inbox | None = None,
        history: History | None = None,
        revisiting: Revisiting | None = None,
    ) -> None:
        self.settings = settings
        self.tuning = tuning
        self.state_dir = state_dir
        self.checkpoints = checkpoints
        self.queue = queue
        self.durables = durables  # flushed + fsynced before each checkpoint (WARC, logs)
        self.crawl_log = crawl_log
        self.stores = stores
        self.gate = gate
        self.admission = admission
        self.pricing = pricing
        self.dispatch = dispatch
        self.scheduler = scheduler
        self.star = star
        self.counters = counters
        self.clock = clock
        self.journal = journal
        # A cluster manager's forwarded links: those taken before a checkpoint's commit are
        # acknowledged once it is live (_went_live).
        self.inbox = inbox
        self.history = history  # saved into each checkpoint (the dashboard's rings)
        self.revisiting = revisiting  # its history and due-time queue committed with the rest
        self._writing_mark = 0
        self.last_checkpoint = started
        self.presync: asyncio.Future[None] | None = None  # see presync_if_due
        # A checkpoint's files being written in a thread (see synced_checkpoint).
        self.writing: asyncio.Future[Path] | None = None
        self._presynced_for = float("-inf")  # the checkpoint time it was last started for

    def due(self, now: float, *, asked: bool = False) -> bool:
        """Whether to checkpoint now: the interval has passed (or one was ``asked`` for),
        and the last checkpoint's files have been written (a write that failed fails the
        crawl here, as it would have in the loop)."""
        writing = self.writing
        if writing is not None:
            if not writing.done():
                return False
            self.writing = None
            writing.result()
            self._went_live(self._writing_mark)
        return asked or now >= self.last_checkpoint + self.settings.checkpoint_interval_s

    def presync_if_due(self, now: float) -> None:
        """``presync_lead_s`` before a checkpoint falls due, start writing out the dirty
        data of the state directory's filesystem in a thread
        (store.durable.sync_filesystem): once per checkpoint, never while the last one
        runs, and only where checkpoints are at least twice that far apart (more often,
        little is dirty).

        The checkpoint still fsyncs every file it relies on; what it saves is the wait
        (docs/benchmarks.md).
        """
        lead = self.tuning.presync_lead_s
        interval = self.settings.checkpoint_interval_s
        due = self.last_checkpoint + interval
        if (
            interval < 2 * lead
            or now < due - lead
            or self._presynced_for == due
            or (self.presync is not None and not self.presync.done())
        ):
            return
        self._presynced_for = due
        self.presync = asyncio.get_running_loop().run_in_executor(
            None, sync_filesystem, self.state_dir
        )
        self.presync.add_done_callback(_presync_done)

    async def synced(self, *, final: bool = False) -> None:
        """Checkpoint once the fetchers confirm their WARC records are durable.

        A checkpoint counts every collected result as done, so the records behind those
        results must be on disk first. If a fetcher does not confirm, a periodic
        checkpoint waits for the next interval; the last one is written regardless
        (losing the crawl state would cost more than a few unconfirmed records).

        The commits are made here, in the loop; a periodic checkpoint's files (the URLs
        in RAM, STAR's table, the state) are then written in a thread while the crawl
        goes on. The checkpoint goes live once they are written; until then the one
        before it is live, and its commits stay reopenable (every store keeps its last
        two), as no other checkpoint starts before this one is written.
        """
        laps = Laps()
        journal = self.journal
        if journal is not None:
            # One WARC sync at a time; at a stop, what the journal holds no longer waits
            # on this checkpoint going live.
            await (journal.commit_now() if final else journal.settle())
            laps.lap("journal")
        if not await self.queue.sync():
            log.warning(
                "fetchers did not confirm their WARC files are synced%s",
                "; checkpointing anyway at stop" if final else "; checkpoint postponed",
            )
            if not final:
                self.last_checkpoint = self.clock()
                return
        laps.lap("warc sync")
        if final:
            # Every edge found goes into the PLD graph (and its count), however the
            # background merges fell: a crawl's pld_edges_new is its distinct edges.
            self.admission.counting_edges(self.stores.plds.flush)
        mark = self.inbox.mark() if self.inbox is not None else 0
        write = self.commit(laps)
        if final:
            write()
            self._went_live(mark)
        else:
            self._writing_mark = mark
            self.writing = asyncio.get_running_loop().run_in_executor(None, write)

    def _went_live(self, mark: int) -> None:
        """A checkpoint committed at inbox position ``mark`` is live."""
        if self.inbox is not None:
            self.inbox.acknowledge(mark)

    def initial(self) -> None:
        """At a run's start, before the first fetch: a checkpoint of what the run starts
        from (its seeds, or what the last run's checkpoint and journal held), and a new
        journal after it."""
        mark = self.inbox.mark() if self.inbox is not None else 0
        path = self.commit(Laps())()
        self._went_live(mark)
        if self.journal is not None:
            self.journal.start(self.checkpoints.number(path))

    def restore(self, path: Path, state: LoopState) -> None:
        """Load the rest of the live checkpoint ``path`` (the stores were opened at its
        commits), then replay the journal's fetches after it; ``state.resumed_at`` is when:
        the hosts are due no earlier than a delay after it."""
        meta = self.checkpoints.read_meta(path)
        self.star.load(path)
        if self.history is not None:
            self.history.load(path)
        self.counters.update(meta.counters)
        self.dispatch.pages_done = meta.pages_done
        self.dispatch.next_item_id = meta.next_item_id
        self.pricing.set_seeds(meta.seeds)
        # The previous run may have hit any host just before it stopped.
        state.resumed_at = self.clock()
        self.scheduler.start_no_earlier_than(
            state.resumed_at + max(self.settings.host_delay_s, self.settings.ip_delay_s)
        )
        st, gate = self.stores, self.gate
        gate.robots_failures = dict((meta.frontier or {}).get("robots_failures", {}))
        for origin in (meta.frontier or {}).get("robots_working", []):
            gate.work_on_robots(origin, st.qr.issue())
        gate.done |= load_done(path)
        if self.revisiting is not None:
            self.revisiting.load(path)
        replayed = self._replay_journal(self.checkpoints.number(path))
        n = 0
        for url, depth, via, hops in self.checkpoints.read_queue(path):
            gate.route(encode_payload(url, depth, via, hops))
            n += 1
        log.info(
            "resumed from %s and %d fetches journaled since: %d URLs were in RAM, "
            "%d in BEAST, %d in QR; %d seen, %d pages done",
            path,
            replayed,
            n,
            len(st.beast),
            len(st.qr),
            len(st.seen),
            self.dispatch.pages_done,
        )

    def _replay_journal(self, since: int) -> int:
        """Replay the journal's fetches after checkpoint ``since`` (drumbeat.manager.journal):
        their links to URL-seen, their edges to the PLD graph, their URLs to the done set,
        their counts and (Settings.revisit) their visits to the revisits' history
        (Revisiting.replay); returns how many."""
        found: list[FoundURLs] = []
        edges: list[FoundEdges] = []
        done, n = self.gate.done, 0

        def apply() -> None:
            self.admission.add_edges(edges)
            if found:
                self.admission.admit_found(found)
            found.clear()
            edges.clear()

        for entry in replay_entries(self.state_dir / JOURNAL_DIR, since):
            if entry.url:  # else links another partition forwarded (journal.Forwarded)
                n += 1
                done.add(urls.fingerprint(entry.url))
                self.dispatch.pages_done += count_entry(entry, self.counters)
                if self.revisiting is not None:
                    self.revisiting.replay(entry.url, entry.status, entry.visit)
            if entry.fingerprints:
                found.append(FoundURLs(entry.fingerprints, entry.payloads, entry.lengths))
            if entry.edge_keys:
                edges.append(
                    FoundEdges(
                        entry.edge_source, entry.edge_keys, entry.edge_targets, entry.edge_lengths
                    )
                )
            if len(found) >= 4096:
                apply()
        apply()
        return n

    def _commit_stores(self, laps: Laps) -> CheckpointMeta:
        """Commit the crawl log and every store; return the checkpoint's state naming
        their commits."""
        for sync in self.durables:
            sync()
        self.crawl_log.sync()
        laps.lap("logs")
        st, gate = self.stores, self.gate
        # Answers already merged go to their next stage first, so that the commits and the
        # RAM rows below describe one moment. URL-seen's new URLs need not: its commit
        # notes how far their placing got (DrumURLSeen.take_new). Nor do the URLs read
        # from BEAST and not yet routed: they are saved with the RAM rows (routing up to
        # half of RAM here would hold the checkpoint's turn).
        gate.submit_checks()
        st.robots.flush()
        gate.take_robots_answers()
        st.robots.flush()
        gate.take_robots_answers()
        assert gate.checking == 0, gate.checking
        laps.lap("answers")
        urlseen_manifest = st.seen.commit()
        laps.lap("urlseen")
        # Moves every round's new edges.
        pld_manifest = self.admission.counting_edges(st.plds.commit)
        laps.lap("plds")
        frontier: FrontierState = {
            "beast": st.beast.commit(),
            "robots": st.robots.commit(),
            "qr": st.qr.commit(),
            "qr_retry": st.qr_retry.commit(),
            "robots_todo": st.robots_todo.commit(),
            "robots_working": st.qr.working_origins(),
            "robots_failures": gate.robots_failures,
        }
        if self.revisiting is not None:
            frontier["revisits"] = self.revisiting.commit()
        return CheckpointMeta(
            urlseen_manifest=urlseen_manifest,
            pld_manifest=pld_manifest,
            frontier=frontier,
            seeds=self.pricing.seeds,
            pages_done=self.dispatch.pages_done,
            next_item_id=self.dispatch.next_item_id,
            counters=dict(self.counters),
            time=time.time(),
        )

    def commit(self, laps: Laps) -> Callable[[], Path]:
        """Commit every store and take what a checkpoint holds of RAM; return the call
        that writes the checkpoint's files and makes it live (it touches nothing the
        crawl changes: it may run in another thread).

        The commits' fsyncs are deferred (store.durable.deferring_fsyncs): the call syncs
        their filesystems before it writes the checkpoint, which only then goes live.
        Made in the loop, they would hold the checkpoint's turn behind the WARC writes of
        the fetchers.
        """
        with deferring_fsyncs() as pending:
            meta = self._commit_stores(laps)
        laps.lap("frontier")
        # The objects, not rows: neither a queued URL nor an item in flight changes once
        # made, and making rows here would hold the loop.
        flying = [item for item, _ in self.dispatch.in_flight.values()]
        queued = list(self.scheduler.iter_queued())
        unrouted = list(self.gate.to_route)
        savers = [self.star.saver()]
        caps = self.admission.scope.caps
        if caps is not None:
            counts = [(name, sketch.to_bytes()) for name, sketch in caps.sketches.items()]
            savers.append(lambda target: save_counts(target, counts))
        if self.history is not None:
            savers.append(self.history.saver())
        if self.gate.done:
            savers.append(save_done(self.gate.done))
        if self.revisiting is not None:
            savers.append(self.revisiting.saver(flying))
        journal = self.journal
        number = self.checkpoints.next_number()
        if journal is not None:
            journal.rotate(number)
        self.last_checkpoint = self.clock()
        laps.lap("ram")
        awake, nap_s = self.tuning.checkpoint_rows_awake, self.tuning.checkpoint_writer_nap_s

        def write() -> Path:
            pending.sync()
            laps.lap("sync")
            rows = _ram_rows(flying, queued, unrouted)
            path = self.checkpoints.write(meta, napping(rows, awake, nap_s), savers)
            laps.lap("write")
            if journal is not None:
                journal.forget_before(number)
            if laps.total() >= 1.0:  # the fetchers may have run dry: say where it went
                log.info("checkpoint took %.2f s: %s", laps.total(), laps)
            return path

        return write


def _presync_done(future: asyncio.Future[None]) -> None:
    """Log a failed presync (the checkpoint's own fsyncs do not depend on it)."""
    if not future.cancelled() and future.exception() is not None:
        log.warning(
            "writing out the state directory before a checkpoint failed: %s", future.exception()
        )


def _ram_rows(
    flying: list[FetchItem], queued: list[QueuedURL], unrouted: list[bytes]
) -> Iterator[tuple[Any, ...]]:
    """Checkpoint rows (checkpoint.read_queue) of the pages in flight, then of the URLs
    queued in RAM, then of those read from BEAST and not yet routed (payloads):
    [url, depth, via], hops appended if any."""
    # Unreported pages first: they were next in line.
    for item in flying:
        if item.kind == PAGE:
            yield (item.url, item.depth, item.via, item.hops)[: 4 if item.hops else 3]
    for q in queued:
        if not q.robots:
            yield (q.url, q.depth, q.via, q.hops)[: 4 if q.hops else 3]
    for payload in unrouted:
        url, depth, via, hops = decode_payload(payload)
        yield (url, depth, via, hops)[: 4 if hops else 3]


def napping(
    rows: Iterable[_T], awake: int, nap_s: float, *, sleep: Callable[[float], None] = time.sleep
) -> Iterator[_T]:
    """``rows``, the thread asleep ``nap_s`` after every ``awake`` of them (see
    LoopTuning.checkpoint_rows_awake)."""
    it = iter(rows)
    while chunk := list(islice(it, awake)):
        yield from chunk
        if len(chunk) == awake:
            sleep(nap_s)


class Laps:
    """Wall-clock time of the consecutive parts of a job, named as each one ends."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = {}
        self._last = perf_counter()

    def lap(self, name: str) -> None:
        now = perf_counter()
        self.parts[name] = self.parts.get(name, 0.0) + now - self._last
        self._last = now

    def total(self) -> float:
        return sum(self.parts.values())

    def __str__(self) -> str:
        return ", ".join(f"{name} {s:.2f} s" for name, s in self.parts.items())
