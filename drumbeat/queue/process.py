"""Task hand-off to fetcher processes over pipes, with batched frames (no per-URL IPC).

The manager's side is :class:`ProcessTaskQueue`: it starts ``workers`` child processes
(``command``, e.g. ``python -m drumbeat.worker``), sends each its start-up object, and
then exchanges length-prefixed pickled frames on the child's stdin and stdout:

    manager -> worker   ("tasks", [Task, ...])   ("sync", n)   ("stop", None)
    worker -> manager   ("results", [ItemResult, ...], stats)  ("synced", n)
                        ("ended", task id, index, status, held_s, end_key, time, fetch_ms)

Each submit() sends at most one frame per worker. A task goes to the worker of its
partition, so that a host's requests reuse that worker's keep-alive connection, unless
that worker is much busier than the least loaded one (:func:`keeps_partition`); a pinned
task (``Task.pinned``: its items queue behind others on their lanes) always does. A
partition's worker is the one in its slot: a replacement takes the slot of the worker it
replaces, and a pinned task for an empty slot waits for the replacement. A
worker sends its results in batches (see :class:`WorkerQueue`), save those whose host's
next request waits for them. The queue keeps
server-side ownership: it knows the unreported items of every worker. When a worker
dies, each of them comes back as a result with the error ``fetcher_died`` (the worker
may have sent the request already, so only the manager, through its politeness
scheduler, may send it again), and a replacement is started, up to ``max_restarts``.

The worker's side is :class:`WorkerQueue`, the TaskQueue an in-process
:class:`drumbeat.fetcher.Fetcher` uses inside the child.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import pickle
import struct
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from drumbeat.queue.base import ItemResult, QueueStats, Task
from drumbeat.runtime.wake import Wake

log = logging.getLogger("drumbeat.queue")

_HEAD = struct.Struct("<I")
MAX_FRAME_BYTES = 1 << 30  # a frame this large means a corrupt stream, not a big batch
RESULT_BATCH = 256  # a worker sends its results when this many are waiting ...
RESULT_DELAY_S = 0.005  # ... or this long after the first of them
STATS_INTERVAL_S = 1.0  # a worker attaches its stats to a results frame this often
WORKER_DIED = "fetcher_died"  # the error of items whose worker exited before reporting them
# A task goes to its partition's worker unless that one has more than PARTITION_SHARE
# times the unreported items of the least loaded worker, plus PARTITION_SLACK (see
# keeps_partition).
PARTITION_SHARE = 2
PARTITION_SLACK = 2


class WorkerFailed(RuntimeError):
    """Fetcher processes keep dying; the crawl cannot go on."""


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The next frame's pickled bytes (decode with pickle.loads), or None at end of stream."""
    try:
        head = await reader.readexactly(_HEAD.size)
        (size,) = _HEAD.unpack(head)
        if size > MAX_FRAME_BYTES:
            raise ValueError(f"frame of {size} bytes")
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        return None


def keeps_partition(own: int, least: int) -> bool:
    """Whether a task goes to its partition's worker, which has ``own`` unreported
    items, when the least loaded worker has ``least``.

    A broad crawl's workers each hold many items (the crawl's concurrency shared among
    them), near one another: its hosts stay on their workers, whose keep-alive
    connections they reuse. A single site (with ``host_connections`` above 1) has a few
    items in flight, all of one partition: they go to another worker as soon as theirs
    holds a few more, so that one process busy parsing does not hold up the site's next
    requests while the other processes idle.
    """
    return own <= PARTITION_SHARE * least + PARTITION_SLACK


def encode_frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEAD.pack(len(data)) + data


@dataclass
class _Worker:
    name: str
    proc: asyncio.subprocess.Process
    slot: int  # the partitions ``p`` with ``p % workers == slot`` are this worker's
    owned: dict[int, tuple[Task, set[int]]] = field(default_factory=dict)
    outstanding: int = 0  # unreported items
    stats: dict[str, Any] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None


class ProcessTaskQueue:
    """The manager's side of the hand-off to fetcher processes; see the module docstring."""

    def __init__(
        self,
        command: Sequence[str],
        init: Any,
        workers: int,
        *,
        max_restarts: int = 10,
        sync_timeout_s: float = 30.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        """``env``: the workers' environment (default: this process's)."""
        if workers < 1:
            raise ValueError("ProcessTaskQueue needs at least one worker")
        self._command = list(command)
        self._env = None if env is None else dict(env)
        self._init = init
        self._size = workers
        self._max_restarts = max_restarts
        self._sync_timeout_s = sync_timeout_s
        self._workers: dict[str, _Worker] = {}
        # Each slot's worker (None: it died and its replacement is not up yet), and the
        # pinned tasks that wait for an empty slot's replacement.
        self._slots: list[_Worker | None] = [None] * workers
        self._held: dict[int, list[Task]] = {}
        self._names = (f"fetcher-{i}" for i in itertools.count())
        self._restarts = 0
        self._results: deque[ItemResult] = deque()
        self._result_ready = Wake()  # waited on once a manager's turn: no Task a wait
        self._synced: dict[str, int] = {}
        self._sync_seq = 0
        self._sync_event = asyncio.Event()
        self._closed = False
        self._failed: str | None = None
        self._submitted = self._completed = 0
        self.handoff_s = 0.0  # time spent pickling and unpickling frames in this process
        self._departed_stats: list[dict[str, Any]] = []  # stats of workers that exited

    async def start(self) -> None:
        for slot in range(self._size):
            await self._spawn(slot)

    async def _spawn(self, slot: int) -> None:
        name = next(self._names)
        proc = await asyncio.create_subprocess_exec(
            *self._command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=self._env,
            # A large pipe reader limit is not needed: frames are read with readexactly.
        )
        worker = _Worker(name, proc, slot)
        self._workers[name] = worker
        self._slots[slot] = worker
        self._send(worker, ("init", (name, self._init)))
        worker.reader = asyncio.ensure_future(self._read(worker))
        if held := self._held.pop(slot, None):
            self._give(worker, held)
            self._send(worker, ("tasks", held))

    def _send(self, worker: _Worker, message: tuple[str, Any]) -> None:
        stdin = worker.proc.stdin
        assert stdin is not None
        if stdin.is_closing():
            return  # the reader will notice the exit and hand its work to others
        started = time.thread_time()
        stdin.write(encode_frame(message))
        self.handoff_s += time.thread_time() - started

    # -- manager API ------------------------------------------------------------------------

    @property
    def partitions(self) -> int:
        return self._size

    pins_partitions = True  # a pinned task goes to its slot's worker, never another

    async def submit(self, tasks: Sequence[Task]) -> None:
        if not tasks:
            return
        if not self._workers:
            # Only after the last restart failed; collect() raises WorkerFailed. The
            # manager still counts these items in flight, so its checkpoint keeps them.
            return
        batches: dict[str, list[Task]] = {}
        slots = self._slots
        workers = list(self._workers.values())
        for task in tasks:
            slot = task.partition % len(slots)
            worker = slots[slot]
            if task.pinned:
                if worker is None:
                    # Its lanes' earlier items died with the slot's worker: the items
                    # wait for the replacement, never run beside them elsewhere.
                    self._held.setdefault(slot, []).append(task)
                    if self._restarts >= self._max_restarts:
                        self._fail_held(slot)  # no replacement will come
                    continue
            else:
                least = min(workers, key=lambda w: w.outstanding)
                if worker is None or not keeps_partition(worker.outstanding, least.outstanding):
                    worker = least
            self._give(worker, [task])
            batches.setdefault(worker.name, []).append(task)
        self._submitted += len(tasks)
        for name, batch in batches.items():
            self._send(self._workers[name], ("tasks", batch))

    @staticmethod
    def _give(worker: _Worker, tasks: list[Task]) -> None:
        """Make ``worker`` the owner of ``tasks`` (their items unreported)."""
        for task in tasks:
            worker.owned[task.task_id] = (task, set(range(len(task.items))))
            worker.outstanding += len(task.items)

    async def collect(self, max_results: int, timeout_s: float) -> list[ItemResult]:
        if not self._results and not self._closed:
            if self._failed is not None:
                raise WorkerFailed(self._failed)
            await self._result_ready.wait(timeout_s)
        out: list[ItemResult] = []
        while self._results and len(out) < max_results:
            out.append(self._results.popleft())
        if not self._results:
            self._result_ready.clear()
        return out

    async def sync(self) -> bool:
        """Ask every worker to fsync its WARC file; True when all confirmed in time."""
        self._sync_seq += 1
        seq = self._sync_seq
        for worker in list(self._workers.values()):
            self._send(worker, ("sync", seq))
        deadline = time.monotonic() + self._sync_timeout_s
        while True:
            waiting = [n for n in self._workers if self._synced.get(n, 0) < seq]
            if not waiting:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("no sync confirmation from %s", ", ".join(waiting))
                return False
            self._sync_event.clear()
            try:
                await asyncio.wait_for(self._sync_event.wait(), left)
            except TimeoutError:
                pass

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Stop the workers (they finish their WARC files) and wait for them to exit."""
        self._closed = True
        self._result_ready.set()
        workers = list(self._workers.values())
        for worker in workers:
            self._send(worker, ("stop", None))
            if worker.proc.stdin is not None:
                worker.proc.stdin.close()
        for worker in workers:
            try:
                await asyncio.wait_for(worker.proc.wait(), 15.0)
            except TimeoutError:
                log.warning("%s did not stop; killing it", worker.name)
                worker.proc.kill()
                await worker.proc.wait()
            if worker.reader is not None:
                await asyncio.gather(worker.reader, return_exceptions=True)

    def stats(self) -> QueueStats:
        owned = sum(len(w.owned) for w in self._workers.values())
        return QueueStats(
            pending_tasks=0,
            owned_tasks=owned,
            unreported_items=sum(w.outstanding for w in self._workers.values()),
            results_waiting=len(self._results),
            submitted_tasks=self._submitted,
            completed_tasks=self._completed,
        )

    def worker_stats(self) -> list[dict[str, Any]]:
        """The last stats each worker sent (workers that exited included)."""
        return self._departed_stats + [w.stats for w in self._workers.values() if w.stats]

    def worker_pids(self) -> dict[str, int]:
        """The pids of the live fetcher processes, by worker name (a worker started in
        place of one that died has a name of its own)."""
        return {name: worker.proc.pid for name, worker in self._workers.items()}

    # -- reading a worker ---------------------------------------------------------------------

    async def _read(self, worker: _Worker) -> None:
        stdout = worker.proc.stdout
        assert stdout is not None
        try:
            while True:
                frame = await read_frame(stdout)
                if frame is None:
                    break
                started = time.thread_time()
                message = pickle.loads(frame)
                self.handoff_s += time.thread_time() - started
                kind = message[0]
                if kind == "results":
                    self._accept(worker, message[1])
                    if message[2]:
                        worker.stats = message[2]
                elif kind == "ended":
                    self._ended(worker, *message[1:])
                elif kind == "synced":
                    self._synced[worker.name] = message[1]
                    self._sync_event.set()
        except Exception:  # a garbled stream: treat it like a dead worker
            log.exception("bad frame from %s", worker.name)
            worker.proc.kill()
        code = await worker.proc.wait()
        await self._departed(worker, code)

    def _accept(self, worker: _Worker, results: list[ItemResult]) -> None:
        accepted = 0
        for r in results:
            owned = worker.owned.get(r.task_id)
            if owned is None or r.index not in owned[1]:
                continue  # a stale report for work that was handed elsewhere
            owned[1].discard(r.index)
            worker.outstanding -= 1
            if not owned[1]:
                del worker.owned[r.task_id]
                self._completed += 1
            self._results.append(r)
            accepted += 1
        if accepted:
            self._result_ready.set()

    def _ended(
        self,
        worker: _Worker,
        task_id: int,
        index: int,
        status: int | None,
        held_s: float,
        end_key: int,
        started: float | None,
        fetch_ms: float | None,
    ) -> None:
        """A worker's notice that an item's request has ended (FetcherQueue.fetch_ended),
        handed to the manager with the results; the item stays unreported."""
        owned = worker.owned.get(task_id)
        if owned is None or index not in owned[1]:
            return  # its result came first, or its task went elsewhere
        notice = ItemResult(
            task_id,
            index,
            owned[0].items[index],
            status=status,
            log={"time": started, "fetch_ms": fetch_ms},
            held_s=held_s,
            end_key=end_key,
            fetch_ended=True,
        )
        self._results.append(notice)
        self._result_ready.set()

    def _fail_held(self, slot: int) -> None:
        """Report the items of the pinned tasks held for ``slot`` failed (WORKER_DIED):
        its worker will not be replaced."""
        for task in self._held.pop(slot, []):
            for index, item in enumerate(task.items):
                self._results.append(ItemResult(task.task_id, index, item, error=WORKER_DIED))
        self._result_ready.set()

    async def _departed(self, worker: _Worker, code: int) -> None:
        del self._workers[worker.name]
        self._slots[worker.slot] = None
        self._synced.pop(worker.name, None)
        self._sync_event.set()
        if worker.stats:
            self._departed_stats.append(worker.stats)
        if self._closed:
            return
        log.error(
            "%s exited with code %s; its %d unreported items are reported failed",
            worker.name,
            code,
            worker.outstanding,
        )
        for task, left in worker.owned.values():
            for index in sorted(left):
                self._results.append(
                    ItemResult(task.task_id, index, task.items[index], error=WORKER_DIED)
                )
        self._result_ready.set()
        if self._restarts < self._max_restarts:
            self._restarts += 1
            await self._spawn(worker.slot)
            return
        self._fail_held(worker.slot)
        if not self._workers:
            self._failed = (
                f"fetcher processes keep dying ({self._restarts} restarts); see drumbeat.log"
            )


class WorkerQueue:
    """The TaskQueue a Fetcher uses inside a worker process (see the module docstring).

    ``claim`` hands out the tasks the manager sent; ``report`` batches results into
    frames of up to RESULT_BATCH, sent at most RESULT_DELAY_S after the first waits, or
    at once with a result marked ``report_now`` (FetchItem); ``fetch_ended`` sends its
    notice at once.
    ``stats`` is called for the stats attached to a frame every STATS_INTERVAL_S.
    """

    def __init__(self, writer: asyncio.StreamWriter, stats: Any) -> None:
        self._writer = writer
        self._stats = stats
        self._pending: deque[Task] = deque()
        self._ready = Wake()  # waited on for each frame of tasks
        self._out: list[ItemResult] = []
        self._flush_handle: asyncio.TimerHandle | None = None
        self._last_stats = 0.0
        self._closed = False
        self.handoff_s = 0.0  # pickling frames; the worker adds its unpickling

    def add_tasks(self, tasks: list[Task]) -> None:
        self._pending.extend(tasks)
        self._ready.set()

    async def claim(self, worker: str, max_tasks: int, timeout_s: float) -> list[Task]:
        if not self._pending and not self._closed:
            await self._ready.wait(timeout_s)
        if self._closed:
            return []
        taken: list[Task] = []
        while self._pending and len(taken) < max_tasks:
            taken.append(self._pending.popleft())
        if not self._pending:
            self._ready.clear()
        return taken

    async def report(self, worker: str, results: Sequence[ItemResult]) -> None:
        self._out.extend(results)
        # A result its host's next request waits for goes at once (with the others of
        # this turn): batching would add up to RESULT_DELAY_S to every such request.
        if len(self._out) >= RESULT_BATCH or any(r.item.report_now for r in results):
            self.flush()
        elif self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_later(RESULT_DELAY_S, self.flush)

    async def fetch_ended(self, worker: str, notice: ItemResult) -> None:
        # At once, as the few fields the manager's side cannot find in the task it sent.
        log = notice.log or {}
        self.send(
            (
                "ended",
                notice.task_id,
                notice.index,
                notice.status,
                notice.held_s,
                notice.end_key,
                log.get("time"),
                log.get("fetch_ms"),
            )
        )

    def flush(self, *, with_stats: bool = False) -> None:
        """Send the waiting results now (and the stats when due or ``with_stats``)."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        now = time.monotonic()
        stats = None
        if with_stats or now - self._last_stats >= STATS_INTERVAL_S:
            stats, self._last_stats = self._stats(), now
        if not self._out and stats is None:
            return
        out, self._out = self._out, []
        self.send(("results", out, stats))

    def send(self, message: tuple[Any, ...]) -> None:
        if not self._writer.is_closing():
            started = time.thread_time()
            self._writer.write(encode_frame(message))
            self.handoff_s += time.thread_time() - started

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        self._closed = True
        self._ready.set()
