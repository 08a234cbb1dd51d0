"""The cluster's task queue on Redis (BloomReach's crawl queue, Polybot's partitions).

Roles: each of a crawl's M managers owns one partition of its URLs (queue.partition) and
submits politeness-cleared tasks; fetchers on any machine claim tasks of every crawl on
the Redis, fetch them and report the results to the task's manager. Redis holds only the
tasks under way, the results on their way back, the links forwarded between partitions
and small bookkeeping: the frontier stays on the managers' disks.

Keys, all under a prefix ``P`` (default ``drumbeat:``)::

    P crawls                      hash   crawl -> weight (weighted fair queuing)
    P passes, P vt                hash, string  the claims' stride schedule (CLAIM)
    P c:C:meta                    hash   partitions, settings (JSON, for the fetchers)
    P c:C:pending                 list   refs "I:E:id" of tasks no fetcher holds (FIFO)
    P c:C:tasks                   hash   ref -> task (pickled), pending or held
    P c:C:epoch:I                 string manager I's run counter: a ref's E
    P c:C:results:I               list   (E, [ItemResult]) batches for manager I
    P c:C:orphans:I               list   refs of I's tasks whose fetcher was taken for dead
    P c:C:inbox:I                 list   ([FoundURLs], [FoundEdges]) forwarded to I
    P c:C:taken:I                 list   inbox entries I took, kept until a checkpoint
                                         that holds them is live
    P c:C:idle                    hash   I -> 1 while manager I has nothing left
    P c:C:done                    string set once every partition is idle at once
    P c:C:mgr:I                   hash   manager I's figures for `drumbeat status` (TTL)
    P workers                     zset   fetcher -> last heartbeat (Redis time, ms)
    P w:F                         list   "C\\x1fref" of the tasks fetcher F holds
    P w:F:info                    hash   fetcher F's host, pid, slots, WARC sync (TTL)
    P syncseq                     string WARC sync requests (ManagerQueue.sync)
    P wake                        list   tokens that wake fetchers waiting for tasks
    P ip:A                        hash   IP A's lease: holder, until, free_at (ms)

Ownership stays with the server, as in BloomReach: a claim moves a task's ref into the
fetcher's list ``w:F`` in one Lua script, and only the fetcher's report of the task's
last item (results and removal in one transaction) or the reaper ends it. A fetcher that
misses heartbeats for ``heartbeat_timeout_s`` is taken for dead by whichever manager
notices first: its refs go to their managers' ``orphans`` lists, and each manager turns
the unreported items into ``fetcher_died`` results, which its politeness scheduler
retries (the request may have been sent) up to the retry limit: a task that keeps killing
fetchers is given up, and counted, not retried forever.

A manager keeps up to twice the fetch slots of the live fetchers in flight (its share of
them, :func:`in_flight_budget`): a fetcher with room then finds a ready task in Redis
at once instead of waiting for the manager's next turn.

Every call goes through :class:`RedisLink`, which waits out an outage (connection
refused, reset, timeout, Redis loading its data) with back-off, saying so in the log
once, and retries; each operation is safe to repeat (a task is added once, results and
forwarded links are idempotent, a fetcher re-reads its list ``w:F``).

Pickles cross Redis, so they are read with an unpickler that builds only the queue's
own classes (:func:`loads`): whoever can write to the Redis cannot run code in a
drumbeat process.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import logging
import os
import pickle
import random
import socket
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from copy import copy
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    BusyLoadingError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from drumbeat.queue.base import (
    FoundEdges,
    FoundURLs,
    ItemResult,
    QueueStats,
    Task,
)
from drumbeat.queue.partition import Splitter
from drumbeat.stats import SEP as SEP_STATS
from drumbeat.stats import StatsReader, StatsWriter

log = logging.getLogger("drumbeat.cluster")

DEFAULT_PREFIX = "drumbeat:"
WORKER_DIED = "fetcher_died"  # as queue.process: the manager retries such items
SEP = "\x1f"
ROLLUP_INTERVAL_S = 5.0  # managers fold per-second stats into minutes, hours, days
FLEET_INTERVAL_S = 1.0  # how often a manager counts the live fetchers' slots
# A crawl keeps this many times the live fetchers' slots in flight: one share fetching,
# the rest ready in Redis, so that a fetcher with room never waits for a manager's turn.
IN_FLIGHT_PER_SLOT = 2
# The most a manager sizes its budget to from the fleet: items in flight are held in its
# RAM and in Redis, so they stay bounded whatever the number of fetchers.
MAX_FLEET_IN_FLIGHT = 20_000
_T = TypeVar("_T")

# Errors that mean "Redis is not there right now": waited out, never fatal.
OUTAGE_ERRORS: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    BusyLoadingError,
    TryAgainError,
    ConnectionError,
    OSError,
)


async def _stop(task: asyncio.Task[None] | None) -> None:
    """Cancel ``task`` and wait for its end, cancelling again while it runs on: on Python
    3.11, asyncio.wait_for (redis-py's send under a socket timeout) swallows a
    cancellation that arrives as its operation completes (CPython gh-86296)."""
    while task is not None and not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=0.1)


def text(value: object) -> str:
    """A Redis reply (bytes) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


class ClusterError(RuntimeError):
    """The cluster cannot be joined as asked (one line for the operator)."""


class RedisUnreachable(ClusterError):
    """Redis does not answer now (refused, reset, timed out, loading): a process may wait
    for it, where a refusal (a password) is final."""


# What close() gives up on: Redis gone (or the wait for it given up: ClusterError), or
# too slow to say goodbye to.
_CLOSE_ERRORS: tuple[type[BaseException], ...] = (TimeoutError, ClusterError, *OUTAGE_ERRORS)


# -- pickles --------------------------------------------------------------------------

_ALLOWED = {
    ("drumbeat.queue.base", name)
    for name in ("Task", "FetchItem", "ItemResult", "FoundURLs", "FoundEdges")
}


class _QueueUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not a queue class")
        return super().find_class(module, name)


def dumps(obj: object) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> Any:
    """Unpickle ``data``, building no class but the queue's own (see the module docstring)."""
    return _QueueUnpickler(io.BytesIO(data)).load()


# -- keys -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str = DEFAULT_PREFIX

    @property
    def crawls(self) -> str:
        return self.prefix + "crawls"

    @property
    def workers(self) -> str:
        return self.prefix + "workers"

    @property
    def wake(self) -> str:
        return self.prefix + "wake"

    @property
    def syncseq(self) -> str:
        return self.prefix + "syncseq"

    def crawl(self, crawl: str, name: str) -> str:
        return f"{self.prefix}c:{crawl}:{name}"

    def part(self, crawl: str, name: str, part: int) -> str:
        return f"{self.prefix}c:{crawl}:{name}:{part}"

    def worker(self, worker: str) -> str:
        return f"{self.prefix}w:{worker}"

    def worker_info(self, worker: str) -> str:
        return f"{self.prefix}w:{worker}:info"


def task_ref(part: int, epoch: int, task: Task) -> str:
    """A task's name in Redis: its manager's partition and run, its id, its size."""
    return f"{part}:{epoch}:{task.task_id}:{len(task.items)}"


def parse_ref(ref: str) -> tuple[int, int, int]:
    """(partition, epoch, task id) of a task_ref."""
    part, epoch, task_id, _ = ref.split(":")
    return int(part), int(epoch), int(task_id)


# -- Lua scripts ----------------------------------------------------------------------
# Keys are built inside the scripts from the prefix (one Redis, not Redis Cluster).

_NOW_MS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# ARGV: prefix, crawl, ref1, blob1, ref2, blob2, ...  A task already there is not added
# again (a retried submit). Wakes up to 8 idle fetchers (tokens in the wake list).
SUBMIT = """
local P, C = ARGV[1], ARGV[2]
local tasks, pending = P..'c:'..C..':tasks', P..'c:'..C..':pending'
local n = 0
for i = 3, #ARGV, 2 do
  if redis.call('HSETNX', tasks, ARGV[i], ARGV[i+1]) == 1 then
    redis.call('RPUSH', pending, ARGV[i]); n = n + 1
  end
end
for _ = 1, math.min(n, 8) do redis.call('RPUSH', P..'wake', 1) end
if n > 0 then redis.call('LTRIM', P..'wake', -64, -1) end
return n
"""

# ARGV: prefix, worker, max_items, request id.  Heartbeats the worker; picks, among the crawls with
# pending tasks, the one whose pass is lowest (stride scheduling: a crawl's pass grows by
# items / weight with each claim, and one back from idle starts at the current virtual
# time, so shares of items follow the weights exactly and none starves); moves its tasks
# into the worker's list while they hold at most max_items items (at least one task).
# Returns
# {absent, crawl, ref1, blob1, ...} or {absent}: absent is 1 when the worker had been
# reaped (taken for dead) since its last call. A call repeated with the same request id
# (its reply lost to a connection error) gets the same tasks again, not new ones: no
# task stays held by a fetcher that does not know it holds it.
CLAIM = (
    """
local P, W, n, req = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
"""
    + _NOW_MS
    + """
local absent = redis.call('ZADD', P..'workers', now, W)
local mine, last = P..'w:'..W, P..'w:'..W..':claim'
if redis.call('HGET', last, 'id') == req then
  -- A retry (its reply was lost): the same tasks again, the last k of the list.
  local C, k = redis.call('HGET', last, 'crawl'), tonumber(redis.call('HGET', last, 'k'))
  local out = {0}
  if k == 0 then return out end
  out[2] = C
  for _, entry in ipairs(redis.call('LRANGE', mine, -k, -1)) do
    local ref = string.sub(entry, #C + 2)
    local blob = redis.call('HGET', P..'c:'..C..':tasks', ref)
    if blob then out[#out+1] = ref; out[#out+1] = blob end
  end
  return out
end
redis.call('HSET', last, 'id', req, 'k', 0)
redis.call('PEXPIRE', last, 3600000)
local crawls = redis.call('HGETALL', P..'crawls')
local vt = tonumber(redis.call('GET', P..'vt') or '0')
local C, pass, weight = nil, nil, nil
for i = 1, #crawls, 2 do
  local w = tonumber(crawls[i+1])
  if w and w > 0 and redis.call('LLEN', P..'c:'..crawls[i]..':pending') > 0 then
    local p = math.max(vt, tonumber(redis.call('HGET', P..'passes', crawls[i]) or '0'))
    if C == nil or p < pass then C, pass, weight = crawls[i], p, w end
  end
end
if C == nil then return {absent} end
redis.call('SET', P..'vt', tostring(pass))
local out = {absent, C}
local tasks = P..'c:'..C..':tasks'
local items, k = 0, 0
local pending = P..'c:'..C..':pending'
while items < n do
  local ref = redis.call('LINDEX', pending, 0)
  if not ref then break end
  local size = tonumber(string.match(ref, ':(%d+)$'))
  if items > 0 and items + size > n then break end
  redis.call('LPOP', pending)
  local blob = redis.call('HGET', tasks, ref)
  if blob then
    redis.call('RPUSH', mine, C..'\\31'..ref)
    out[#out+1] = ref; out[#out+1] = blob
    items, k = items + size, k + 1
  end
end
redis.call('HSET', P..'passes', C, tostring(pass + items / weight))
redis.call('HSET', last, 'crawl', C, 'k', k)
return out
"""
)

# ARGV: prefix, worker, info TTL ms.  Returns {present before (0/1), syncseq}.
HEARTBEAT = (
    """
local P, W, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
"""
    + _NOW_MS
    + """
local before = redis.call('ZSCORE', P..'workers', W)
redis.call('ZADD', P..'workers', now, W)
redis.call('PEXPIRE', P..'w:'..W..':info', ttl)
local seq = tonumber(redis.call('GET', P..'syncseq') or '0')
return {before and 1 or 0, seq}
"""
)

# ARGV: prefix, timeout ms[, worker].  Every worker not heard of for timeout ms (or the
# one named, leaving) is removed; each task it held goes to its manager's orphans list.
# Returns the number of tasks returned.
REAP = (
    """
local P, timeout = ARGV[1], tonumber(ARGV[2])
"""
    + _NOW_MS
    + """
local dead
if ARGV[3] then dead = {ARGV[3]}
else dead = redis.call('ZRANGEBYSCORE', P..'workers', '-inf', now - timeout) end
local n = 0
for _, W in ipairs(dead) do
  local mine = P..'w:'..W
  local held = redis.call('LRANGE', mine, 0, -1)
  for _, entry in ipairs(held) do
    local sep = string.find(entry, '\\31', 1, true)
    local C, ref = string.sub(entry, 1, sep - 1), string.sub(entry, sep + 1)
    if redis.call('HDEL', P..'c:'..C..':tasks', ref) == 1 then
      local part = string.match(ref, '^(%d+):')
      redis.call('RPUSH', P..'c:'..C..':orphans:'..part, ref)
      n = n + 1
    end
  end
  redis.call('DEL', mine)
  redis.call('ZREM', P..'workers', W)
end
return n
"""
)

# ARGV: prefix, crawl, part, epoch.  Removes manager I's tasks of runs before ``epoch``
# that no fetcher holds (their items are in the manager's checkpoint); returns how many.
_WITHDRAW = """
local P, C, I, E = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local pending, tasks = P..'c:'..C..':pending', P..'c:'..C..':tasks'
local refs = redis.call('LRANGE', pending, 0, -1)
local removed = 0
for _, ref in ipairs(refs) do
  local part, epoch = string.match(ref, '^(%d+):(%d+):')
  if part == I and tonumber(epoch) < E then
    redis.call('LREM', pending, 1, ref); redis.call('HDEL', tasks, ref)
    removed = removed + 1
  end
end
"""
WITHDRAW = _WITHDRAW + "return removed\n"

# ARGV: as WITHDRAW.  At a manager's start: its tasks of earlier runs are withdrawn, its
# old results and orphans dropped; inbox entries taken but not acknowledged go back to
# the inbox; the crawl is not done (this partition has not said it is idle).
START = (
    _WITHDRAW
    + """
redis.call('DEL', P..'c:'..C..':results:'..I, P..'c:'..C..':orphans:'..I)
local taken = P..'c:'..C..':taken:'..I
local inbox = P..'c:'..C..':inbox:'..I
local back = redis.call('LRANGE', taken, 0, -1)
for i = #back, 1, -1 do redis.call('LPUSH', inbox, back[i]) end
redis.call('DEL', taken)
redis.call('HDEL', P..'c:'..C..':idle', I)
redis.call('DEL', P..'c:'..C..':done')
return {removed, #back}
"""
)

# ARGV: prefix, crawl, part, n, request id.  Moves up to n inbox entries to the taken
# list; returns them (the same ones again to a repeat of the request: a lost reply must
# not leave entries in the taken list that the manager never saw, as acknowledgements
# count entries from its head).
TAKE_INBOX = """
local P, C, I, n, req = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local inbox, taken = P..'c:'..C..':inbox:'..I, P..'c:'..C..':taken:'..I
local last = P..'c:'..C..':take:'..I
if redis.call('HGET', last, 'id') == req then
  local k = tonumber(redis.call('HGET', last, 'k'))
  if k == 0 then return {} end
  return redis.call('LRANGE', taken, -k, -1)
end
local out = {}
for _ = 1, n do
  local e = redis.call('LMOVE', inbox, taken, 'LEFT', 'RIGHT')
  if not e then break end
  out[#out+1] = e
end
redis.call('HSET', last, 'id', req, 'k', #out)
return out
"""

# ARGV: prefix, crawl, part, partitions, idle (0/1).  Records whether manager I has
# nothing left (only while its inbox is empty); returns 1 once every partition is idle
# with every inbox empty and no task pending: the crawl is done.
IDLE = """
local P, C, I, M, flag = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local idle = P..'c:'..C..':idle'
if redis.call('EXISTS', P..'c:'..C..':done') == 1 then return 1 end
if flag == '1' and redis.call('LLEN', P..'c:'..C..':inbox:'..I) == 0 then
  redis.call('HSET', idle, I, 1)
else
  redis.call('HDEL', idle, I)
  return 0
end
if redis.call('HLEN', idle) < M then return 0 end
for j = 0, M - 1 do
  if redis.call('HEXISTS', idle, tostring(j)) == 0 then return 0 end
  if redis.call('LLEN', P..'c:'..C..':inbox:'..j) > 0 then return 0 end
end
if redis.call('LLEN', P..'c:'..C..':pending') > 0 then return 0 end
redis.call('SET', P..'c:'..C..':done', 1)
return 1
"""

# ARGV: prefix, ip, holder, lease ms.  Takes the IP's lease, as the politeness scheduler
# does in one process: one request per IP at a time, the next ``delay`` after the last
# one's end (IP_RELEASE). Returns 0 when taken, else ms to wait before asking again.
IP_ACQUIRE = (
    """
local P, ip, holder, lease = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
"""
    + _NOW_MS
    + """
local key = P..'ip:'..ip
local h = redis.call('HMGET', key, 'holder', 'until', 'free_at')
if h[1] and h[1] ~= holder and tonumber(h[2]) > now then
  return math.min(20, tonumber(h[2]) - now)
end
local free_at = tonumber(h[3] or '0')
if now < free_at then return free_at - now end
redis.call('HSET', key, 'holder', holder, 'until', now + lease)
redis.call('PEXPIRE', key, lease + 3600000)
return 0
"""
)

# ARGV: prefix, ip, holder, delay ms.  Ends the holder's lease: the IP is free again
# ``delay`` ms from now.
IP_RELEASE = (
    """
local P, ip, holder, delay = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
"""
    + _NOW_MS
    + """
local key = P..'ip:'..ip
if redis.call('HGET', key, 'holder') == holder then
  redis.call('HDEL', key, 'holder', 'until')
end
redis.call('HSET', key, 'free_at', now + delay)
redis.call('PEXPIRE', key, delay + 3600000)
return 1
"""
)


# -- the link to Redis ----------------------------------------------------------------


class RedisLink:
    """One process's connection to the cluster's Redis, which waits out outages.

    :meth:`call` runs an operation and, while Redis is unreachable, retries it with
    back-off (up to ``max_backoff_s`` apart), logging once when Redis goes and once when
    it is back. Nothing is given up: the process waits with what it holds.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        ca_file: str | None = None,
        max_backoff_s: float = 2.0,
        socket_timeout_s: float = 10.0,
    ) -> None:
        """``ca_file``: the CA certificate(s) that sign a ``rediss://`` server's
        certificate, where the system's store does not."""
        self.url = url
        self.keys = Keys(prefix)
        self.max_backoff_s = max_backoff_s
        tls: dict[str, Any] = {}
        if ca_file is not None and url.startswith("rediss://"):
            tls["ssl_ca_certs"] = ca_file
        try:
            self.redis: aioredis.Redis = aioredis.Redis.from_url(
                url,
                socket_timeout=socket_timeout_s,
                socket_connect_timeout=min(socket_timeout_s, 5.0),
                health_check_interval=15,
                **tls,
            )
        except ValueError as e:
            raise ClusterError(f"bad --redis URL {safe_url(url)!r}: {e}") from None
        self.down_since: float | None = None
        self.back_at = float("-inf")  # when Redis last came back after an outage
        # Set when the process is stopping: a call that finds Redis unreachable then
        # gives up (ClusterError) instead of waiting for it.
        self.closing = False
        self._scripts: dict[str, Any] = {}

    def script(self, text: str) -> Any:
        """The registered Lua script (EVALSHA, loaded again after a Redis restart)."""
        found = self._scripts.get(text)
        if found is None:
            found = self._scripts[text] = self.redis.register_script(text)
        return found

    async def run_script(self, text: str, args: Sequence[Any], what: str) -> Any:
        script = self.script(text)
        return await self.call(lambda: script(args=[self.keys.prefix, *args]), what)

    async def call(self, op: Callable[[], Awaitable[_T]], what: str) -> _T:
        """``await op()``, retried until Redis answers (see the class docstring)."""
        delay = 0.05
        while True:
            try:
                result = await op()
            except (AuthenticationError, AuthorizationError) as e:
                raise ClusterError(f"Redis at {safe_url(self.url)} refused: {e}") from None
            except OUTAGE_ERRORS as e:
                if isinstance(e, ResponseError) and not isinstance(e, BusyLoadingError):
                    raise
                if self.closing:
                    raise ClusterError(
                        f"stopped while Redis at {safe_url(self.url)} was unreachable"
                    ) from None
                if self.down_since is None:
                    self.down_since = time.monotonic()
                    log.warning(
                        "Redis at %s unreachable (%s: %s); waiting for it, nothing is lost",
                        safe_url(self.url),
                        what,
                        _one_line(e),
                    )
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, self.max_backoff_s)
                continue
            if self.down_since is not None:
                self.back_at = time.monotonic()
                log.warning(
                    "Redis at %s reachable again after %.1f s",
                    safe_url(self.url),
                    self.back_at - self.down_since,
                )
                self.down_since = None
            return result

    async def check(self) -> None:
        """Raise ClusterError with one line if Redis does not answer now (at start-up, a
        wrong URL or password should say so rather than wait)."""
        try:
            await self.redis.ping()
        except (AuthenticationError, AuthorizationError) as e:  # (ConnectionErrors too)
            raise ClusterError(f"Redis at {safe_url(self.url)} refused: {e}") from None
        except OUTAGE_ERRORS as e:
            raise RedisUnreachable(
                f"cannot reach Redis at {safe_url(self.url)}: {_one_line(e)}"
            ) from None
        except ResponseError as e:  # e.g. a password is required or wrong
            raise ClusterError(f"Redis at {safe_url(self.url)} refused: {e}") from None

    async def close(self) -> None:
        await self.redis.aclose()


def safe_url(url: str) -> str:
    """``url`` without its password, for logs."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rpartition('@')[2]}"


def _one_line(e: BaseException) -> str:
    return (str(e) or type(e).__name__).splitlines()[0][:200]


def host_name() -> str:
    return socket.gethostname()


# -- the manager's side ---------------------------------------------------------------


@dataclass(slots=True)
class _Outstanding:
    task: Task
    unreported: set[int]
    submitted: float
    missing: int = 0  # sweeps in a row that found the task gone from Redis


def in_flight_budget(floor: int, fleet_slots: int, parts: int) -> int:
    """The fetches a manager of a crawl with ``parts`` managers keeps in flight when the
    live fetchers have ``fleet_slots`` slots: its share of IN_FLIGHT_PER_SLOT times them,
    at most MAX_FLEET_IN_FLIGHT, and never fewer than ``floor`` (its --concurrency)."""
    share = -(-IN_FLIGHT_PER_SLOT * fleet_slots // max(1, parts))
    return max(floor, min(share, MAX_FLEET_IN_FLIGHT))


class RedisManagerQueue:
    """Manager ``part`` of ``parts`` of crawl ``crawl``: a ManagerQueue on Redis (tasks
    out, results back), composed with its two other parts: :attr:`inbox`, the links
    other partitions forwarded (manager.core's ``Inbox``), and :attr:`upkeep`, the
    bookkeeping that runs in the background.

    :meth:`open` registers the crawl and starts this manager's run (a new epoch: tasks of
    earlier runs are dropped, their items being in the checkpoint) and the upkeep.
    """

    partitions = 1  # fetchers claim from one list per crawl; no affinity to keep
    pins_partitions = False  # nor may a host's requests queue behind one another

    def __init__(
        self,
        link: RedisLink,
        crawl: str,
        part: int,
        parts: int,
        *,
        weight: float = 1.0,
        heartbeat_timeout_s: float = 15.0,
        sync_timeout_s: float = 30.0,
        tick_s: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 <= part < parts:
            raise ClusterError(f"partition {part}/{parts}: I must be in 0..M-1")
        self.link = link
        self.keys = link.keys
        self.crawl = crawl
        self.part = part
        self.parts = parts
        self.weight = weight
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.sync_timeout_s = sync_timeout_s
        self.clock = clock
        self.epoch = 0
        self.identity = ""
        self.fleet_slots = 0  # the live fetchers' slots, as count_fleet last found them
        self._outstanding: dict[int, _Outstanding] = {}
        self._closed = False
        self._submitted = self._completed = 0
        self._lost: list[ItemResult] = []  # items of vanished tasks, for the next collect
        self.counters: defaultdict[str, int] = defaultdict(int)
        self.handoff_s = 0.0
        self.stats_writer = StatsWriter(link.redis, link.keys.prefix, f"{crawl}/{part}")
        self.inbox = ForwardedInbox(link, crawl, part, self.counters)
        self.upkeep = Upkeep(self, tick_s=tick_s)

    # -- start and stop

    async def open(self, settings_json: str, identity: str = "") -> None:
        """Register the crawl (weight, partitions, the settings fetchers use) and start
        this manager's run. ``identity`` (host and state dir) names this manager: another
        one of the same partition, alive, is refused; the same one restarted is not."""
        k, crawl = self.keys, self.crawl
        await self.link.check()
        self.identity = identity
        raw = await self.link.call(
            lambda: self.link.redis.hget(k.part(crawl, "mgr", self.part), "json"), "read crawl"
        )
        other = json.loads(raw).get("identity", "") if raw else ""
        if other and identity and other != identity:
            raise ClusterError(
                f"partition {self.part}/{self.parts} of crawl {crawl!r} is run by another "
                f"manager ({other}); stop it first, or wait {self.heartbeat_timeout_s:g} s "
                "if it died"
            )
        meta = await self.link.call(
            lambda: self.link.redis.hgetall(k.crawl(crawl, "meta")), "read crawl"
        )
        known = meta.get(b"partitions")
        if known is not None and int(known) != self.parts:
            raise ClusterError(
                f"crawl {crawl!r} has {int(known)} partitions in Redis, not {self.parts}: "
                f"give --partition I/{int(known)}, or a new --crawl name"
            )

        async def register() -> None:
            async with self.link.redis.pipeline(transaction=True) as p:
                p.hset(k.crawls, crawl, str(self.weight))
                p.hset(
                    k.crawl(crawl, "meta"),
                    mapping={"partitions": self.parts, "settings": settings_json},
                )
                p.incr(k.part(crawl, "epoch", self.part))
                out = await p.execute()
            self.epoch = self.inbox.epoch = int(out[-1])

        await self.link.call(register, "register crawl")
        removed, back = await self.link.run_script(
            START, [crawl, self.part, self.epoch], "start partition"
        )
        if removed or back:
            log.info(
                "partition %d: dropped %d tasks of its last run; %d forwarded link batches "
                "go through URL-seen again",
                self.part,
                removed,
                back,
            )
        self.upkeep.start()

    async def close(self) -> None:
        """Stop the background work; tasks not claimed yet are withdrawn (their items are
        in the checkpoint: the next run dispatches them again)."""
        self._closed = True
        await self.upkeep.stop()
        await self.inbox.close()
        try:
            await asyncio.wait_for(
                self.link.run_script(WITHDRAW, [self.crawl, self.part, self.epoch + 1], "withdraw"),
                timeout=5.0,
            )
            await self.link.redis.delete(self.keys.part(self.crawl, "mgr", self.part))
        except _CLOSE_ERRORS:
            pass  # the next run's start does the same

    @property
    def closed(self) -> bool:
        return self._closed

    # -- ManagerQueue

    async def submit(self, tasks: Sequence[Task]) -> None:
        if not tasks:
            return
        now = self.clock()
        args: list[Any] = [self.crawl]
        started = time.thread_time()
        for t in tasks:
            self._outstanding[t.task_id] = _Outstanding(t, set(range(len(t.items))), now)
            args += [task_ref(self.part, self.epoch, t), dumps(t)]
        self.handoff_s += time.thread_time() - started
        self._submitted += len(tasks)
        await self.link.run_script(SUBMIT, args, "submit tasks")

    async def collect(self, max_results: int, timeout_s: float) -> list[ItemResult]:
        """Results, items of dead fetchers' tasks (as ``fetcher_died``) and, into the
        inbox, forwarded links: returns once any of these came, or after ``timeout_s``."""
        k, crawl, part = self.keys, self.crawl, self.part
        results_key = k.part(crawl, "results", part)
        orphans_key = k.part(crawl, "orphans", part)
        deadline = self.clock() + timeout_s
        out, self._lost = self._lost, []
        while not self._closed:

            async def pop() -> list[Any]:
                async with self.link.redis.pipeline(transaction=False) as p:
                    p.lpop(results_key, 64)
                    p.lpop(orphans_key, 256)
                    return list(await p.execute())

            batches, orphans = await self.link.call(pop, "collect results")
            await self.inbox.pull()
            started = time.thread_time()
            for blob in batches or ():
                epoch, results = loads(blob)
                if epoch == self.epoch:
                    out += self._accept(results)
            for ref in orphans or ():
                out += self._orphaned(ref.decode())
            self.handoff_s += time.thread_time() - started
            if out or self.inbox.waiting:
                return out
            left = deadline - self.clock()
            if left <= 0:
                return out
            got = await self.link.call(
                partial(self.link.redis.blpop, [results_key, orphans_key], timeout=min(left, 0.1)),
                "wait for results",
            )
            if got is not None:
                key, blob = got
                if text(key) == results_key:
                    epoch, results = loads(blob)
                    if epoch == self.epoch:
                        out += self._accept(results)
                else:
                    out += self._orphaned(blob.decode())
                if out:
                    return out
        return out

    def _accept(self, results: list[ItemResult]) -> list[ItemResult]:
        accepted = []
        for r in results:
            o = self._outstanding.get(r.task_id)
            if o is None or r.index not in o.unreported:
                continue  # a late or repeated report of work already accounted for
            o.unreported.discard(r.index)
            if not o.unreported:
                del self._outstanding[r.task_id]
                self._completed += 1
            accepted.append(r)
        if accepted:
            self.stats_writer.add(self.crawl, "results", len(accepted))
        return accepted

    def _orphaned(self, ref: str) -> list[ItemResult]:
        _, epoch, task_id = parse_ref(ref)
        if epoch != self.epoch:
            return []
        return self._give_up(task_id, "tasks_orphaned")

    def _give_up(self, task_id: int, counter: str) -> list[ItemResult]:
        """``fetcher_died`` results for the task's unreported items (the manager retries
        them through its politeness scheduler)."""
        o = self._outstanding.pop(task_id, None)
        if o is None:
            return []
        self.counters[counter] += 1
        return [
            ItemResult(task_id, i, o.task.items[i], error=WORKER_DIED) for i in sorted(o.unreported)
        ]

    async def sync(self) -> bool:
        """Ask every live fetcher to fsync its WARC files; True once all confirm, False
        after ``sync_timeout_s`` (Redis unreachable included: a stop's last checkpoint
        goes on without the confirmation)."""
        try:
            return await asyncio.wait_for(self._sync(), self.sync_timeout_s)
        except TimeoutError:
            return False

    async def _sync(self) -> bool:
        k = self.keys
        seq = int(await self.link.call(lambda: self.link.redis.incr(k.syncseq), "sync"))
        deadline = self.clock() + self.sync_timeout_s
        while self.clock() < deadline:
            live = await self._live_workers()
            if not live:
                return True

            async def synced(names: list[str] = live) -> list[Any]:
                async with self.link.redis.pipeline(transaction=False) as p:
                    for w in names:
                        p.hget(k.worker_info(w), "synced")
                    return list(await p.execute())

            values = await self.link.call(synced, "sync")
            if all(v is None or int(v) >= seq for v in values):
                return True
            await asyncio.sleep(0.05)
        return False

    async def count_fleet(self) -> int:
        """The fetch slots (``--concurrency``) of the live fetchers, summed; also kept in
        :attr:`fleet_slots`. A fetcher that registered none counts for nothing."""
        k = self.keys
        live = await self._live_workers()

        async def slots(names: list[str] = live) -> list[Any]:
            async with self.link.redis.pipeline(transaction=False) as p:
                for w in names:
                    p.hget(k.worker_info(w), "slots")
                return list(await p.execute())

        values = await self.link.call(slots, "count fetchers") if live else []
        self.fleet_slots = sum(int(v) for v in values if v is not None)
        return self.fleet_slots

    async def _live_workers(self) -> list[str]:
        k = self.keys
        t = await self.link.call(lambda: self.link.redis.time(), "time")
        now_ms = int(t[0]) * 1000 + int(t[1]) // 1000
        since = now_ms - int(self.heartbeat_timeout_s * 1000)
        names = await self.link.call(
            lambda: self.link.redis.zrangebyscore(k.workers, since, "+inf"), "workers"
        )
        return [text(n) for n in names]

    def stats(self) -> QueueStats:
        unreported = sum(len(o.unreported) for o in self._outstanding.values())
        return QueueStats(
            pending_tasks=0,
            owned_tasks=len(self._outstanding),
            unreported_items=unreported,
            results_waiting=0,
            submitted_tasks=self._submitted,
            completed_tasks=self._completed,
        )

    @property
    def in_flight_tasks(self) -> int:
        return len(self._outstanding)

    async def sweep(self, now: float) -> None:
        """Tasks that vanished from Redis (a Redis restarted without its data) while this
        manager waited for them: after two sweeps that found one gone and its results
        not come, its unreported items come back as ``fetcher_died`` (with the next
        collect)."""
        old = [t for t, o in self._outstanding.items() if now - o.submitted >= 5.0]
        if not old:
            return
        key = self.keys.crawl(self.crawl, "tasks")

        async def exists() -> list[Any]:
            async with self.link.redis.pipeline(transaction=False) as p:
                for t in old:
                    p.hexists(key, task_ref(self.part, self.epoch, self._outstanding[t].task))
                return list(await p.execute())

        there = await self.link.call(exists, "sweep")
        lost: list[ItemResult] = []
        for t, present in zip(old, there):
            o = self._outstanding.get(t)
            if o is None:
                continue
            o.missing = 0 if present else o.missing + 1
            if o.missing >= 2:
                lost += self._give_up(t, "tasks_vanished")
        if lost:
            log.warning(
                "%d items of tasks that vanished from Redis go back to the scheduler", len(lost)
            )
            self._lost += lost


class ForwardedInbox:
    """Manager ``part``'s inbox (manager.core's ``Inbox``): the links and PLD edges that
    other partitions' pages found for this one. :meth:`pull` (run by the queue's
    collect) moves entries from the inbox list to the partition's taken list in Redis
    and into a stash; :meth:`take` hands the stash out; the taken list keeps them until
    :meth:`acknowledge` says a commit holds them, so a manager killed at any instant
    loses none (the next run's START puts them back in the inbox)."""

    def __init__(
        self, link: RedisLink, crawl: str, part: int, counters: defaultdict[str, int]
    ) -> None:
        self.link = link
        self.crawl = crawl
        self.part = part
        self.counters = counters
        self.epoch = 0  # the run's, set by the queue's open
        self.finished = False  # the manager said it has nothing left (idle())
        self.done = False  # the whole crawl has nothing left (Upkeep's idle record)
        self._urls: list[FoundURLs] = []
        self._edges: list[FoundEdges] = []
        self._stashed = 0  # entries pulled, waiting in the stash for take()
        self._handed = 0  # entries handed out by take() this run
        self._acked = 0
        self._acking: asyncio.Task[None] | None = None
        self._requests = 0  # TAKE_INBOX request ids (a retry repeats its id)
        self._closed = False

    @property
    def waiting(self) -> bool:
        """Entries were pulled that take() has not handed out."""
        return bool(self._urls or self._edges)

    def take(self) -> tuple[list[FoundURLs], list[FoundEdges]]:
        """The links and PLD edges other partitions forwarded, pulled since the last call."""
        urls, edges = self._urls, self._edges
        self._urls, self._edges = [], []
        self._handed += self._stashed
        self._stashed = 0
        return urls, edges

    def mark(self) -> int:
        """How many inbox entries :meth:`take` handed out so far (a prefix of the taken
        list): the journal's or a checkpoint's commit notes it, and :meth:`acknowledge` s
        it once durable."""
        return self._handed

    def acknowledge(self, mark: int) -> None:
        """The entries handed out before ``mark`` are durable in the manager (journal or
        checkpoint): drop them from the taken list (in the background, in order)."""
        if mark <= self._acked or self._closed:
            return
        before = self._acking

        async def trim() -> None:
            if before is not None:
                await asyncio.gather(before, return_exceptions=True)
            n = mark - self._acked
            if n <= 0:
                return
            key = self.link.keys.part(self.crawl, "taken", self.part)
            await self.link.call(lambda: self.link.redis.ltrim(key, n, -1), "acknowledge")
            self._acked = mark

        self._acking = asyncio.ensure_future(trim())

    def idle(self, finished: bool) -> bool:
        """Note whether this manager has nothing left to do; True once the whole crawl
        has nothing left (every partition idle at once, no link on its way)."""
        self.finished = finished and not self.waiting
        return self.done

    async def pull(self) -> None:
        """Move up to 128 entries from the inbox into the stash (and the taken list)."""
        self._requests += 1
        request = f"{self.epoch}.{self._requests}"
        entries = await self.link.run_script(
            TAKE_INBOX, [self.crawl, self.part, 128, request], "take forwarded links"
        )
        for blob in entries:
            urls, edges = loads(blob)
            self._urls += urls
            self._edges += edges
            self.counters["forwarded_batches_in"] += 1
        self._stashed += len(entries)
        if entries:
            self.finished = False  # until idle() has seen them admitted (ticks run meanwhile)

    async def close(self) -> None:
        """No more acknowledgements; waits for the one under way."""
        self._closed = True
        if self._acking is not None:
            await asyncio.gather(self._acking, return_exceptions=True)


class Upkeep:
    """A manager's bookkeeping in Redis, every ``tick_s`` in the background: its
    heartbeat and figures (what ``drumbeat status`` shows), reaping fetchers that missed
    heartbeats, flushing the per-second stats and rolling them up, sweeping for tasks
    that vanished, and the crawl's idle record (which ends the crawl)."""

    def __init__(self, queue: RedisManagerQueue, *, tick_s: float) -> None:
        self.queue = queue
        self.link = queue.link
        self.tick_s = tick_s
        self.figures: Callable[[], dict[str, Any]] = dict  # the manager's, set by its face
        # Told the live fetchers' slots every FLEET_INTERVAL_S (set by the manager's face).
        self.on_fleet: Callable[[int], None] | None = None
        # Told the partitions this one waits for that have no manager running (see
        # _note_absent; set by the manager's face), and () once none is missing.
        self.on_absent: Callable[[tuple[int, ...]], None] | None = None
        self.absent: tuple[int, ...] = ()
        self._idle_since: float | None = None
        self._last_fleet = -FLEET_INTERVAL_S
        self._rollups = StatsReader(queue.link.redis, queue.keys.prefix)
        self._last_rollup = 0.0
        self._last_sweep = 0.0
        self._ticker: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._ticker = asyncio.ensure_future(self._tick_forever())

    async def stop(self) -> None:
        await _stop(self._ticker)

    async def _tick_forever(self) -> None:
        while not self.queue.closed:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not stop the crawl; it is logged
                log.exception("cluster bookkeeping failed; trying again")
            await asyncio.sleep(self.tick_s)

    async def tick(self) -> None:
        """Heartbeat, reap dead fetchers, count the fleet, stats, sweep vanished tasks,
        the idle record."""
        q = self.queue
        await self._heartbeat()
        await self._reap()
        now = q.clock()
        if self.on_fleet is not None and now - self._last_fleet >= FLEET_INTERVAL_S:
            self._last_fleet = now
            self.on_fleet(await q.count_fleet())
        if q.stats_writer.pending:
            await q.stats_writer.flush()
        if now - self._last_rollup >= ROLLUP_INTERVAL_S:
            self._last_rollup = now
            await self._rollups.roll_up()  # any manager may; they do not double count
        if now - self._last_sweep >= max(5.0, q.heartbeat_timeout_s / 2):
            self._last_sweep = now
            await q.sweep(now)
        idle = "1" if q.inbox.finished else "0"
        q.inbox.done = bool(
            await self.link.run_script(IDLE, [q.crawl, q.part, q.parts, idle], "idle record")
        )
        await self._note_absent(now)

    async def _note_absent(self, now: float) -> None:
        """Which other partitions have no manager running, while this one has nothing
        left and waits for them: the crawl ends only when every partition's manager has
        run out of work, and a partition nobody started (or whose manager died) would
        keep this one waiting without a word. Said once the wait has lasted the
        heartbeat timeout (a manager starting up has had time to beat), and again when
        the set changes."""
        q = self.queue
        if not q.inbox.finished or q.inbox.done or q.parts == 1:
            self._idle_since = None
            absent: tuple[int, ...] = ()
        else:
            if self._idle_since is None:
                self._idle_since = now
            if now - self._idle_since < q.heartbeat_timeout_s:
                return
            others = [j for j in range(q.parts) if j != q.part]

            async def alive() -> list[int]:
                async with self.link.redis.pipeline(transaction=False) as p:
                    for j in others:
                        p.exists(q.keys.part(q.crawl, "mgr", j))
                    return [int(n) for n in await p.execute()]

            found = await self.link.call(alive, "managers' heartbeats")
            absent = tuple(j for j, n in zip(others, found) if not n)
        if absent != self.absent:
            self.absent = absent
            if self.on_absent is not None:
                self.on_absent(absent)

    async def _heartbeat(self) -> None:
        q = self.queue
        figures = {
            "host": host_name(),
            "pid": os.getpid(),
            "identity": q.identity,
            "epoch": q.epoch,
            "in_flight_tasks": q.in_flight_tasks,
            **self.figures(),
        }
        key = q.keys.part(q.crawl, "mgr", q.part)

        async def heartbeat() -> None:
            async with self.link.redis.pipeline(transaction=True) as p:
                p.delete(key)
                p.hset(key, mapping={"json": json.dumps(figures)})
                p.pexpire(key, max(5000, int(q.heartbeat_timeout_s * 1000)))
                await p.execute()

        await self.link.call(heartbeat, "heartbeat")

    async def _reap(self) -> None:
        timeout_s = self.queue.heartbeat_timeout_s
        # After an outage no fetcher could beat: give them a timeout (and their back-off)
        # to come back before any is taken for dead.
        grace = timeout_s + 2 * self.link.max_backoff_s
        if time.monotonic() - self.link.back_at < grace:
            return
        reaped = await self.link.run_script(REAP, [int(timeout_s * 1000)], "reap fetchers")
        if reaped:
            log.warning(
                "fetchers missed heartbeats for %.0f s: %d of their tasks went back to "
                "their managers",
                timeout_s,
                reaped,
            )


# -- the fetcher's side ---------------------------------------------------------------


@dataclass(slots=True)
class _Held:
    crawl: str
    ref: str
    part: int
    epoch: int
    task_id: int  # the manager's
    left: set[int]  # indexes of the items not reported yet


@dataclass(frozen=True, slots=True)
class CrawlInfo:
    crawl: str
    partitions: int
    settings: dict[str, Any]


class RedisFetcherQueue:
    """A fetcher process's side: claims tasks of every crawl on the Redis (weighted fair),
    reports results to their managers and forwards found links to their owners.

    Task ids are made unique within this process (two managers number their tasks
    alike): :meth:`crawl_of` names a claimed task's crawl.
    """

    def __init__(
        self,
        link: RedisLink,
        worker: str,
        *,
        heartbeat_s: float = 0.25,
        heartbeat_timeout_s: float = 15.0,
        warc_sync: Callable[[], Awaitable[None]] | None = None,
        slots: int = 0,
    ) -> None:
        """``slots``: the fetches this process runs at once, registered so that the
        managers size their in-flight budgets to the fleet (in_flight_budget)."""
        self.link = link
        self.keys = link.keys
        self.worker = worker
        self.heartbeat_s = heartbeat_s
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.warc_sync = warc_sync
        self.slots = slots
        self._held: dict[int, _Held] = {}
        self._ids = itertools.count(1)
        self._crawls: dict[str, CrawlInfo] = {}
        self._splitters: dict[str, Splitter] = {}
        self._closed = False
        self._heart: asyncio.Task[None] | None = None
        self._synced = 0
        self.counters: defaultdict[str, int] = defaultdict(int)
        self.handoff_s = 0.0
        # Wall seconds spent waiting in claims that found no task: how long this fetcher
        # had room and nothing to fetch (the managers, not it, were the limit).
        self.waited_s = 0.0
        # Wall seconds spent in reports waiting for Redis's answer: the caller (a fetcher's
        # archiver) parses nothing meanwhile.
        self.reporting_s = 0.0
        # Per-second counters per crawl (drumbeat.stats), flushed with the heartbeat.
        node = worker.replace(SEP_STATS, "_")
        self.stats_writer = StatsWriter(link.redis, link.keys.prefix, node)

    async def start(self) -> None:
        """Join the cluster: waits for Redis (fetchers may start first)."""
        await self.link.call(self.link.redis.ping, "connect")
        info = self.keys.worker_info(self.worker)
        ttl = int(max(self.heartbeat_timeout_s, 5.0) * 2000)

        async def register() -> None:
            async with self.link.redis.pipeline(transaction=True) as p:
                p.hset(info, mapping=self._info())
                p.pexpire(info, ttl)
                await p.execute()

        await self.link.call(register, "register fetcher")
        await self.link.run_script(HEARTBEAT, [self.worker, ttl], "heartbeat")
        self._heart = asyncio.ensure_future(self._beat_forever(ttl))

    async def close(self) -> None:
        """Stop claiming; the tasks still held go back to their managers at once."""
        self._closed = True
        await _stop(self._heart)
        try:
            await asyncio.wait_for(self.stats_writer.flush(), timeout=5.0)
            await asyncio.wait_for(self._leave(), timeout=5.0)
        except _CLOSE_ERRORS:
            pass  # the managers reap this fetcher after heartbeat_timeout_s

    def _info(self) -> dict[Any, str | int]:
        """This fetcher's ``w:F:info`` fields. (Keys typed Any: hset's mapping is
        invariant in its key type, a union of bytes, str and numbers.)"""
        return {
            "host": host_name(),
            "pid": os.getpid(),
            "slots": self.slots,
            "synced": self._synced,
        }

    async def _leave(self) -> None:
        await self.link.redis.delete(self.keys.worker_info(self.worker))
        await self.link.run_script(REAP, [0, self.worker], "leave")

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def held_items(self) -> int:
        return sum(len(h.left) for h in self._held.values())

    def crawl_of(self, task_id: int) -> str:
        return self._held[task_id].crawl

    async def crawl_info(self, crawl: str) -> CrawlInfo:
        """The crawl's partitions and settings (as its managers registered them)."""
        known = self._crawls.get(crawl)
        if known is not None:
            return known
        meta = await self.link.call(
            lambda: self.link.redis.hgetall(self.keys.crawl(crawl, "meta")), "crawl settings"
        )
        info = CrawlInfo(
            crawl,
            int(meta.get(b"partitions", b"1")),
            json.loads(meta.get(b"settings", b"{}")),
        )
        self._crawls[crawl] = info
        self._splitters[crawl] = Splitter(info.partitions)
        return info

    async def claim(self, worker: str, max_tasks: int, timeout_s: float) -> list[Task]:
        """Tasks of one crawl (picked by weight) holding up to ``max_tasks`` *items* (at
        least one task: managers size tasks differently, and a fetcher's room is in
        items), waiting up to ``timeout_s`` for some; their ``task_id`` s are this
        process's (see crawl_of)."""
        deadline = time.monotonic() + timeout_s
        while not self._closed:
            request = f"{os.getpid()}.{next(self._ids)}"
            out = await self.link.run_script(
                CLAIM, [self.worker, max_tasks, request], "claim tasks"
            )
            if out[0]:
                self._taken_for_dead()
            if len(out) > 1:
                return await self._adopt(out[1].decode(), out[2:])
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            # Wait for a submit's wake token (or a while: tokens are few, fetchers many).
            wait = max(0.01, min(left, 0.05))
            waiting = time.monotonic()
            await self.link.call(
                partial(self.link.redis.blpop, [self.keys.wake], timeout=wait), "wait for tasks"
            )
            self.waited_s += time.monotonic() - waiting
        return []

    async def _adopt(self, crawl: str, pairs: list[bytes]) -> list[Task]:
        await self.crawl_info(crawl)
        tasks = []
        started = time.thread_time()
        for i in range(0, len(pairs), 2):
            ref = pairs[i].decode()
            task: Task = loads(pairs[i + 1])
            part, epoch, task_id = parse_ref(ref)
            local = next(self._ids)
            unreported = set(range(len(task.items)))
            self._held[local] = _Held(crawl, ref, part, epoch, task_id, unreported)
            task.task_id = local
            tasks.append(task)
        self.handoff_s += time.thread_time() - started
        self.stats_writer.add(crawl, "tasks_claimed", len(tasks))
        self.stats_writer.add(crawl, "items_claimed", sum(len(t.items) for t in tasks))
        return tasks

    async def fetch_ended(self, worker: str, notice: ItemResult) -> None:
        """Ignored: a cluster's manager frees a host at its result (a Redis round trip
        a notice would cost every short-delay host's page; broad crawls have none)."""

    async def report(self, worker: str, results: Sequence[ItemResult]) -> None:
        """Send results to their managers, the links they found to their owners, and end
        the tasks whose last item this is: one transaction."""
        k = self.keys
        started = time.thread_time()
        batches: dict[tuple[str, int, int], list[ItemResult]] = defaultdict(list)
        forwarded: dict[tuple[str, int], tuple[list[FoundURLs], list[FoundEdges]]] = {}
        finished: list[_Held] = []
        for r in results:
            held = self._held.get(r.task_id)
            if held is None or r.index not in held.left:
                continue  # a task taken back, or an item reported already
            held.left.discard(r.index)
            if not held.left:
                finished.append(held)
            r = copy(r)  # the caller's stays as it was (a retried report finds it again)
            self._count(held.crawl, r)
            r.task_id = held.task_id
            self._route(held, r, forwarded)
            batches[(held.crawl, held.part, held.epoch)].append(r)
        blobs = [
            (k.part(crawl, "results", part), dumps((epoch, rs)))
            for (crawl, part, epoch), rs in batches.items()
        ]
        inbox = [(crawl, part, dumps(value)) for (crawl, part), value in forwarded.items()]
        self.handoff_s += time.thread_time() - started

        async def send() -> None:
            async with self.link.redis.pipeline(transaction=True) as p:
                for key, blob in blobs:
                    p.rpush(key, blob)
                for crawl, part, blob in inbox:
                    p.rpush(k.part(crawl, "inbox", part), blob)
                    p.hdel(k.crawl(crawl, "idle"), str(part))
                for held in finished:
                    p.lrem(k.worker(self.worker), 1, held.crawl + SEP + held.ref)
                    p.hdel(k.crawl(held.crawl, "tasks"), held.ref)
                await p.execute()

        sending = time.monotonic()
        await self.link.call(send, "report results")
        self.reporting_s += time.monotonic() - sending
        for local in [t for t, h in self._held.items() if not h.left]:
            del self._held[local]
        for crawl, _, _ in inbox:
            self.stats_writer.add(crawl, "link_batches_forwarded")

    def _count(self, crawl: str, r: ItemResult) -> None:
        add = self.stats_writer.add
        if r.status is not None:
            add(crawl, "fetched")
            add(crawl, "bytes", r.body_bytes)
        else:
            add(crawl, "errors")

    def _route(
        self,
        held: _Held,
        r: ItemResult,
        forwarded: dict[tuple[str, int], tuple[list[FoundURLs], list[FoundEdges]]],
    ) -> None:
        """Keep in ``r`` the links and edges its own partition owns; put the rest in
        ``forwarded`` by owner."""
        by_partition = r.by_partition
        if by_partition is not None:  # a page's, packed apart by the fetcher
            r.by_partition = None
            r.found, r.pld_edges = by_partition.get(held.part, (None, None))
            for part, (f, e) in by_partition.items():
                if part != held.part:
                    out = forwarded.setdefault((held.crawl, part), ([], []))
                    if f is not None:
                        out[0].append(f)
                    if e is not None:
                        out[1].append(e)
            return
        splitter = self._splitters[held.crawl]
        if splitter.partitions == 1:
            return
        # Packed whole: a redirect's target, a sitemap's or a feed's links.
        if r.found is not None and len(r.found):
            parts = splitter.split_found(r.found)
            r.found = parts.pop(held.part, None)
            for part, f in parts.items():
                forwarded.setdefault((held.crawl, part), ([], []))[0].append(f)
        if r.pld_edges is not None and len(r.pld_edges):
            edge_parts = splitter.split_edges(r.pld_edges)
            r.pld_edges = edge_parts.pop(held.part, None)
            for part, e in edge_parts.items():
                forwarded.setdefault((held.crawl, part), ([], []))[1].append(e)

    @asynccontextmanager
    async def ip_lease(self, ip: str, delay_s: float, lease_s: float) -> AsyncIterator[None]:
        """Hold ``ip`` for one request, cluster-wide: one request per IP at a time, the
        next no sooner than ``delay_s`` after this one's end (as the politeness scheduler
        keeps in one manager; hosts of one IP may belong to several partitions). A lease
        whose holder died runs out after ``lease_s``."""
        if delay_s <= 0 or not ip:
            yield
            return
        holder = f"{self.worker}/{next(self._ids)}"
        while True:
            wait_ms = await self.link.run_script(
                IP_ACQUIRE, [ip, holder, int(lease_s * 1000)], "take IP lease"
            )
            if int(wait_ms) <= 0:
                break
            self.counters["ip_waits"] += 1
            await asyncio.sleep(int(wait_ms) / 1000)
        try:
            yield
        finally:
            await self.link.run_script(
                IP_RELEASE, [ip, holder, int(delay_s * 1000)], "end IP lease"
            )

    def _taken_for_dead(self) -> None:
        """A manager reaped this fetcher (it missed heartbeats): what it held went back."""
        if self._held:
            log.warning(
                "this fetcher was taken for dead (no heartbeat for %.0f s): its %d tasks "
                "went back to their managers; their results are dropped",
                self.heartbeat_timeout_s,
                len(self._held),
            )
            self._held.clear()

    async def _beat_forever(self, ttl: int) -> None:
        while not self._closed:
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self.beat(ttl)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("fetcher heartbeat failed; trying again")

    async def beat(self, ttl: int) -> None:
        """Heartbeat; answer WARC sync requests; notice having been taken for dead."""
        present, seq = await self.link.run_script(HEARTBEAT, [self.worker, ttl], "heartbeat")
        if not present:
            self._taken_for_dead()
            await self.link.call(
                lambda: self.link.redis.hset(
                    self.keys.worker_info(self.worker), mapping=self._info()
                ),
                "register fetcher",
            )
        if self.stats_writer.pending:
            await self.stats_writer.flush()  # keeps its counts if Redis is gone: sent next time
        if int(seq) > self._synced:
            if self.warc_sync is not None:
                await self.warc_sync()
            self._synced = int(seq)
            await self.link.call(
                lambda: self.link.redis.hset(
                    self.keys.worker_info(self.worker), "synced", self._synced
                ),
                "confirm sync",
            )
