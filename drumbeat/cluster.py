"""The cluster deployment: managers and fetchers on any machines, coordinated by Redis.

* ``drumbeat manager``: one of a crawl's M managers (:func:`run_manager`). It is the
  standalone crawl's manager (standalone.run_crawl, the same state directory and
  guarantees) whose fetchers are reached through Redis (queue.redis) and which keeps the
  URLs of its partition only (queue.partition): its share of the seeds, the links its
  fetchers find for it and those other partitions forward to it.
* ``drumbeat fetcher``: stateless fetch workers serving every crawl on the Redis
  (:func:`run_fetcher`); each process runs one queue.redis.RedisFetcherQueue and one
  drumbeat.fetcher.Fetcher per crawl (the crawl's settings, as its managers registered
  them), writes WARC files under its own ``--state DIR/warc/CRAWL/``, and keeps requests
  to one IP ``ip_delay`` apart cluster-wide through a slot reserved in Redis. At exit
  each process writes where its CPU time went, ``--state DIR/stages/HOST-PID.json``
  (:func:`write_fetcher_stages`).
* ``drumbeat status``: the cluster at a glance (:func:`cluster_status`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drumbeat.queue.base import FetchItem
from drumbeat.queue.partition import partition_of
from drumbeat.queue.redis import (
    DEFAULT_PREFIX,
    ClusterError,
    Keys,
    RedisFetcherQueue,
    RedisLink,
    RedisManagerQueue,
    RedisUnreachable,
    host_name,
    in_flight_budget,
    safe_url,
    text,
)
from drumbeat.runtime import allocator
from drumbeat.runtime.gctune import tune_gc
from drumbeat.settings import Settings, SettingsError, build, saved_values
from drumbeat.standalone import CrawlError, CrawlOutcome, Deployment, Fetching, run_crawl
from drumbeat.stats import StatsReader
from drumbeat.store.warc import WarcWriter, recover_directory
from drumbeat.web.address import WebAddress

if TYPE_CHECKING:
    from drumbeat.fetch.client import HttpClient
    from drumbeat.fetch.dns import DnsCache
    from drumbeat.fetcher import Fetcher
    from drumbeat.manager import Manager

log = logging.getLogger("drumbeat.cluster")


@dataclass(frozen=True)
class ManagerRole:
    redis_url: str
    crawl: str
    part: int
    parts: int
    weight: float = 1.0
    heartbeat_timeout_s: float = 15.0
    prefix: str = DEFAULT_PREFIX
    redis_ca: str | None = None


def run_manager(
    settings: Settings, role: ManagerRole, web: WebAddress | None = None
) -> CrawlOutcome:
    """Run (or resume) manager ``role.part`` of crawl ``role.crawl`` until the whole crawl
    is done, a limit, or a signal. ``web``: where to serve this manager's control API and
    /metrics (its partition's; as ``drumbeat crawl --web``), None: nowhere."""
    holder: dict[str, RedisManagerQueue] = {}

    @asynccontextmanager
    async def fetching(s: Settings, _processes: int) -> AsyncIterator[Fetching]:
        link = RedisLink(role.redis_url, prefix=role.prefix, ca_file=role.redis_ca)
        queue = RedisManagerQueue(
            link,
            role.crawl,
            role.part,
            role.parts,
            weight=role.weight,
            heartbeat_timeout_s=role.heartbeat_timeout_s,
        )
        try:
            try:
                identity = f"{host_name()}:{s.state_dir}"
                await queue.open(json.dumps(saved_values(s)), identity)
            except ClusterError as e:
                raise CrawlError(str(e)) from None
            holder["queue"] = queue
            yield Fetching(queue, [], list, inbox=queue.inbox)
        finally:
            await queue.close()
            await link.close()

    def on_manager(manager: Manager) -> None:
        queue = holder["queue"]
        manager.dispatch.stamp_ip_delays = True
        manager.dispatch.announce_ends = False  # RedisFetcherQueue.fetch_ended ignores them

        def on_fleet(slots: int) -> None:
            floor = manager.settings.concurrency
            manager.dispatch.limit = in_flight_budget(floor, slots, role.parts)

        queue.upkeep.on_fleet = on_fleet

        def on_absent(parts: tuple[int, ...]) -> None:
            if not parts:
                return
            names = [f"{j}/{role.parts}" for j in parts]
            line = (
                f"partition {role.part}/{role.parts} has nothing left and waits for the "
                f"others, but no manager is running for partition {', '.join(names)} "
                f"(start `drumbeat manager ... --partition {names[0]}`, same seeds and flags)"
            )
            log.warning("%s", line)
            print(f"drumbeat manager: {line}", file=sys.stderr, flush=True)

        queue.upkeep.on_absent = on_absent

        def figures() -> dict[str, Any]:
            st = manager.stats()
            return {
                "pages_done": st.pages_done,
                "in_flight": st.in_flight,
                "in_flight_limit": manager.dispatch.limit,
                "busy_hosts": manager.dispatch.busy_hosts(),
                "queued": st.queued,
                "seen": st.seen,
                "hosts": st.hosts,
                "stop_reason": manager.stop_reason,
                "counters": dict(queue.counters),
            }

        queue.upkeep.figures = figures

    def keep(url: str) -> bool:
        return partition_of(url, role.parts) == role.part

    return run_crawl(
        settings,
        Deployment(fetching, keep_seed=keep, on_manager=on_manager, local_fetchers=False),
        web=web,
    )


# -- fetchers -------------------------------------------------------------------------


@dataclass(frozen=True)
class FetcherRole:
    redis_url: str
    state_dir: Path
    processes: int = 1
    concurrency: int = 200
    exit_when_idle: bool = False
    heartbeat_timeout_s: float = 15.0
    prefix: str = DEFAULT_PREFIX
    redis_ca: str | None = None


# Set in the environment of the fetcher processes a supervisor starts: it says on stderr
# once what they would each say (Redis awaited, unreachable at a stop, or refusing them).
SUPERVISED_MARK = "DRUMBEAT_FETCHER_SUPERVISED"
# How a supervised fetcher process exits when Redis refuses it (a password changed): its
# supervisor stops rather than start processes that would be refused too.
EXIT_REFUSED = 3


def run_fetcher(role: FetcherRole) -> int:
    """Serve every crawl on the Redis until a signal (or, with ``exit_when_idle``, until
    every crawl there is done). ``processes`` > 1 starts that many fetcher processes and
    watches them (a dead one is started again)."""
    role.state_dir.mkdir(parents=True, exist_ok=True)
    if not os.environ.get(SUPERVISED_MARK):
        try:
            asyncio.run(_check_redis(role))
        except RedisUnreachable as e:
            # Fetchers may start before Redis: this one waits for it, and says so once.
            print(
                f"drumbeat fetcher: {e}; waiting for it (drumbeat.log in "
                f"{role.state_dir} says when it answers; Ctrl-C stops)",
                file=sys.stderr,
            )
        except ClusterError as e:  # a refusal (a password) is not waited out
            print(f"drumbeat fetcher: {e}", file=sys.stderr)
            return 1
    if role.processes > 1:
        return _supervise(role)
    handler = logging.FileHandler(role.state_dir / "drumbeat.log", encoding="utf-8")
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s %(levelname)s %(name)s[{os.getpid()}]: %(message)s")
    )
    root = logging.getLogger("drumbeat")
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    tune_gc()
    try:
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            return asyncio.run(_serve(role))
        return uvloop.run(_serve(role))
    finally:
        root.removeHandler(handler)
        handler.close()


async def _check_redis(role: FetcherRole) -> None:
    """Raise RedisUnreachable, or ClusterError for a refusal, unless Redis answers now."""
    link = RedisLink(role.redis_url, prefix=role.prefix, ca_file=role.redis_ca)
    try:
        await link.check()
    finally:
        await link.close()


def _supervise(role: FetcherRole) -> int:
    """Start ``role.processes`` single-process fetchers; start one again when it dies
    (at most once a second each); on SIGINT/SIGTERM stop them all, and when Redis
    refuses one (EXIT_REFUSED) stop them all and say why (exit status 1)."""
    env = {**allocator.preload_env(allocator.library("auto")), SUPERVISED_MARK: "1"}
    command = [
        sys.executable,
        "-P",
        "-m",
        "drumbeat",
        "fetcher",
        "--redis",
        role.redis_url,
        "--state",
        str(role.state_dir),
        "--processes",
        "1",
        "--concurrency",
        str(role.concurrency),
        "--heartbeat-timeout",
        str(role.heartbeat_timeout_s),
        "--prefix",
        role.prefix,
        *(["--redis-ca", role.redis_ca] if role.redis_ca else []),
        *(["--exit-when-idle"] if role.exit_when_idle else []),
    ]
    stopping = False

    def stop(_sig: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)

    def start() -> tuple[subprocess.Popen[bytes], float]:
        return subprocess.Popen(command, env=env, preexec_fn=_die_with_parent), time.monotonic()

    children = [start() for _ in range(role.processes)]
    failed = 0
    refused = False
    while children:
        if stopping or refused:
            for proc, _ in children:
                if proc.poll() is None:
                    proc.terminate()
            for proc, _ in children:
                proc.wait()
            return _refused(role) if refused else 0
        time.sleep(0.2)
        alive = []
        for proc, since in children:
            code = proc.poll()
            if code is None:
                alive.append((proc, since))
            elif code == EXIT_REFUSED:
                refused = True
            elif code != 0 and not stopping:
                failed += 1
                log.warning("fetcher process %d exited with %d; starting another", proc.pid, code)
                time.sleep(max(0.0, 1.0 - (time.monotonic() - since)))
                alive.append(start())
        children = alive
    if refused:  # (the last ones refused at once)
        return _refused(role)
    return 1 if failed and not role.exit_when_idle else 0


def _refused(role: FetcherRole) -> int:
    """Say why Redis refused the fetcher processes (asking it again); exit status 1."""
    try:
        asyncio.run(_check_redis(role))
    except ClusterError as e:
        print(f"drumbeat fetcher: {e}", file=sys.stderr)
    else:
        print(
            f"drumbeat fetcher: Redis refused the fetcher processes ({role.state_dir}/"
            "drumbeat.log says why)",
            file=sys.stderr,
        )
    return 1


def _die_with_parent() -> None:
    """In a fetcher process the supervisor starts: SIGTERM when the supervisor dies, even
    of kill -9 (Linux), so that no fetcher outlives it."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the children stop when stopped, or when Redis says so


@dataclass
class _CrawlFetcher:
    fetcher: Fetcher
    http: HttpClient
    dns: DnsCache
    warc: WarcWriter


class FetcherProcess:
    """One fetcher process: claims tasks while it has room, runs each with its crawl's
    Fetcher, answers WARC sync requests."""

    def __init__(self, role: FetcherRole, link: RedisLink) -> None:
        self.role = role
        self.link = link
        self.name = f"{host_name()}:{os.getpid()}"
        self.queue = RedisFetcherQueue(
            link,
            self.name,
            heartbeat_timeout_s=role.heartbeat_timeout_s,
            warc_sync=self._sync_warcs,
            slots=role.concurrency,
        )
        self.crawls: dict[str, _CrawlFetcher] = {}
        self.stopping = False
        self._slots: asyncio.Semaphore | None = None
        self._cpu_at_start = time.process_time()  # the imports' and start-up's left out
        self._started = time.monotonic()
        self.full_s = 0.0  # wall seconds with every slot taken

    def active(self) -> int:
        return sum(c.fetcher.stats().active for c in self.crawls.values())

    async def run(self) -> None:
        # Fetches at once, over every crawl: a claim takes whole tasks, so more items may
        # be held than run.
        self._slots = asyncio.Semaphore(self.role.concurrency)
        await self.queue.start()
        log.info("fetcher %s serving the crawls on %s", self.name, safe_url(self.role.redis_url))
        idle_since = time.monotonic()
        try:
            while not self.stopping:
                room = self.role.concurrency - self.active()
                if room <= 0:
                    full = time.monotonic()
                    await asyncio.sleep(0.002)
                    self.full_s += time.monotonic() - full
                    continue
                tasks = await self.queue.claim(self.name, min(32, room), timeout_s=0.5)
                for task in tasks:
                    crawl = self.queue.crawl_of(task.task_id)
                    (await self.for_crawl(crawl)).fetcher.start(task)
                if tasks or self.active():
                    idle_since = time.monotonic()
                elif (
                    self.role.exit_when_idle
                    and time.monotonic() - idle_since >= 1.0
                    and await self._all_done()
                ):
                    break
        finally:
            await self._drain()

    async def _all_done(self) -> bool:
        k: Keys = self.link.keys
        names = await self.link.call(lambda: self.link.redis.hkeys(k.crawls), "crawls")
        if not names:
            return False
        for raw in names:
            done_key = k.crawl(text(raw), "done")
            done = await self.link.call(partial(self.link.redis.exists, done_key), "done")
            if not done:
                return False
        return True

    async def for_crawl(self, crawl: str) -> _CrawlFetcher:
        """The Fetcher (and its client, resolver, WARC writer) of ``crawl``, made at its
        first task from the settings its managers registered."""
        known = self.crawls.get(crawl)
        if known is not None:
            return known
        info = await self.queue.crawl_info(crawl)
        try:
            settings = build(Settings(), info.settings)
        except SettingsError as e:  # a crawl registered by another drumbeat version
            log.error("crawl %s: its settings do not load here (%s); using defaults", crawl, e)
            settings = Settings()
        # This process's own --concurrency bounds its transfers, not the crawl's (which is
        # its managers' in-flight floor, shared by every fetcher).
        settings = replace(settings, concurrency=self.role.concurrency)
        # Here, not at the top: a manager process imports this module too, and has no use
        # for the fetcher's code (parsers, WARC writer, HTTP client).
        from drumbeat.fetcher import Fetcher, open_content_index, open_http

        http, dns = open_http(settings)
        warc_dir = self.role.state_dir / "warc" / crawl
        warc_dir.mkdir(parents=True, exist_ok=True)
        for rec in recover_directory(warc_dir):
            log.warning("recovered WARC file after a crash: %s", rec)
        warc = WarcWriter(
            warc_dir,
            max_file_bytes=settings.warc_max_file_bytes,
            gzip_level=settings.warc_gzip_level,
        )
        fetcher = Fetcher(
            settings,
            self.queue,
            http,
            warc,
            worker=self.name,
            pace=self._pacer(settings) if settings.ip_delay_s > 0 else None,
            slots=self._slots,
            # One index per crawl and state directory: the fetcher processes of this
            # machine that share it share the index; other machines have their own.
            content=open_content_index(settings, self.role.state_dir / "content" / f"{crawl}.lmdb"),
            partitions=info.partitions,
        )
        made = self.crawls[crawl] = _CrawlFetcher(fetcher, http, dns, warc)
        return made

    def _pacer(
        self, settings: Settings
    ) -> Callable[[FetchItem], AbstractAsyncContextManager[None]]:
        lease_s = settings.total_timeout_s + 5.0

        def pace(item: FetchItem) -> AbstractAsyncContextManager[None]:
            return self.queue.ip_lease(item.ip, item.ip_delay_s, lease_s)

        return pace

    async def _sync_warcs(self) -> None:
        for c in list(self.crawls.values()):
            await c.warc.sync_off_loop()

    async def _drain(self, grace_s: float = 10.0) -> None:
        """Let the fetches under way finish and report (up to ``grace_s``), then hand
        back what is left and close."""
        end = time.monotonic() + grace_s
        while self.active() and time.monotonic() < end:
            await asyncio.sleep(0.05)
        for c in self.crawls.values():
            await c.fetcher.stop()
        await self.queue.close()
        for c in self.crawls.values():
            c.warc.close()
            if c.fetcher.content is not None:
                c.fetcher.content.close()
            await c.http.close()
            await c.dns.close()
        stats = [c.fetcher.stats() for c in self.crawls.values()]
        stage_s: dict[str, float] = {}
        for st in stats:
            for stage, spent in st.stage_s.items():
                stage_s[stage] = stage_s.get(stage, 0.0) + spent
        write_fetcher_stages(
            self.role.state_dir / STAGES_DIR / f"{self.name.replace(':', '-')}.json",
            pages=sum(st.fetched for st in stats),
            cpu_s=time.process_time() - self._cpu_at_start,
            stage_s=stage_s,
            handoff_s=self.queue.handoff_s,
            wall_s={
                "up": time.monotonic() - self._started,
                "waiting_for_tasks": self.queue.waited_s,
                "slots_full": self.full_s,
                "sending_reports": self.queue.reporting_s,
            },
        )


STAGES_DIR = "stages"


def write_fetcher_stages(
    path: Path,
    *,
    pages: int,
    cpu_s: float,
    stage_s: dict[str, float],
    handoff_s: float,
    wall_s: dict[str, float] | None = None,
) -> None:
    """Write where a fetcher process's CPU time went over its life, as ``stages.json``
    does for a standalone crawl's fetchers: ``seconds`` per stage (warc, parse,
    normalize, dedup..., ``handoff``: tasks in and results out through Redis; ``fetch``:
    the rest, HTTP and the event loop), ``pages`` fetched and ``cpu_s`` in all; and
    ``wall_s``, its wall time ``up`` and how much of it it had room and no task
    (``waiting_for_tasks``) or no room (``slots_full``), and how long its reports waited
    for Redis (``sending_reports``: its parsing waits meanwhile). A write that fails is
    logged: the figures are for reading, the crawl does not need them."""
    seconds = {**stage_s, "handoff": handoff_s}
    seconds["fetch"] = max(0.0, cpu_s - sum(seconds.values()))
    doc: dict[str, Any] = {
        "pages": pages,
        "cpu_s": round(cpu_s, 3),
        "seconds": {k: round(v, 4) for k, v in sorted(seconds.items())},
    }
    if wall_s is not None:
        doc["wall_s"] = {k: round(v, 3) for k, v in wall_s.items()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as e:
        log.warning("could not write %s: %s", path, e)


async def _serve(role: FetcherRole) -> int:
    try:
        link = RedisLink(role.redis_url, prefix=role.prefix, ca_file=role.redis_ca)
    except ClusterError as e:
        print(f"drumbeat fetcher: {e}", file=sys.stderr)
        return 1
    process = FetcherProcess(role, link)
    loop = asyncio.get_running_loop()

    def stop() -> None:
        process.stopping = True
        link.closing = True  # no waiting for an unreachable Redis once asked to stop

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    try:
        await process.run()
    except ClusterError as e:
        # A supervisor speaks for its processes: it says why once (see _refused).
        supervised = bool(os.environ.get(SUPERVISED_MARK))
        if not supervised:
            print(f"drumbeat fetcher: {e}", file=sys.stderr)
        if process.stopping:
            return 0
        log.error("%s", e)
        return EXIT_REFUSED if supervised else 1
    finally:
        await link.close()
    return 0


# -- status ---------------------------------------------------------------------------


async def cluster_status(
    redis_url: str, prefix: str = DEFAULT_PREFIX, redis_ca: str | None = None
) -> dict[str, Any]:
    """The cluster at a glance: crawls (weight, partitions, managers' figures, queues),
    fetchers alive."""
    link = RedisLink(redis_url, prefix=prefix, ca_file=redis_ca)
    k = link.keys
    r = link.redis
    try:
        await link.check()
        t = await r.time()
        now_ms = int(t[0]) * 1000 + int(t[1]) // 1000
        workers: list[Any] = await r.zrangebyscore(k.workers, "-inf", "+inf", withscores=True)
        fetchers = []
        for worker, score in workers:
            w = text(worker)
            slots = await r.hget(k.worker_info(w), "slots")
            fetchers.append(
                {
                    "name": w,
                    # Never "-0.0 s ago": now_ms is cut to the millisecond, and a beat may
                    # carry a later stamp than it.
                    "last_heartbeat_s": max(0.0, round((now_ms - score) / 1000, 1)),
                    "tasks_held": await r.llen(k.worker(w)),
                    "slots": int(slots) if slots is not None else None,
                }
            )
        crawls: list[dict[str, Any]] = []
        for name, weight in sorted((await r.hgetall(k.crawls)).items()):
            c = text(name)
            meta = await r.hgetall(k.crawl(c, "meta"))
            parts = int(meta.get(b"partitions", b"1"))
            managers = []
            for i in range(parts):
                raw = await r.hget(k.part(c, "mgr", i), "json")
                managers.append(
                    {
                        "partition": i,
                        "alive": raw is not None,
                        **(json.loads(raw) if raw else {}),
                        "results_waiting": await r.llen(k.part(c, "results", i)),
                        "inbox": await r.llen(k.part(c, "inbox", i)),
                        "idle": bool(await r.hexists(k.crawl(c, "idle"), str(i))),
                    }
                )
            crawls.append(
                {
                    "crawl": c,
                    "weight": float(weight),
                    "partitions": parts,
                    "done": bool(await r.exists(k.crawl(c, "done"))),
                    "tasks_pending": await r.llen(k.crawl(c, "pending")),
                    "tasks_total": await r.hlen(k.crawl(c, "tasks")),
                    "pages_done": sum(m.get("pages_done", 0) for m in managers),
                    "managers": managers,
                }
            )
        snap = (await StatsReader(r, prefix).snapshot(window_s=10)).as_dict()
        for entry in crawls:
            name = entry["crawl"]
            entry["rates"] = snap["queues"].get(name, {})
            entry["totals"] = {
                tier: by_crawl.get(name, {}) for tier, by_crawl in snap["tiers"].items()
            }
        info = await r.info("memory")
        return {
            "redis": safe_url(redis_url),
            "redis_used_memory": info.get("used_memory"),
            "crawls": crawls,
            "fetchers": fetchers,
        }
    finally:
        await link.close()


async def forget_crawl(
    redis_url: str, crawl: str, prefix: str = DEFAULT_PREFIX, redis_ca: str | None = None
) -> int:
    """Remove crawl ``crawl``'s keys (its registration, queues, inboxes, figures); returns
    how many. ClusterError while one of its managers is alive, or if there is no such
    crawl. Per-second stats expire on their own."""
    link = RedisLink(redis_url, prefix=prefix, ca_file=redis_ca)
    k, r = link.keys, link.redis
    try:
        await link.check()
        if not await r.hexists(k.crawls, crawl):
            raise ClusterError(f"no crawl {crawl!r} in Redis")
        # SCAN patterns are globs: a name's own *, ?, [, ] and backslash are escaped.
        glob = k.crawl(re.sub(r"([*?\[\]\\])", r"\\\1", crawl), "")
        alive = [key async for key in r.scan_iter(glob + "mgr:*")]
        if alive:
            raise ClusterError(f"crawl {crawl!r} has managers running; stop them first")
        keys = [key async for key in r.scan_iter(glob + "*")]
        async with r.pipeline(transaction=True) as p:
            p.hdel(k.crawls, crawl)
            p.hdel(k.prefix + "passes", crawl)
            for key in keys:
                p.delete(key)
            await p.execute()
        return len(keys)
    finally:
        await link.close()


def render_status(status: dict[str, Any]) -> str:
    """``status`` as a few lines of text for a terminal."""
    lines = [
        (
            f"Redis {status['redis']}: {status['redis_used_memory'] or 0:,} bytes used; "
            f"{len(status['fetchers'])} fetcher processes"
        )
    ]
    for f in status["fetchers"]:
        lines.append(
            f"  fetcher {f['name']}: {f['tasks_held']} tasks held"
            + (f", {f['slots']} slots" if f.get("slots") is not None else "")
            + f", heartbeat {f['last_heartbeat_s']:.1f} s ago"
        )
    if not status["crawls"]:
        lines.append("no crawls")
    for c in status["crawls"]:
        # Pages are what the live managers report: a crawl none of whose managers runs
        # (stopped by a limit or a signal, resumable) says so rather than "0 pages".
        alive = any(m["alive"] for m in c["managers"])
        state = "done" if c["done"] else "running" if alive else "stopped"
        pages = f"{c['pages_done']:,} pages" if alive else "no manager running"
        rates = c.get("rates", {})
        lines.append(
            f"crawl {c['crawl']} ({state}): weight {c['weight']:g}, {c['partitions']} "
            f"partitions, {pages}, {c['tasks_pending']} tasks pending; "
            f"last 10 s: {rates.get('fetched', 0.0):,.1f} fetches/s, "
            f"{rates.get('errors', 0.0):,.1f} errors/s"
        )
        for m in c["managers"]:
            if not m["alive"]:
                lines.append(f"  partition {m['partition']}: no manager running")
                continue
            lines.append(
                f"  partition {m['partition']}: {m.get('host')} pid {m.get('pid')}, "
                f"{m.get('pages_done', 0):,} pages, {m.get('queued', 0):,} queued, "
                f"{m.get('in_flight', 0)} in flight"
                + (f" of {m['in_flight_limit']:,}" if "in_flight_limit" in m else "")
                + (f" on {m['busy_hosts']:,} hosts" if "busy_hosts" in m else "")
                + f", inbox {m['inbox']}"
                + (", idle" if m["idle"] else "")
            )
    return "\n".join(lines)
