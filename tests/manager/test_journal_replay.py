"""The journal on a real Manager (temp state dir, nothing fetched): what a group commit
wrote comes back at a restart without a checkpoint in between: the fetched URLs are
skipped once, the links they found are queued, the counts are kept; a corrupt journal
stops the restart with an error naming the file."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from drumbeat.fetcher_links import pack_edges, pack_found
from drumbeat.frontier.robots import ALLOW_ALL, RobotsEntry
from drumbeat.frontier.urlseen import encode_payload
from drumbeat.manager.journal import LINKS, replay_entries
from drumbeat.queue.base import PAGE, FetchItem, FoundURLs, ItemResult
from drumbeat.store.journal import (
    JournalEntry,
    JournalError,
    JournalWriter,
    ReadReport,
    encode_entry,
    journal_files,
    journal_path,
    read_journal,
)
from drumbeat.testing import FakeClock, offline_manager

SEEDS = [f"http://site{i}.test/" for i in range(4)]


def _result(item_id: int, url: str, links: list[str], status: int | None = 200) -> ItemResult:
    return ItemResult(
        0,
        0,
        FetchItem(item_id, url, "127.0.0.1", PAGE, 0, None),
        status=status,
        error=None if status else "connect",
        found=pack_found(links, 1, url) if links else None,
    )


async def _crawl_then_crash(tmp_path: Path) -> None:
    clock = FakeClock(1000.0)
    async with offline_manager(tmp_path, clock=clock, checkpoint_interval_s=60.0) as manager:
        manager.add_seeds(SEEDS)
        manager.checkpointer.initial()  # as Manager.run does first
        assert manager.journal is not None
        done = [
            _result(1, SEEDS[0], ["http://new.test/a", "http://new.test/b", SEEDS[1]]),
            _result(2, SEEDS[1], []),
            _result(3, SEEDS[2], [], status=503),  # to be retried: not done
        ]
        manager.journal.note(done)
        # As Manager._collect does: the links go to URL-seen, and the journal gets those
        # that passed its cache (SEEDS[1], admitted before, does not).
        found = [r.found for r in done if r.found is not None]
        manager.admission.admit_found(found, manager.journal.note_links)
        await manager.journal.commit_now()
        # A crash now: no checkpoint after these fetches.
        manager.journal.close()


def test_a_restart_replays_the_journal_on_top_of_the_checkpoint(tmp_path: Path) -> None:
    asyncio.run(_crawl_then_crash(tmp_path))
    asyncio.run(_restart(tmp_path))


async def _restart(tmp_path: Path) -> None:
    clock = FakeClock(2000.0)
    async with offline_manager(tmp_path, clock=clock, checkpoint_interval_s=60.0) as manager:
        assert manager.pages_done == 2
        assert manager.counters["fetches"] == 2 and manager.counters["status.200"] == 2
        # The seeds and the links found after the checkpoint are queued again.
        manager.stores.seen.flush()
        manager.admission.take_new_urls(clock())
        assert manager.stats().queued == len(SEEDS) + 2
        assert len(manager.gate.done) == 2
        # The run's first checkpoint keeps the done URLs not met yet; the journal restarts.
        manager.checkpointer.initial()
        path = manager.checkpoints.current()
        assert path is not None and (path / "done.u64").stat().st_size == 16
        assert journal_files(manager.journal.directory) == []
        # The URLs fetched are skipped (once) as they reach their hosts' queues.
        for url in SEEDS:
            origin = url.rstrip("/")
            entry = RobotsEntry(origin, ALLOW_ALL, "", 0.0, 1e12, 0)
            manager.gate.route(encode_payload(url, 0, None, 0), origin, entry)
        assert manager.counters["journal_skipped"] == 2
        assert manager.scheduler.queued_urls == 2 and not manager.gate.done


def test_the_journal_holds_only_the_links_that_passed_url_seens_cache(tmp_path: Path) -> None:
    asyncio.run(_crawl_then_crash(tmp_path))
    [(_, path)] = journal_files(tmp_path / "state" / "journal")
    entries = list(read_journal(path, ReadReport()))
    fetches = [e for e in entries if e.url]
    assert sorted(e.url for e in fetches) == SEEDS[:2]
    assert all(not e.fingerprints for e in fetches)  # their links come apart
    [links] = [e for e in entries if not e.url]
    assert links.error == LINKS
    assert [p.split(b"\n", 1)[0] for p in _payloads(links)] == [
        b"http://new.test/a",
        b"http://new.test/b",
    ]


def test_replay_derives_the_hashes_the_journal_leaves_out(tmp_path: Path) -> None:
    links = ["http://new.test/a", "http://new.test/b?q=1"]
    found = pack_found(links, 2, SEEDS[0])
    edges = pack_edges("site0.test", ["new.test", "other.test"])
    assert edges is not None
    writer = JournalWriter(journal_path(tmp_path, 1))
    parts: list[bytes] = []
    encode_entry(
        parts,
        SEEDS[0],
        200,
        None,
        (found.fingerprints, found.lengths, found.payloads),
        (edges.source, edges.keys, edges.lengths, edges.targets),
    )
    encode_entry(parts, "", None, LINKS, (found.fingerprints, found.lengths, found.payloads), None)
    writer.append(parts)
    writer.sync()
    writer.close()
    assert not next(read_journal(journal_path(tmp_path, 1))).fingerprints  # left out
    fetch, apart = replay_entries(tmp_path, None)
    assert fetch.fingerprints == apart.fingerprints == found.fingerprints
    assert fetch.edge_keys == edges.keys and fetch.payloads == found.payloads
    assert not apart.edge_keys


def _payloads(entry: JournalEntry) -> list[bytes]:
    return FoundURLs(entry.fingerprints, entry.payloads, entry.lengths).payloads_list()


def test_a_corrupt_journal_stops_the_restart_naming_the_file(tmp_path: Path) -> None:
    asyncio.run(_crawl_then_crash(tmp_path))
    [(_, path)] = journal_files(tmp_path / "state" / "journal")
    data = bytearray(path.read_bytes())
    data[25] ^= 0xFF  # inside the first record, which a second follows
    path.write_bytes(bytes(data) + bytes(data[19:]))
    with pytest.raises(JournalError, match=str(path)):
        asyncio.run(_restart(tmp_path))
    # The command line says it in one line.
    proc = subprocess.run(
        [sys.executable, "-m", "drumbeat", "crawl", "--state", str(tmp_path / "state")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert str(path) in proc.stderr and "corrupt" in proc.stderr
