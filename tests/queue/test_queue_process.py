"""ProcessTaskQueue with real child processes: batching, ownership, sync, dead workers.

The children run a small echo worker (below) built on the same WorkerQueue and frame
functions as drumbeat.worker, so the hand-off is tested without any fetching.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from drumbeat.queue.base import FetchItem, Task
from drumbeat.queue.process import WORKER_DIED, ProcessTaskQueue, WorkerFailed, keeps_partition

ECHO_WORKER = textwrap.dedent("""
    import asyncio, os, pickle, sys
    from drumbeat.queue.base import ItemResult
    from drumbeat.queue.process import WorkerQueue, read_frame

    async def main():
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                     sys.stdin.buffer)
        t, p = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                             sys.stdout.buffer)
        queue = WorkerQueue(asyncio.StreamWriter(t, p, None, loop), lambda: {"pid": os.getpid()})
        kind, (name, hold) = pickle.loads(await read_frame(reader))
        while (frame := await read_frame(reader)) is not None:
            kind, body = pickle.loads(frame)
            if kind == "tasks":
                for task in body:
                    for i, item in enumerate(task.items):
                        notice = ItemResult(task.task_id, i, item, status=200, held_s=0.002,
                                            end_key=99, log={"time": 5.0, "fetch_ms": 1.5},
                                            fetch_ended=True)
                        if item.announce_end:
                            await queue.fetch_ended(name, notice)
                        if item.url == hold:
                            continue  # never answered: the test kills this worker
                        await queue.report(name, [ItemResult(task.task_id, i, item, status=200,
                                                             log={"by": os.getpid()})])
                        if item.url.endswith("/late"):  # a notice after its result
                            await queue.fetch_ended(name, notice)
            elif kind == "sync":
                queue.flush()
                queue.send(("synced", body))
            elif kind == "stop":
                break
        queue.flush(with_stats=True)
        await asyncio.sleep(0.05)

    asyncio.run(main())
""")


def tasks(n_tasks: int, per_task: int, first_id: int = 0) -> list[Task]:
    out, item_id = [], first_id * per_task
    for t in range(n_tasks):
        items = []
        for _ in range(per_task):
            items.append(FetchItem(item_id, f"http://h{item_id}.test/", "127.0.0.1"))
            item_id += 1
        out.append(Task(first_id + t, items))
    return out


async def collect_all(queue: ProcessTaskQueue, n: int, timeout_s: float = 20.0) -> list:
    results: list = []
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while len(results) < n and loop.time() < end:
        results += await queue.collect(1000, 0.5)
    return results


def echo_queue(tmp_path: Path, workers: int, hold: str | None = None, **kw) -> ProcessTaskQueue:
    script = tmp_path / "echo_worker.py"
    script.write_text(ECHO_WORKER)
    return ProcessTaskQueue([sys.executable, str(script)], hold, workers, **kw)


def test_every_item_comes_back_once_from_several_workers(tmp_path):
    async def go():
        queue = echo_queue(tmp_path, 3)
        await queue.start()
        try:
            await queue.submit(tasks(50, 8))
            results = await collect_all(queue, 400)
            assert await queue.sync()
            assert queue.stats().unreported_items == 0
            return results
        finally:
            await queue.close()

    results = asyncio.run(go())
    assert sorted(r.item.item_id for r in results) == list(range(400))
    assert len({r.log["by"] for r in results}) == 3, "the work was spread over the workers"


def test_a_partition_stays_on_one_worker_until_it_is_much_busier(tmp_path):
    async def go():
        queue = echo_queue(tmp_path, 3)
        await queue.start()
        try:
            assert queue.partitions == 3
            few = tasks(12, 2)  # 24 items: no worker gets much busier than another
            for t in few:
                t.partition = t.task_id % 3
            await queue.submit(few)
            spread = await collect_all(queue, 24)
            # One partition only (a single-host crawl): the others still get work.
            await queue.submit(tasks(40, 8, first_id=100))
            overflow = await collect_all(queue, 320)
            return spread, overflow
        finally:
            await queue.close()

    spread, overflow = asyncio.run(go())
    by_part: dict[int, set[int]] = {}
    for r in spread:
        by_part.setdefault(r.task_id % 3, set()).add(r.log["by"])
    assert all(len(pids) == 1 for pids in by_part.values()), by_part
    assert len(set().union(*by_part.values())) == 3, "each partition has its own worker"
    assert len(overflow) == 320
    assert len({r.log["by"] for r in overflow}) == 3, "a busy partition spills over"


def test_a_broad_crawls_hosts_keep_their_worker_and_one_sites_items_spread():
    # A broad crawl: workers hold many items each, within a factor of two.
    assert keeps_partition(60, 45) and keeps_partition(180, 90)
    assert not keeps_partition(200, 90)
    # One site, four connections: a few items, all of one partition. Its worker keeps
    # them while it holds two more than an idle one, then they go elsewhere.
    assert keeps_partition(2, 0) and not keeps_partition(3, 0)
    assert keeps_partition(4, 1) and not keeps_partition(5, 1)
    # A worker started in place of a dead one (nothing unreported) gets work at once.
    assert not keeps_partition(40, 0)


def test_a_dead_workers_items_come_back_failed_and_a_replacement_starts(tmp_path):
    async def go():
        queue = echo_queue(tmp_path, 2, hold="http://h3.test/")
        await queue.start()
        try:
            await queue.submit(tasks(2, 4))  # one task each; item 3 is held by its worker
            first = await collect_all(queue, 7)
            assert queue.stats().unreported_items == 1
            # Item 3's task went whole to one worker: the one that answered items 0-2.
            [held_by] = {r.log["by"] for r in first if r.item.item_id < 3}
            [holder] = [n for n, pid in queue.worker_pids().items() if pid == held_by]
            os.kill(held_by, signal.SIGKILL)
            # It may have sent the request: only the manager may send it again, so the
            # item comes back as failed rather than going to another worker.
            failed = await collect_all(queue, 1)
            for _ in range(100):
                if len(queue.worker_pids()) == 2:
                    break
                await asyncio.sleep(0.05)
            names = set(queue.worker_pids())
            await queue.submit(tasks(4, 2, first_id=10))
            later = await collect_all(queue, 8)
            return first, failed, holder, names, later, queue.stats()
        finally:
            await queue.close()

    first, failed, dead, names, later, stats = asyncio.run(go())
    assert sorted(r.item.item_id for r in first) == [0, 1, 2, 4, 5, 6, 7]
    assert [(r.item.item_id, r.error, r.status) for r in failed] == [(3, WORKER_DIED, None)]
    assert dead not in names and len(names) == 2
    assert len(later) == 8 and stats.unreported_items == 0


def _pinned(n_tasks: int, per_task: int, partition: int, first_id: int) -> list[Task]:
    made = tasks(n_tasks, per_task, first_id=first_id)
    for t in made:
        t.partition, t.pinned = partition, True
    return made


def test_pinned_tasks_stay_on_their_partitions_worker_however_busy(tmp_path):
    """A pinned task (its items queue behind others on their lanes) goes to its
    partition's worker even where keeps_partition would send it elsewhere."""

    async def go():
        queue = echo_queue(tmp_path, 3)
        await queue.start()
        try:
            assert queue.pins_partitions
            await queue.submit(_pinned(40, 8, partition=4, first_id=0))
            return await collect_all(queue, 320)
        finally:
            await queue.close()

    results = asyncio.run(go())
    assert len(results) == 320
    assert len({r.log["by"] for r in results}) == 1, "one worker for the partition"


def test_a_pinned_task_waits_for_its_dead_workers_replacement(tmp_path):
    """The worker of a pinned task's partition died: the task goes to the worker that
    takes its slot, never to another one (its lanes' earlier items could still run
    there otherwise)."""

    async def go():
        queue = echo_queue(tmp_path, 2, hold="http://h0.test/")
        await queue.start()
        try:
            await queue.submit(_pinned(1, 1, partition=0, first_id=0))  # held: h0
            for _ in range(100):
                if queue.stats().unreported_items == 1:
                    break
                await asyncio.sleep(0.02)
            before = queue.worker_pids()
            [dead] = [pid for name, pid in before.items() if name == "fetcher-0"]
            [other] = [pid for name, pid in before.items() if name != "fetcher-0"]
            os.kill(dead, signal.SIGKILL)
            failed = await collect_all(queue, 1)
            # Sent while the slot may still be empty: held for the replacement.
            await queue.submit(_pinned(5, 4, partition=2, first_id=10))
            later = await collect_all(queue, 20)
            return dead, other, failed, later, queue.worker_pids()
        finally:
            await queue.close()

    dead, other, failed, later, after = asyncio.run(go())
    assert [(r.item.item_id, r.error) for r in failed] == [(0, WORKER_DIED)]
    assert len(later) == 20
    [replacement] = [pid for pid in after.values() if pid not in (dead, other)]
    assert {r.log["by"] for r in later} == {replacement}


def test_a_fetch_ended_notice_comes_ahead_and_leaves_its_item_unreported(tmp_path):
    """A worker's notice that an item's request ended (FetcherQueue.fetch_ended) reaches
    the manager with the item it sent and the notice's figures, ahead of the result, and
    leaves the item unreported; a notice that comes after its result is dropped."""

    async def go():
        queue = echo_queue(tmp_path, 1, hold="http://h1.test/")
        await queue.start()
        try:
            items = [
                # announced, and reported at once (announce_end comes with report_now)
                FetchItem(
                    0, "http://h0.test/late", "127.0.0.1", report_now=True, announce_end=True
                ),
                FetchItem(1, "http://h1.test/", "127.0.0.1", report_now=True, announce_end=True),
            ]
            await queue.submit([Task(0, items)])
            got = await collect_all(queue, 3)
            await asyncio.sleep(0.2)  # the late notice, had it been kept
            got += await queue.collect(10, 0.1)
            return items, got, queue.stats()
        finally:
            await queue.close()

    items, got, stats = asyncio.run(go())
    assert [(r.item.item_id, r.fetch_ended) for r in got] == [(0, True), (0, False), (1, True)]
    notice = got[2]
    assert notice.item == items[1] and notice.status == 200 and notice.held_s == 0.002
    assert notice.end_key == 99 and notice.log == {"time": 5.0, "fetch_ms": 1.5}
    assert stats.unreported_items == 1  # item 1: its result never came


def test_workers_that_keep_dying_fail_clearly(tmp_path):
    async def go():
        queue = ProcessTaskQueue(
            [sys.executable, "-c", "import sys; sys.exit(3)"], None, 1, max_restarts=2
        )
        await queue.start()
        try:
            with pytest.raises(WorkerFailed, match="keep dying"):
                for _ in range(100):
                    await queue.collect(10, 0.1)
        finally:
            await queue.close()

    asyncio.run(go())


def test_frames_carry_every_field_of_tasks_and_results() -> None:
    """Frames pickle the hand-off dataclasses field by field (queue.base): a round trip
    through a frame gives equal objects, set fields and defaults alike."""
    import pickle

    from drumbeat.queue.base import FoundEdges, FoundURLs, ItemResult
    from drumbeat.queue.process import encode_frame

    item = FetchItem(
        7,
        "http://a.test/x",
        "127.0.0.9",
        kind="robots",
        depth=3,
        via="http://b.test/",
        attempts=2,
        hops=1,
    )
    task = Task(11, [item, FetchItem(8, "http://a.test/y", "127.0.0.9")], partition=5)
    full = ItemResult(
        11,
        0,
        item,
        status=200,
        error="warc_write",
        found=FoundURLs(b"\1" * 8, b"http://c.test/\n4\nv", b"\x13\0\0\0"),
        pld_edges=FoundEdges("a.test", b"\2" * 8, b"c.test", b"\6\0\0\0"),
        dropped={"nofollow": 2},
        robots_text="User-agent: *",
        body_bytes=99,
        retry_after_s=1.5,
        log={"url": item.url, "status": 200},
    )
    bare = ItemResult(11, 1, task.items[1])
    message = ("results", [full, bare], {"pid": 1}), ("tasks", [task])
    frame = encode_frame(message)
    back = pickle.loads(frame[4:])
    assert back == message
    assert back[0][1][1].dropped == {} and back[0][1][1].dropped is not bare.dropped
