"""Cluster statistics: per-second counters from every node, rolled up to minute, hour, day.

Every node (a manager ``crawlA/0``, a fetcher ``host:pid``) counts events per queue (a
crawl's name) and counter (``pages``, ``errors``, ``bytes``, ...) in memory with
:meth:`StatsWriter.add` and writes them to Redis, one round trip, with
:meth:`StatsWriter.flush`. Counts of one second from many nodes add up (HINCRBY).
:meth:`StatsReader.roll_up` folds complete seconds into the minute, hour and day tiers
and :meth:`StatsReader.snapshot` reads rates and totals for ``drumbeat status`` and the
dashboard. Both aggregate as BloomReach's crawl queue does: the inputs form a matrix and
each aggregate is a row of a 0/1 selection matrix times it (:func:`selection`,
:func:`grouping`), one numpy product instead of nested loops.

Redis keys, all under ``prefix`` (``P``), every one bounded in number:

``P stats:s:<second>``
    hash ``<node>|<queue>|<counter>`` -> count, for the epoch second ``<second>``
    (``int(clock())`` at :meth:`~StatsWriter.add`). Writers give it a TTL of
    ``SECOND_KEEP_S + SECOND_SPARE_S``; roll-up deletes it ``SECOND_KEEP_S`` after it.
``P stats:m:<minute>``, ``P stats:h:<hour>``, ``P stats:d:<day>``
    hash ``<queue>|<counter>`` -> count for the epoch minute (``second // 60``), hour
    (``// 3600``) or UTC day (``// 86400``); node is summed out, so a tier's size does not
    grow with fetcher restarts. :data:`TIERS` gives how many buckets each tier keeps
    (TTL and deletion by roll-up) and how many a snapshot totals.
``P stats:rolled``
    string: the last second folded into the tiers (the roll-up watermark).
``P stats:alive``
    sorted set node -> the clock time of its last flush; flush drops nodes not seen for
    ``FORGET_S``.

Names must be non-empty and free of ``|``. Counts are integers (``n >= 0``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

# redis is imported where Redis is talked to, not here: a standalone crawl's manager uses
# History only, and starts sooner without loading redis-py.
if TYPE_CHECKING:
    from pathlib import Path

    from numpy.typing import NDArray
    from redis.asyncio import Redis
    from redis.asyncio.client import Pipeline

    Matrix = NDArray[np.int64]

_T = TypeVar("_T")
Clock = Callable[[], float]
Rates = Mapping[str, Mapping[str, float]]  # name -> counter -> events per second

SEP = "|"
# Per-second buckets are kept this long: rate windows reach back at most this far, and a
# roll-up must run at least this often or the seconds it missed are lost to the tiers.
SECOND_KEEP_S = 300
# The writers' TTL is this much longer than SECOND_KEEP_S, so that roll-up (which reads
# the clock it is given) normally deletes the buckets and the TTL only catches leftovers.
SECOND_SPARE_S = 60
# A second is complete, and rolled up, this long after it ends: writers flush about once
# a second, and a count flushed into a second already rolled up never reaches the tiers.
SETTLE_S = 5
# A node that has not flushed for this long is no longer alive (snapshot's default).
ALIVE_S = 10.0
# A node not seen for this long leaves the alive set, which stays bounded with churn.
FORGET_S = 86_400
# Concurrent roll-ups retry when another one moved the watermark under them.
ROLL_UP_TRIES = 5


@dataclass(frozen=True)
class Tier:
    name: str
    code: str  # the letter in its keys
    period_s: int  # one bucket's length
    kept: int  # buckets kept in Redis (TTL, and deletion by roll-up)
    span: int  # buckets a snapshot totals, the current (partial) one included


# Each period divides the next. ``kept`` leaves a margin over ``span`` so that readers
# whose clocks lag a little still find their buckets.
TIERS = (
    Tier("minute", "m", 60, 90, 60),  # the last 60 minutes
    Tier("hour", "h", 3600, 36, 24),  # the last 24 hours
    Tier("day", "d", 86_400, 32, 30),  # the last 30 days
)


def selection(rows: Sequence[_T], groups: Sequence[Callable[[_T], bool]]) -> Matrix:
    """The 0/1 matrix ``S`` with ``S[g, r] = 1`` where ``groups[g](rows[r])``.

    With ``counts`` a matrix of one row per entry of ``rows``, ``S @ counts`` holds, for
    each group, the sum of the rows it selects (e.g. "all nodes of queue Q", "all
    fetchers"); a row may belong to several groups or none.
    """
    matrix = np.zeros((len(groups), len(rows)), dtype=np.int64)
    for g, selects in enumerate(groups):
        for r, row in enumerate(rows):
            if selects(row):
                matrix[g, r] = 1
    return matrix


def grouping(labels: Sequence[_T]) -> tuple[list[_T], Matrix]:
    """The distinct ``labels`` (sorted) and the 0/1 matrix selecting, for each, the rows
    that carry it: the :func:`selection` of a partition, built without a Python loop per
    cell."""
    names = sorted(set(labels))  # type: ignore[type-var]
    index = {name: i for i, name in enumerate(names)}
    codes = np.fromiter((index[label] for label in labels), dtype=np.int64, count=len(labels))
    matrix = (np.arange(len(names), dtype=np.int64)[:, None] == codes[None, :]).astype(np.int64)
    return names, matrix


def node_role(node: str) -> str:
    """``manager`` for a manager's name (``crawl/shard``), else ``fetcher`` (``host:pid``)."""
    return "manager" if "/" in node else "fetcher"


def _check_name(kind: str, name: str) -> None:
    if not name or SEP in name:
        raise ValueError(f"stats: a {kind} name must be non-empty and free of {SEP!r}: {name!r}")


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class _Keys:
    def __init__(self, prefix: str) -> None:
        self.base = f"{prefix}stats:"
        self.rolled = f"{self.base}rolled"
        self.alive = f"{self.base}alive"

    def second(self, second: int) -> str:
        return f"{self.base}s:{second}"

    def bucket(self, tier: Tier, index: int) -> str:
        return f"{self.base}{tier.code}:{index}"


class StatsWriter:
    """One node's counters: :meth:`add` in memory (cheap, no I/O), :meth:`flush` writes
    them to Redis. Call flush about once a second (well within ``SETTLE_S``)."""

    def __init__(self, redis: Redis, prefix: str, node: str, *, clock: Clock = time.time) -> None:
        _check_name("node", node)
        self._redis = redis
        self._keys = _Keys(prefix)
        self.node = node
        self._clock = clock
        self._pending: dict[tuple[int, str, str], int] = {}

    @property
    def pending(self) -> int:
        """Counts (second, queue, counter) waiting for the next flush."""
        return len(self._pending)

    def add(self, queue: str, counter: str, n: int = 1) -> None:
        """Count ``n`` events of ``counter`` on ``queue`` in the current second."""
        key = (int(self._clock()), queue, counter)
        try:
            self._pending[key] += n
        except KeyError:
            _check_name("queue", queue)
            _check_name("counter", counter)
            self._pending[key] = n

    async def flush(self) -> None:
        """Add the counts since the last flush to their per-second buckets and record this
        node as alive, in one MULTI/EXEC round trip. If Redis cannot be reached the counts
        stay for the next flush (a reply lost after Redis applied them counts them twice)."""
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import TimeoutError as RedisTimeoutError

        pending, self._pending = self._pending, {}
        now = self._clock()
        seconds = {second for second, _, _ in pending}
        async with self._redis.pipeline(transaction=True) as tx:
            for (second, queue, counter), n in pending.items():
                field = f"{self.node}{SEP}{queue}{SEP}{counter}"
                tx.hincrby(self._keys.second(second), field, n)
            for second in seconds:
                tx.expire(self._keys.second(second), SECOND_KEEP_S + SECOND_SPARE_S)
            tx.zadd(self._keys.alive, {self.node: now})
            tx.zremrangebyscore(self._keys.alive, "-inf", now - FORGET_S)
            try:
                await tx.execute()
            except (RedisConnectionError, RedisTimeoutError):
                for key, n in pending.items():
                    self._pending[key] = self._pending.get(key, 0) + n
                raise


@dataclass(frozen=True)
class Snapshot:
    """Rates over the last ``window_s`` complete seconds and totals per tier.

    ``total``, ``queues``, ``nodes`` and ``roles`` are events per second (counter ->
    rate; the last three keyed first by queue, node, or :func:`node_role`). ``alive`` maps
    each node that flushed within the reader's ``alive_s`` to the seconds since.
    ``tiers`` maps each :data:`TIERS` name to queue -> counter -> events in its span
    (the last 60 minutes, 24 hours, 30 days), as far as roll-up has folded them.
    """

    at: float
    window_s: int
    total: Mapping[str, float]
    queues: Rates
    nodes: Rates
    roles: Rates
    alive: Mapping[str, float]
    tiers: Mapping[str, Mapping[str, Mapping[str, int]]]

    def as_dict(self) -> dict[str, Any]:
        """Plain dicts, lists and numbers (``drumbeat status --json``)."""

        def plain(value: object) -> object:
            if isinstance(value, Mapping):
                return {str(k): plain(v) for k, v in value.items()}
            return value

        return {
            "at": self.at,
            "window_s": self.window_s,
            "total": plain(self.total),
            "queues": plain(self.queues),
            "nodes": plain(self.nodes),
            "roles": plain(self.roles),
            "alive": plain(self.alive),
            "tiers": plain(self.tiers),
        }


def _matrix(hashes: Sequence[Mapping[Any, Any]]) -> tuple[list[str], Matrix]:
    """The fields of ``hashes`` (sorted) and their counts, one row per hash."""
    decoded = [{_text(k): int(v) for k, v in h.items()} for h in hashes]
    fields = sorted({f for h in decoded for f in h})
    column = {f: i for i, f in enumerate(fields)}
    counts = np.zeros((len(decoded), len(fields)), dtype=np.int64)
    for row, h in enumerate(decoded):
        for f, n in h.items():
            counts[row, column[f]] = n
    return fields, counts


def _nested(names: Iterable[str], counters: Sequence[str], sums: NDArray[Any]) -> dict[str, Any]:
    """name -> counter -> value, from a matrix of one row per name, zero cells left out."""
    return {
        name: {c: row[j].item() for j, c in enumerate(counters) if row[j]}
        for name, row in zip(names, sums)
    }


def _pivot(
    rows: Sequence[_T], columns: Sequence[str], values: NDArray[Any]
) -> tuple[list[_T], list[str], Matrix]:
    """Entry ``i`` of ``values`` belongs to row ``rows[i]`` and column ``columns[i]``: the
    rows, the columns and the matrix of sums, ``R @ diag(values) @ C.T`` with ``R`` and
    ``C`` the :func:`grouping` matrices of the rows and columns."""
    row_names, pick_rows = grouping(rows)
    column_names, pick_columns = grouping(columns)
    return row_names, column_names, (pick_rows * values) @ pick_columns.T


class StatsReader:
    """Rolls the per-second buckets up and reads rates and totals (any process, any number
    of them at once)."""

    def __init__(
        self, redis: Redis, prefix: str, *, clock: Clock = time.time, alive_s: float = ALIVE_S
    ) -> None:
        self._redis = redis
        self._keys = _Keys(prefix)
        self._clock = clock
        self.alive_s = alive_s

    async def roll_up(self) -> int:
        """Fold the complete seconds not yet folded (those that ended ``SETTLE_S`` ago,
        back to ``SECOND_KEEP_S``) into their minute, hour and day buckets, and delete the
        buckets past their tier's keep. Returns how many seconds this call folded.

        Idempotent and safe to run from several processes at once: the fold, the
        deletions and the move of the watermark are one MULTI/EXEC under WATCH of the
        watermark and the seconds read, so a call that raced another (or a late writer)
        starts over and folds only what is still unfolded.
        """
        from redis.exceptions import WatchError

        settled = int(self._clock()) - SETTLE_S  # seconds before it are complete
        for _ in range(ROLL_UP_TRIES):
            async with self._redis.pipeline(transaction=True) as tx:
                try:
                    await tx.watch(self._keys.rolled)
                    watermark = await tx.get(self._keys.rolled)
                    first = settled - SECOND_KEEP_S
                    if watermark is not None:
                        first = max(first, int(watermark) + 1)
                    if first >= settled:
                        return 0
                    keys = [self._keys.second(s) for s in range(first, settled)]
                    await tx.watch(*keys)
                    async with self._redis.pipeline(transaction=False) as read:
                        for key in keys:
                            read.hgetall(key)
                        hashes = await read.execute()
                    tx.multi()  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
                    self._fold(tx, range(first, settled), hashes)
                    self._drop_old(tx, first, settled)
                    tx.set(self._keys.rolled, settled - 1)
                    await tx.execute()
                    return settled - first
                except WatchError:
                    continue
        return 0

    def _fold(
        self, tx: Pipeline, seconds: Sequence[int], hashes: Sequence[Mapping[Any, Any]]
    ) -> None:
        """Queue on ``tx`` the HINCRBYs that add ``hashes`` (one per second) to the tiers:
        seconds are summed into minutes, those into hours, those into days, each a 0/1
        :func:`grouping` product."""
        fields, counts = _matrix(hashes)
        if not fields:
            return
        names, project = grouping([f.split(SEP, 1)[1] for f in fields])  # node summed out
        sums = counts @ project.T
        labels: Sequence[int] = seconds
        period = 1
        for tier in TIERS:
            buckets, pick = grouping([label * period // tier.period_s for label in labels])
            sums = pick @ sums
            for bucket, row in zip(buckets, sums):
                key = self._keys.bucket(tier, bucket)
                for j in np.flatnonzero(row):
                    tx.hincrby(key, names[j], int(row[j]))
                tx.expire(key, tier.kept * tier.period_s)
            labels, period = buckets, tier.period_s

    def _drop_old(self, tx: Pipeline, first: int, settled: int) -> None:
        """Queue on ``tx`` the deletion of the buckets that the move of the watermark from
        ``first`` to ``settled`` takes past their keep (by this reader's clock, so that a
        test's clock bounds memory as real time does)."""
        old = [self._keys.second(s) for s in range(first - SECOND_KEEP_S, settled - SECOND_KEEP_S)]
        for tier in TIERS:
            gone = range(first // tier.period_s - tier.kept, settled // tier.period_s - tier.kept)
            old += [self._keys.bucket(tier, b) for b in gone]
        if old:
            tx.delete(*old)

    async def series(self, tier_name: str, queue: str | None = None) -> dict[str, Any]:
        """The buckets of one of :data:`TIERS` over its span, oldest first, the current
        (partial) one last: ``{"period_s", "start"`` (the epoch second the first begins)
        ``, "series": {counter: [count per bucket]}}``, of ``queue`` or of all queues
        summed."""
        tier = next((t for t in TIERS if t.name == tier_name), None)
        if tier is None:
            raise ValueError(f"tier: one of {', '.join(t.name for t in TIERS)}")
        last = int(self._clock()) // tier.period_s
        buckets = range(last - tier.span + 1, last + 1)
        async with self._redis.pipeline(transaction=False) as read:
            for bucket in buckets:
                read.hgetall(self._keys.bucket(tier, bucket))
            hashes = await read.execute()
        fields, counts = _matrix(hashes)
        series: dict[str, Any] = {}
        for j, f in enumerate(fields):
            q, counter = f.split(SEP, 1)
            if queue is None or q == queue:
                series[counter] = series.get(counter, 0) + counts[:, j]
        return {
            "period_s": tier.period_s,
            "start": buckets[0] * tier.period_s,
            "series": {c: v.tolist() for c, v in sorted(series.items())},
        }

    async def snapshot(self, *, window_s: int = 10) -> Snapshot:
        """Rates over the last ``window_s`` complete seconds (1 to ``SECOND_KEEP_S``), the
        tiers' totals and the alive nodes, read in one round trip."""
        if not 1 <= window_s <= SECOND_KEEP_S:
            raise ValueError(f"stats: window_s must be 1 to {SECOND_KEEP_S}, not {window_s}")
        now = self._clock()
        current = int(now)
        async with self._redis.pipeline(transaction=False) as read:
            for second in range(current - window_s, current):
                read.hgetall(self._keys.second(second))
            for tier in TIERS:
                last = current // tier.period_s
                for bucket in range(last - tier.span + 1, last + 1):
                    read.hgetall(self._keys.bucket(tier, bucket))
            read.zrangebyscore(self._keys.alive, now - self.alive_s, "+inf", withscores=True)
            replies = await read.execute()
        seen = replies.pop()
        total, queues, nodes, roles = _rates(replies[:window_s], window_s)
        tiers: dict[str, dict[str, Any]] = {}
        start = window_s
        for tier in TIERS:
            fields, counts = _matrix(replies[start : start + tier.span])
            start += tier.span
            parts = [f.split(SEP) for f in fields]
            rows, columns, sums = _pivot(
                [q for q, _ in parts], [c for _, c in parts], counts.sum(0)
            )
            tiers[tier.name] = _nested(rows, columns, sums)
        return Snapshot(
            at=now,
            window_s=window_s,
            total=total,
            queues=queues,
            nodes=nodes,
            roles=roles,
            alive={_text(node): now - score for node, score in seen},
            tiers=tiers,
        )


def _rates(
    hashes: Sequence[Mapping[Any, Any]], window_s: int
) -> tuple[dict[str, float], Rates, Rates, Rates]:
    """Total, per-queue, per-node and per-role rates of the per-second ``hashes``: the
    window's counts form a matrix of (node, queue) rows by counters, and each aggregate is
    a 0/1 selection of its rows."""
    fields, counts = _matrix(hashes)
    parts = [f.split(SEP) for f in fields]
    cells, counters, matrix = _pivot(
        [(n, q) for n, q, _ in parts], [c for *_, c in parts], counts.sum(0)
    )
    rates = matrix / window_s
    queue_names, by_queue = grouping([q for _, q in cells])
    node_names, by_node = grouping([n for n, _ in cells])
    role_names, by_role = grouping([node_role(n) for n, _ in cells])
    everything = selection(cells, [lambda _: True])
    total = _nested(["all"], counters, everything @ rates).get("all", {})
    return (
        total,
        _nested(queue_names, counters, by_queue @ rates),
        _nested(node_names, counters, by_node @ rates),
        _nested(role_names, counters, by_role @ rates),
    )


# --- One crawl's history, in RAM: fixed-size rings saved with its checkpoints ---------


@dataclass(frozen=True)
class Ring:
    name: str  # the span it covers, as /api/history?span= names it
    period_s: int  # one bucket's length; buckets are aligned on the epoch (UTC)
    slots: int  # buckets kept: the ring's span is period_s * slots


# A crawl's history (issue 50): per second for an hour, per minute for a day, per hour
# for 30 days, per day for 10 years. Fixed sizes, so the RAM (and the file) is the same
# on the first day and the thousandth: 9,420 buckets of len(HISTORY_SERIES) int64s.
RINGS = (
    Ring("hour", 1, 3600),
    Ring("day", 60, 1440),
    Ring("month", 3600, 720),
    Ring("all", 86_400, 3660),
)
HISTORY_SERIES = ("pages", "bytes", "fetches", "errors", "dropped")
HISTORY_VERSION = 1


class History:
    """Counts per bucket of each :data:`RINGS` ring, from cumulative totals sampled about
    once a second (:meth:`observe`): a count lands in the bucket of the second it was
    seen in, in every ring at once.

    Saved into a checkpoint's directory (:meth:`saver`, like STAR's table) and read back
    at a restart (:meth:`load`), so the history of a crawl survives its restarts; the
    seconds between the last checkpoint and a crash are lost.

    ``history.npz`` (numpy's savez_compressed, no pickles): ``version`` (int64), ``series``
    (unicode array of the series' names, the columns), ``first`` (int64: the epoch
    second of the first count, -1 for none), ``last`` (int64 per ring: the index,
    ``epoch_second // period_s``, of its newest bucket, -1 for none), and one
    ``slots x len(series)`` int64 array per ring, named by the ring, bucket ``i`` at row
    ``i % slots``.
    """

    FILE = "history.npz"

    def __init__(self, series: Sequence[str] = HISTORY_SERIES, *, clock: Clock = time.time) -> None:
        self.series = tuple(series)
        self._clock = clock
        self._values = {r.name: np.zeros((r.slots, len(self.series)), np.int64) for r in RINGS}
        self._last = {r.name: -1 for r in RINGS}
        self.first = -1
        self._totals: NDArray[np.int64] | None = None

    def observe(self, totals: Sequence[int]) -> None:
        """Cumulative ``totals`` (one per series): counts their increase since the last
        call now. The first call, or totals lower than the last (another run's counters),
        only set the baseline."""
        current = np.asarray(totals, dtype=np.int64)
        last, self._totals = self._totals, current
        if last is None or (current < last).any():
            return
        self.add(current - last)

    def add(self, counts: Sequence[int] | NDArray[np.int64]) -> None:
        """Add ``counts`` (one per series) to the buckets of the current second."""
        second = int(self._clock())
        if self.first < 0:
            self.first = second
        row = np.asarray(counts, dtype=np.int64)
        for ring in RINGS:
            bucket = second // ring.period_s
            self._advance(ring, bucket)
            if bucket > self._last[ring.name] - ring.slots:
                self._values[ring.name][bucket % ring.slots] += row

    def _advance(self, ring: Ring, bucket: int) -> None:
        """Make ``bucket`` the ring's newest, zeroing the slots it reuses."""
        last = self._last[ring.name]
        if bucket <= last:
            return
        values = self._values[ring.name]
        if last < 0 or bucket - last >= ring.slots:
            values[:] = 0
        else:
            values[np.arange(last + 1, bucket + 1) % ring.slots] = 0
        self._last[ring.name] = bucket

    def span(self, name: str, last: int | None = None) -> dict[str, Any]:
        """The ring ``name``, oldest bucket first, up to the current one and from the
        first count on (only the ``last`` buckets, if given): ``{"span", "period_s",
        "start"`` (the epoch second the first bucket begins)``, "series": {name: [count
        per bucket]}}``."""
        ring = next((r for r in RINGS if r.name == name), None)
        if ring is None:
            raise ValueError(f"span: one of {', '.join(r.name for r in RINGS)}")
        now = int(self._clock()) // ring.period_s
        self._advance(ring, now)
        newest = self._last[ring.name]
        oldest = newest - ring.slots + 1
        if self.first >= 0:
            oldest = max(oldest, self.first // ring.period_s)
        else:
            oldest = newest + 1
        if last is not None:
            oldest = max(oldest, newest - last + 1)
        rows = self._values[ring.name][np.arange(oldest, newest + 1) % ring.slots]
        return {
            "span": ring.name,
            "period_s": ring.period_s,
            "start": oldest * ring.period_s,
            "series": {s: rows[:, j].tolist() for j, s in enumerate(self.series)},
        }

    def saver(self) -> Callable[[Path], None]:
        """A call that saves the rings as they are now into a directory, whatever happens
        to them meanwhile (a checkpoint writes its files in another thread)."""
        arrays: dict[str, Any] = {name: v.copy() for name, v in self._values.items()}
        arrays["version"] = np.int64(HISTORY_VERSION)
        arrays["series"] = np.array(self.series)
        arrays["first"] = np.int64(self.first)
        arrays["last"] = np.array([self._last[r.name] for r in RINGS], dtype=np.int64)

        def save(directory: Path) -> None:
            with open(directory / self.FILE, "wb") as f:
                np.savez_compressed(f, **arrays)  # mostly zeros until years have passed
                f.flush()
                os.fsync(f.fileno())

        return save

    def load(self, directory: Path) -> bool:
        """Take the rings saved in ``directory`` (False if there are none, or they are
        unreadable: the history then starts anew). Series are matched by name."""
        path = directory / self.FILE
        try:
            with np.load(path, allow_pickle=False) as z:
                if int(z["version"]) != HISTORY_VERSION:
                    return False
                saved = [str(s) for s in z["series"]]
                last = [int(x) for x in z["last"]]
                values = {r.name: np.array(z[r.name]) for r in RINGS}
                first = int(z["first"])
        except (OSError, KeyError, ValueError):
            return False
        for ring, newest in zip(RINGS, last):
            mine = np.zeros((ring.slots, len(self.series)), np.int64)
            got = values[ring.name]
            if got.shape != (ring.slots, len(saved)):
                return False
            for j, s in enumerate(self.series):
                if s in saved:
                    mine[:, j] = got[:, saved.index(s)]
            self._values[ring.name] = mine
            self._last[ring.name] = newest
        self.first = first
        return True
