"""In-process TaskQueue for the standalone deployment (one manager, fetchers on one event loop).

Durability comes from the manager's checkpoint, which records every submitted item not yet
reported; this queue itself keeps nothing on disk.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Sequence

from drumbeat.queue.base import ItemResult, QueueStats, Task


class LocalTaskQueue:
    partitions = 1  # one process, one connection pool: nothing to keep apart
    # The standalone crawl's one Fetcher claims every task: a lane's items all meet there.
    pins_partitions = True

    def __init__(self) -> None:
        self._pending: deque[Task] = deque()
        # task_id -> (worker, task, unreported)
        self._owned: dict[int, tuple[str, Task, set[int]]] = {}
        self._results: deque[ItemResult] = deque()
        self._task_ready = asyncio.Condition()
        self._result_ready = asyncio.Condition()
        self._closed = False
        self._submitted = 0
        self._completed = 0
        self._reissue_ids = itertools.count(-1, -1)  # manager ids are >= 0

    async def submit(self, tasks: Sequence[Task]) -> None:
        if not tasks:
            return
        async with self._task_ready:
            self._pending.extend(tasks)
            self._submitted += len(tasks)
            self._task_ready.notify_all()

    async def claim(self, worker: str, max_tasks: int, timeout_s: float) -> list[Task]:
        async with self._task_ready:
            if not self._pending and not self._closed:
                try:
                    await asyncio.wait_for(
                        self._task_ready.wait_for(lambda: self._pending or self._closed), timeout_s
                    )
                except TimeoutError:
                    return []
            if self._closed:
                return []
            taken: list[Task] = []
            while self._pending and len(taken) < max_tasks:
                task = self._pending.popleft()
                self._owned[task.task_id] = (worker, task, set(range(len(task.items))))
                taken.append(task)
            return taken

    async def report(self, worker: str, results: Sequence[ItemResult]) -> None:
        accepted = []
        for r in results:
            owner = self._owned.get(r.task_id)
            if owner is None or owner[0] != worker or r.index not in owner[2]:
                continue  # a stale report for work that was reclaimed: drop it
            owner[2].discard(r.index)
            if not owner[2]:
                del self._owned[r.task_id]
                self._completed += 1
            accepted.append(r)
        if accepted:
            async with self._result_ready:
                self._results.extend(accepted)
                self._result_ready.notify_all()

    async def fetch_ended(self, worker: str, notice: ItemResult) -> None:
        owner = self._owned.get(notice.task_id)
        if owner is None or owner[0] != worker or notice.index not in owner[2]:
            return
        async with self._result_ready:
            self._results.append(notice)  # the item stays unreported
            self._result_ready.notify_all()

    async def collect(self, max_results: int, timeout_s: float) -> list[ItemResult]:
        async with self._result_ready:
            if not self._results and not self._closed:
                try:
                    await asyncio.wait_for(
                        self._result_ready.wait_for(lambda: self._results or self._closed),
                        timeout_s,
                    )
                except TimeoutError:
                    return []
            out: list[ItemResult] = []
            while self._results and len(out) < max_results:
                out.append(self._results.popleft())
            return out

    async def sync(self) -> bool:
        # In-process fetchers write through the manager's own WARC writer, which the
        # manager syncs as one of its durables.
        return True

    async def release(self, worker: str) -> int:
        returned = 0
        async with self._task_ready:
            for task_id, (owner, task, unreported) in list(self._owned.items()):
                if owner != worker:
                    continue
                del self._owned[task_id]
                items = [task.items[i] for i in sorted(unreported)]
                # A fresh task id: late reports for the old one are ignored, not double-counted.
                self._pending.appendleft(Task(task_id=next(self._reissue_ids), items=items))
                returned += len(items)
            self._task_ready.notify_all()
        return returned

    @property
    def closed(self) -> bool:
        return self._closed

    def stats(self) -> QueueStats:
        return QueueStats(
            pending_tasks=len(self._pending),
            owned_tasks=len(self._owned),
            unreported_items=sum(len(t.items) for t in self._pending)
            + sum(len(u) for _, _, u in self._owned.values()),
            results_waiting=len(self._results),
            submitted_tasks=self._submitted,
            completed_tasks=self._completed,
        )

    async def close(self) -> None:
        self._closed = True
        async with self._task_ready:
            self._task_ready.notify_all()
        async with self._result_ready:
            self._result_ready.notify_all()
