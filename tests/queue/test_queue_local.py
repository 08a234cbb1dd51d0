import asyncio

from drumbeat.queue.base import FetchItem, ItemResult, Task
from drumbeat.queue.local import LocalTaskQueue


def _task(tid: int, n: int) -> Task:
    return Task(
        tid, [FetchItem(tid * 100 + i, f"http://h{i}.test/", "127.0.0.1") for i in range(n)]
    )


def test_claim_report_collect_and_ownership():
    async def go():
        q = LocalTaskQueue()
        assert await q.claim("w", 1, 0.01) == []  # times out empty
        await q.submit([_task(1, 2), _task(2, 1)])
        got = await q.claim("w", 1, 0.01)
        assert [t.task_id for t in got] == [1]
        t = got[0]
        # A report from a worker that does not own the task is ignored.
        await q.report("other", [ItemResult(1, 0, t.items[0])])
        assert await q.collect(10, 0.01) == []
        await q.report("w", [ItemResult(1, 0, t.items[0])])
        assert q.stats().owned_tasks == 1
        await q.report("w", [ItemResult(1, 1, t.items[1])])
        assert q.stats().owned_tasks == 0 and q.stats().completed_tasks == 1
        results = await q.collect(10, 0.01)
        assert [r.item.item_id for r in results] == [100, 101]

    asyncio.run(go())


def test_release_hands_unreported_items_out_again():
    async def go():
        q = LocalTaskQueue()
        await q.submit([_task(1, 3)])
        [t] = await q.claim("a", 1, 0.01)
        await q.report("a", [ItemResult(1, 1, t.items[1])])
        assert await q.release("a") == 2
        [t2] = await q.claim("b", 1, 0.01)
        assert [i.item_id for i in t2.items] == [100, 102]
        # The old owner's late report does not count twice.
        await q.report("a", [ItemResult(1, 0, t.items[0])])
        await q.report("b", [ItemResult(t2.task_id, 0, t2.items[0])])
        ids = [r.item.item_id for r in await q.collect(10, 0.01)]
        assert ids == [101, 100]

    asyncio.run(go())


def test_close_wakes_waiters():
    async def go():
        q = LocalTaskQueue()
        waiter = asyncio.ensure_future(q.claim("w", 1, 5.0))
        await asyncio.sleep(0.01)
        await q.close()
        assert await asyncio.wait_for(waiter, 1.0) == []
        assert q.closed

    asyncio.run(go())
