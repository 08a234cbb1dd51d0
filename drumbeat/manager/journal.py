"""The write-ahead journal: completed fetches are durable within ``journal_commit_s`` of
their completion, not only at checkpoints (file format: ``drumbeat.store.journal``).

What a record holds: each page fetch the manager collected and will not retry (its URL,
status or error, the PLD edges it found, in a crawl with revisits what the revisits'
history records of it (drumbeat.manager.revisiting), and its links, or, by default,
apart from it: the links of each collect that passed URL-seen's cache, as one entry
without a URL; see ``Journal``'s ``links_apart``). A checkpoint holds everything
collected before its commits; the journal ``after-N`` holds what was collected after
checkpoint N's commits. A restart loads the live checkpoint K, then replays
``after-K``, ``after-K+1`` ... in order (more than one when the crash came while
checkpoint K+1 was being written): the found links go to URL-seen again (which absorbs
those it knew) and the PLD graph, the counters are brought up to date, and the URLs
fetched are noted as *done* (and their visits go to the revisits' history): one that
reaches the politeness scheduler again (from the checkpoint's RAM rows, BEAST, QR, or as
a link found again) is skipped once (``RobotsGate.done``). The done URLs not met yet are
saved with each checkpoint (``done.u64``, uint64 fingerprints).

The order of a group commit, so that a record never claims more than is on disk:

1. In the loop: the results collected so far are taken; every fetcher is asked to make
   its WARC files durable (``ManagerQueue.sync``: a fetcher writes a page's records
   before it reports the page, and answers the sync after flushing and fsyncing them),
   and the commit waits for all to confirm (else it is tried again later).
2. In the loop: the crawl log is flushed to the OS (it holds the lines of every result
   taken in step 1, appended as they were collected).
3. In a thread: the crawl log (and, for in-process fetchers, the WARC file) is fsynced,
   then the record is written and fsynced.

So a fetch in the journal has its WARC records and its crawl-log line on disk. After a
crash a resume fetches again only what was in flight and what was collected after the
last group commit's step 1 (its crawl-log line may be in the log already: ``drumbeat
stats`` counts such a page once).

Checkpoints: one starts only once the group commit under way has ended; at its commit
moment the results not yet journaled are closed into a segment for the old file, and
later ones go to ``after-N`` of the new checkpoint. Once it is live, older files are
removed. Each run starts with a checkpoint (the seeds, or what the replay brought back),
after which every journal file is removed and a new one started: so the journal holds
at most one checkpoint interval's fetches.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from time import thread_time

import numpy as np

from drumbeat.drum import AuxArray
from drumbeat.frontier.backoff import retryable
from drumbeat.frontier.pldgraph import edge_keys
from drumbeat.queue.base import PAGE, FoundEdges, FoundURLs, Inbox, ItemResult, ManagerQueue
from drumbeat.store.crawllog import CrawlLog
from drumbeat.store.durable import DeferredSyncs, deferring_fsyncs
from drumbeat.store.journal import (
    JournalEntry,
    JournalWriter,
    ReadReport,
    encode_entry,
    journal_files,
    journal_path,
    read_journal,
)
from drumbeat.urls import xxh3_64_array

log = logging.getLogger("drumbeat.manager")
DIR_NAME = "journal"
FORWARDED = "forwarded"  # the error of an entry of forwarded links (no fetch, no URL)
LINKS = "links"  # the error of an entry of links found that passed URL-seen's cache
DONE_FILE = "done.u64"


class Journal:
    """Group commits of completed fetches (see the module's docstring)."""

    def __init__(
        self,
        directory: Path,
        *,
        commit_s: float,
        queue: ManagerQueue,
        crawl_log: CrawlLog,
        syncs: list[Callable[[], None]],
        inbox: Inbox | None = None,
        stage_s: defaultdict[str, float] | None = None,
        links_apart: bool = False,
    ) -> None:
        """``inbox``: a cluster manager's forwarded links, journaled with the fetches
        (:meth:`note_forwarded`) and acknowledged once a commit holds them. ``stage_s``:
        the manager's CPU seconds by stage; the commits' CPU goes to ``"journal"`` (the
        loop's part and the writing thread's, fsyncs included).

        ``links_apart``: the fetches' entries leave their links out, and the links come
        through :meth:`note_links` instead, only those that passed URL-seen's cache of
        recent URLs. A link the cache drops was sent to URL-seen before, by an entry
        written no later than this one (entries are written in the order noted) or by
        what the checkpoint holds (the cache starts empty at each run), so replay loses
        nothing; most links of a crawl are such repeats, and building, deflating and
        writing them took most of the journal's CPU. Off where the crawl order counts
        every link found (in-degree), which replay then counts again."""
        self.directory = directory
        self.inbox = inbox
        self.links_apart = links_apart
        self.commit_s = commit_s
        self.queue = queue
        self.crawl_log = crawl_log
        self.syncs = syncs  # the in-process fetchers' WARC syncs
        self.number: int | None = None  # the file the results collected now go to
        self._pending: list[ItemResult | Forwarded] = []
        self._segments: list[tuple[int, list[ItemResult | Forwarded]]] = []  # closed by rotate
        self._writers: dict[int, JournalWriter] = {}
        self.committing: asyncio.Future[None] | None = None
        self._last_commit = float("-inf")
        self.stage_s: defaultdict[str, float] = defaultdict(float) if stage_s is None else stage_s
        # With revisits: each page fetch's visit for the history (manager.revisiting's
        # journal_visit), journaled with it; None: none.
        self.visit_of: Callable[[ItemResult], bytes] | None = None

    def note(self, results: list[ItemResult]) -> None:
        """Results just collected (their crawl-log lines appended): journal them."""
        if self.number is not None:
            self._pending += results

    def note_forwarded(self, found: list[FoundURLs], edges: list[FoundEdges]) -> None:
        """Links and PLD edges another partition forwarded, just admitted: journal them
        (with ``links_apart``, only the edges: the links come through :meth:`note_links`)."""
        if self.links_apart:
            found = []
        if self.number is not None and (found or edges):
            self._pending.append(Forwarded(found, edges))

    def note_links(self, fingerprints: np.ndarray, payloads: AuxArray) -> None:
        """With ``links_apart``: links found (or forwarded) that just went on past
        URL-seen's cache, the ``sent`` of :meth:`DrumURLSeen.submit`: journal them."""
        if self.number is None:
            return
        lengths = payloads.lengths().astype(np.uint32).tobytes()
        links = FoundURLs(fingerprints.tobytes(), bytes(payloads.data()), lengths)
        self._pending.append(Forwarded([links], [], LINKS))

    def start(self, number: int) -> None:
        """Checkpoint ``number`` is live and holds everything so far: remove every
        journal file, and journal what follows into ``after-number``."""
        assert self.committing is None or self.committing.done()
        self.close()
        self.forget_before(number + 1)
        self.number = number
        self._pending = []

    def rotate(self, number: int) -> None:
        """A checkpoint's commits are being made: the results so far go to the current
        file, later ones to ``after-number``."""
        if self.number is None:
            return
        if self._pending:
            self._segments.append((self.number, self._pending))
            self._pending = []
        self.number = number

    def forget_before(self, number: int) -> None:
        """Remove the files of checkpoints before ``number`` (checkpoint ``number`` is
        live and holds what they did). Any thread: the writer of a file removed while
        open is closed by the next commit."""
        for n, path in journal_files(self.directory):
            if n < number:
                path.unlink(missing_ok=True)

    def commit_if_due(self, now: float) -> None:
        """Start a group commit when ``commit_s`` has passed since the last one began
        and none is under way; a failed one fails the crawl here."""
        running = self.committing
        if running is not None:
            if not running.done():
                return
            self.committing = None
            running.result()
        if now - self._last_commit < self.commit_s or not (self._pending or self._segments):
            return
        self._last_commit = now
        self.committing = asyncio.ensure_future(self._commit())

    async def settle(self) -> None:
        """Wait for the group commit under way, if any (raising its error)."""
        running, self.committing = self.committing, None
        if running is not None:
            await running

    async def commit_now(self) -> None:
        """One group commit of everything collected so far (at a stop)."""
        await self.settle()
        if self._pending or self._segments:
            await self._commit()

    async def _commit(self) -> None:
        # What the inbox handed out so far was noted (note_forwarded) with the results
        # collected so far: once they are written, it may forget them.
        mark = self.inbox.mark() if self.inbox is not None else 0
        segments = self._segments
        if self._pending and self.number is not None:
            segments.append((self.number, self._pending))
        self._segments, self._pending = [], []
        if not await self.queue.sync():
            # Not confirmed: nothing is claimed; the next commit takes these too.
            self._segments = segments + self._segments
            log.warning("journal commit postponed: the fetchers did not confirm their WARC sync")
            return
        started = thread_time()
        with deferring_fsyncs() as pending:
            for sync in self.syncs:
                sync()
        self.crawl_log.flush()
        self.stage_s["journal"] += thread_time() - started
        await asyncio.get_running_loop().run_in_executor(None, self._timed_write, segments, pending)
        if self.inbox is not None:
            self.inbox.acknowledge(mark)

    def _timed_write(
        self, segments: list[tuple[int, list[ItemResult | Forwarded]]], pending: DeferredSyncs
    ) -> None:
        started = thread_time()  # this thread's CPU: only the write runs in it now
        try:
            self._write(segments, pending)
        finally:
            self.stage_s["journal"] += thread_time() - started

    def _write(
        self, segments: list[tuple[int, list[ItemResult | Forwarded]]], pending: DeferredSyncs
    ) -> None:
        pending.sync()
        self.crawl_log.fsync_written()
        visit_of = self.visit_of
        for number, results in segments:
            parts: list[bytes] = []
            for r in results:
                if isinstance(r, Forwarded):
                    r.encode(parts)
                    continue
                if r.item.kind != PAGE or retryable(r.status, r.error):
                    continue
                f = None if self.links_apart else r.found
                e = r.pld_edges
                encode_entry(
                    parts,
                    r.item.url,
                    r.status,
                    r.error,
                    None if f is None else (f.fingerprints, f.lengths, f.payloads),
                    None if e is None else (e.source, e.keys, e.lengths, e.targets),
                    b"" if visit_of is None else visit_of(r),
                )
            if not parts:
                continue
            writer = self._writers.get(number)
            if writer is None:
                writer = self._writers[number] = JournalWriter(journal_path(self.directory, number))
            writer.append(parts)
            writer.sync()
        if segments:
            last = segments[-1][0]
            for n in [n for n in self._writers if n < last]:
                self._writers.pop(n).close()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


@dataclass(frozen=True, slots=True)
class Forwarded:
    """Links and PLD edges admitted without a fetch of their own (``kind``: FORWARDED by
    another partition, or the LINKS of :meth:`Journal.note_links`): journaled as entries
    without a URL (replay admits them again and counts no fetch)."""

    found: list[FoundURLs]
    edges: list[FoundEdges]
    kind: str = FORWARDED

    def encode(self, parts: list[bytes]) -> None:
        kind = self.kind
        for f in self.found:
            encode_entry(parts, "", None, kind, (f.fingerprints, f.lengths, f.payloads), None)
        for e in self.edges:
            encode_entry(parts, "", None, kind, None, (e.source, e.keys, e.lengths, e.targets))


def replay_entries(directory: Path, since: int | None) -> Iterator[JournalEntry]:
    """The entries of every journal file from ``after-since`` on (all of them when
    there is no checkpoint), in order, with their found URLs' fingerprints and their
    edges' keys; torn tails are cut and logged."""
    for number, path in journal_files(directory):
        if since is not None and number < since:
            continue
        report = ReadReport()
        yield from map(with_hashes, read_journal(path, report))
        if report.torn_bytes:
            log.warning("cut a torn tail (%d bytes) off %s", report.torn_bytes, path)
        log.info("replayed %d journal records of %s", report.records, path)


def with_hashes(entry: JournalEntry) -> JournalEntry:
    """``entry`` with the fingerprints and edge keys a file of version 3 leaves out
    (drumbeat.store.journal), as the fetcher computed them (drumbeat.fetcher_links.pack_found
    and pack_edges): xxh3_64 of each found URL, pldgraph's edge_keys of the edges."""
    fingerprints, keys = entry.fingerprints, entry.edge_keys
    if entry.lengths and not fingerprints:
        payloads = AuxArray.from_lengths(entry.payloads, entry.lengths)
        urls = [p.split(b"\n", 1)[0] for p in payloads.tolist()]
        fingerprints = xxh3_64_array(urls).tobytes()
    if entry.edge_lengths and not keys:
        targets = AuxArray.from_lengths(entry.edge_targets, entry.edge_lengths)
        keys = edge_keys(entry.edge_source, [t.decode() for t in targets.tolist()]).tobytes()
    if fingerprints is entry.fingerprints and keys is entry.edge_keys:
        return entry
    return replace(entry, fingerprints=fingerprints, edge_keys=keys)


def count_entry(entry: JournalEntry, counters: Counter[str]) -> int:
    """Count a replayed fetch as Dispatcher.on_result counted it; 1 if it was a page
    fetched (pages_done), else 0."""
    counters["fetches"] += 1
    status = entry.status
    counters[f"status.{status}" if status is not None else f"error.{entry.error}"] += 1
    counters["journal_replayed"] += 1
    return 1 if status is not None else 0


def save_done(done: set[int]) -> Callable[[Path], None]:
    """A checkpoint saver of the done URLs not met yet (a copy taken now)."""
    values = np.fromiter(done, dtype=np.uint64, count=len(done))

    def save(target: Path) -> None:
        with open(target / DONE_FILE, "wb") as f:
            f.write(values.tobytes())
            f.flush()
            os.fsync(f.fileno())

    return save


def load_done(checkpoint: Path) -> set[int]:
    with suppress(FileNotFoundError):
        return set(np.fromfile(checkpoint / DONE_FILE, dtype=np.uint64).tolist())
    return set()
