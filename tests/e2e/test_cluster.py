"""End-to-end: a crawl on a Redis cluster (real redis-server, real subprocesses for the
managers and fetchers) against simweb on loopback, checked against simweb's oracle and
the server's own log, as tests/e2e/test_crawl.py checks the standalone crawl."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from drumbeat.simweb.model import SimWebConfig
from drumbeat.simweb.server import run_in_thread
from drumbeat.testing import RedisServer
from tests.e2e.test_crawl import CONFIG, assert_polite, crawl_cmd, fetched_pages, read_log
from tests.web.test_web_crawl import ctl

HEARTBEAT_TIMEOUT = "2"  # the fault tests' fetchers are taken for dead after this
# The tests sharing one cluster crawl run on one xdist worker (the crawl runs once).
on_cluster_crawl = pytest.mark.xdist_group("cluster_crawl")


def manager_cmd(
    web, redis: RedisServer, state: Path, part: str, *extra: str, heartbeat: str = HEARTBEAT_TIMEOUT
) -> list[str]:
    """test_crawl's `drumbeat crawl` command, as manager ``part`` of crawl "test"."""
    cluster = ["--redis", redis.url, "--crawl", "test", "--partition", part]
    cluster += ["--heartbeat-timeout", heartbeat]
    cmd = crawl_cmd(web, state, "--allow-loopback", *cluster, *extra)
    cmd[cmd.index("crawl")] = "manager"
    return cmd


def fetcher_cmd(
    redis: RedisServer, state: Path, *extra: str, heartbeat: str = HEARTBEAT_TIMEOUT
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "drumbeat",
        "fetcher",
        "--redis",
        redis.url,
        "--state",
        str(state),
        "--heartbeat-timeout",
        heartbeat,
        "--exit-when-idle",
        *extra,
    ]


def read_logs(*states: Path) -> list[dict]:
    return [entry for state in states for entry in read_log(state)]


@pytest.fixture(scope="module")
def web():
    config = SimWebConfig(seed=11, hosts=40, ips=6, pages_per_host=6, crawl_delay_s=0.3)
    with run_in_thread(config) as w:
        yield w


def in_flight_limits(redis: RedisServer) -> dict[int, int]:
    """Each live manager's in-flight budget, as `drumbeat status` shows it."""
    from drumbeat.cluster import cluster_status

    status = asyncio.run(cluster_status(redis.url))
    return {
        m["partition"]: m["in_flight_limit"]
        for c in status["crawls"]
        for m in c["managers"]
        if "in_flight_limit" in m
    }


@pytest.fixture(scope="module")
def cluster_crawl(web, tmp_path_factory):
    """Two managers of one crawl and a fetcher with two processes, to the crawl's end;
    (work dir, requests served, final status, the largest in-flight budget each manager
    showed while it ran)."""
    work = tmp_path_factory.mktemp("cluster")
    with RedisServer(work / "redis") as redis:
        start = len(web.requests)
        # The default heartbeat timeout: a busy machine must not take a live fetcher for
        # dead here, where every page is to be fetched once.
        fetchers = subprocess.Popen(
            fetcher_cmd(redis, work / "fetchers", "--processes", "2", heartbeat="15"),
            stderr=subprocess.PIPE,
            text=True,
        )
        managers = [
            subprocess.Popen(
                manager_cmd(web, redis, work / f"m{i}", f"{i}/2", heartbeat="15"),
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(2)
        ]
        limits: dict[int, int] = {}
        try:
            deadline = time.monotonic() + 240
            while any(m.poll() is None for m in managers) and time.monotonic() < deadline:
                for part, limit in in_flight_limits(redis).items():
                    limits[part] = max(limit, limits.get(part, 0))
                time.sleep(0.2)
            codes = [m.wait(timeout=5) for m in managers]
            fetcher_code = fetchers.wait(timeout=60)
        finally:
            _kill_running(*managers, fetchers)
        errors = [p.stderr.read() for p in [*managers, fetchers]]
        assert codes == [0, 0], errors
        assert fetcher_code == 0, errors[-1]
        status = subprocess.run(
            [sys.executable, "-m", "drumbeat", "status", "--redis", redis.url, "--json"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    return work, list(web.requests[start:]), json.loads(status.stdout), limits


@on_cluster_crawl
def test_two_managers_fetch_what_one_crawl_does_each_page_once(web, cluster_crawl):
    work, requests, _, _ = cluster_crawl
    entries = read_logs(work / "m0", work / "m1")
    pages = fetched_pages(entries)
    assert Counter(pages).most_common(1)[0][1] == 1, "a page was fetched twice"
    truth = web.model.crawl(web.seeds)
    assert set(pages) == truth.fetched
    # Each manager fetched only its own partition's pages.
    from drumbeat.queue.partition import partition_of

    for i in range(2):
        own = fetched_pages(read_logs(work / f"m{i}"))
        assert own and all(partition_of(u, 2) == i for u in own)
    served = Counter((r.host, r.path) for r in requests if r.path != "/robots.txt")
    assert max(served.values()) == 1
    robots = Counter(r.host for r in requests if r.path == "/robots.txt")
    for host, n in robots.items():
        assert n == (2 if web.model.robots_status(host) == 500 else 1), host


@on_cluster_crawl
def test_politeness_holds_cluster_wide(web, cluster_crawl):
    _, requests, _, _ = cluster_crawl
    assert_polite(web, requests)


@on_cluster_crawl
def test_status_shows_the_finished_crawl(cluster_crawl):
    _, _, status, _ = cluster_crawl
    [crawl] = status["crawls"]
    assert crawl["crawl"] == "test" and crawl["partitions"] == 2 and crawl["done"]
    assert crawl["tasks_pending"] == 0 and crawl["tasks_total"] == 0


@on_cluster_crawl
def test_each_manager_keeps_its_share_of_twice_the_fleet_in_flight(cluster_crawl):
    """2 fetcher processes of 200 slots, 2 managers: each may keep 2 x 400 / 2 in flight
    (its --concurrency, the default 100, is only a floor)."""
    _, _, _, limits = cluster_crawl
    assert limits == {0: 400, 1: 400}


@on_cluster_crawl
def test_fetchers_write_warc_per_crawl(cluster_crawl):
    work, _, _, _ = cluster_crawl
    assert list((work / "fetchers" / "warc" / "test").glob("*.warc.gz"))


# -- faults ---------------------------------------------------------------------------


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _log_lines(state: Path) -> int:
    path = state / "crawl.log"
    return path.read_text().count("\n") if path.exists() else 0


def _kill_running(*procs: subprocess.Popen) -> None:
    """Kill those of ``procs`` still running (a test's processes, whatever it ended with)."""
    for p in procs:
        if p.poll() is None:
            p.kill()


def _finish(procs: list[subprocess.Popen], timeout_s: float = 240) -> list[int]:
    try:
        return [p.wait(timeout=timeout_s) for p in procs]
    finally:
        _kill_running(*procs)


def _assert_nothing_lost(web, work: Path) -> None:
    pages = fetched_pages(read_logs(work / "m0", work / "m1"))
    assert set(pages) == web.model.crawl(web.seeds).fetched


def _start_managers(web, redis, work: Path) -> list[subprocess.Popen]:
    return [_start_manager(web, redis, work, i) for i in range(2)]


def _start_manager(web, redis, work: Path, i: int) -> subprocess.Popen:
    """Manager i of 2; its stderr goes to work/m{i}.err (appended: a restart adds to it)."""
    with open(work / f"m{i}.err", "a") as err:
        return subprocess.Popen(manager_cmd(web, redis, work / f"m{i}", f"{i}/2"), stderr=err)


def test_a_fetcher_killed_mid_task_loses_nothing(web, tmp_path):
    """kill -9 of a fetcher process holding tasks: they come back to their managers
    within the heartbeat timeout and are fetched by the other fetcher."""
    import redis as redis_py

    with RedisServer(tmp_path / "redis") as redis:
        victim = subprocess.Popen(fetcher_cmd(redis, tmp_path / "f1", "--processes", "1"))
        other = subprocess.Popen(fetcher_cmd(redis, tmp_path / "f2", "--processes", "1"))
        managers = _start_managers(web, redis, tmp_path)
        client = redis_py.Redis.from_url(redis.url)
        held = f"drumbeat:w:{socket.gethostname()}:{victim.pid}"
        try:
            # Freeze the victim before checking: a running one may report its tasks
            # between the check and the kill, and then there is nothing to take back.
            deadline = time.monotonic() + 60
            while True:
                _wait_for(lambda: client.llen(held) > 0, 60, "the victim to hold tasks")
                victim.send_signal(signal.SIGSTOP)
                if client.llen(held) > 0:
                    break
                victim.send_signal(signal.SIGCONT)
                assert time.monotonic() < deadline, "the victim never held tasks when frozen"
            victim.send_signal(signal.SIGKILL)
            codes = _finish(managers)
        finally:
            client.close()
            _kill_running(victim, other, *managers)
        assert codes == [0, 0]
    _assert_nothing_lost(web, tmp_path)
    logs = [(tmp_path / f"m{i}" / "drumbeat.log").read_text() for i in range(2)]
    assert any("missed heartbeats" in text for text in logs), "its tasks were taken back"


def test_a_manager_killed_mid_crawl_resumes_its_partition(web, tmp_path):
    """kill -9 of one manager mid-crawl, then the same command again: it resumes from its
    state dir; links forwarded to it meanwhile waited in Redis; nothing is lost."""
    with RedisServer(tmp_path / "redis") as redis:
        fetchers = subprocess.Popen(fetcher_cmd(redis, tmp_path / "f", "--processes", "2"))
        managers = _start_managers(web, redis, tmp_path)
        try:
            _wait_for(lambda: _log_lines(tmp_path / "m0") > 40, 60, "manager 0's pages")
            # A manager serves the control API for its partition, as `drumbeat crawl` does.
            answer = ctl(tmp_path / "m1", "status")
            assert answer.returncode == 0, answer.stderr
            assert json.loads(answer.stdout)["pages_done"] > 0
            managers[0].send_signal(signal.SIGKILL)
            managers[0].wait()
            time.sleep(1.0)  # partition 1 goes on, forwarding links to partition 0
            managers[0] = _start_manager(web, redis, tmp_path, 0)
            codes = _finish(managers)
        finally:
            _kill_running(fetchers, *managers)
        assert codes == [0, 0]
    _assert_nothing_lost(web, tmp_path)


def test_a_partition_nobody_started_is_named_by_the_manager_waiting_for_it(web, tmp_path):
    """Manager 0 of 2 alone runs out of work and waits for partition 1, which no manager
    runs: it says so on stderr (not only in `drumbeat status`); once manager 1 starts,
    the crawl ends and nothing is lost."""
    with RedisServer(tmp_path / "redis") as redis:
        fetchers = subprocess.Popen(fetcher_cmd(redis, tmp_path / "f", "--processes", "2"))
        managers = [_start_manager(web, redis, tmp_path, 0)]
        try:
            said = "no manager is running for partition 1/2 (start `drumbeat manager"
            _wait_for(lambda: said in (tmp_path / "m0.err").read_text(), 120, "the notice")
            assert managers[0].poll() is None  # it waits, as it should
            managers.append(_start_manager(web, redis, tmp_path, 1))
            codes = _finish(managers)
        finally:
            _kill_running(fetchers, *managers)
        assert codes == [0, 0]
    _assert_nothing_lost(web, tmp_path)
    assert (tmp_path / "m0.err").read_text().count(said) == 1  # said once


def test_a_redis_outage_is_waited_out(web, tmp_path):
    """Redis stops for 30 s mid-crawl and comes back with its data: managers and
    fetchers wait, say so in their logs, take no fetcher for dead for it, and the crawl
    ends with nothing lost."""
    with RedisServer(tmp_path / "redis") as redis:
        fetchers = subprocess.Popen(fetcher_cmd(redis, tmp_path / "f", "--processes", "2"))
        managers = _start_managers(web, redis, tmp_path)
        try:
            _wait_for(lambda: _log_lines(tmp_path / "m1") > 30, 60, "manager 1's pages")
            redis.stop()
            time.sleep(30.0)
            redis.start()
            codes = _finish(managers)
            assert fetchers.wait(timeout=60) == 0
        finally:
            _kill_running(fetchers, *managers)
        assert codes == [0, 0]
    _assert_nothing_lost(web, tmp_path)
    for log in (tmp_path / "m0" / "drumbeat.log", tmp_path / "f" / "drumbeat.log"):
        text = log.read_text()
        assert "unreachable" in text and "reachable again" in text, log
    for i in range(2):
        assert "missed heartbeats" not in (tmp_path / f"m{i}" / "drumbeat.log").read_text()


def _fetched_per_second(redis: RedisServer) -> dict[int, Counter[str]]:
    """Fetches per second per crawl, as the fetchers counted them (drumbeat.stats)."""
    import redis as redis_py

    out: dict[int, Counter[str]] = {}
    client = redis_py.Redis.from_url(redis.url)
    try:
        for key in client.scan_iter("drumbeat:stats:s:*"):
            sec = out.setdefault(int(key.rsplit(b":", 1)[1]), Counter())
            for field, value in client.hgetall(key).items():
                _, crawl, counter = field.decode().split("|")
                if counter == "fetched":
                    sec[crawl] += int(value)
    finally:
        client.close()
    return out


@pytest.mark.alone  # shares measured on a machine of its own
def test_two_crawls_share_the_fetchers_by_weight(tmp_path):
    """Crawls of weight 3 and 1 on one fetcher process that cannot keep up with both (4
    fetches at a time from a server 20 ms away): while both have work, their fetches
    split 3:1."""
    config = SimWebConfig(seed=5, hosts=200, ips=8, pages_per_host=30, latency_s=0.02)
    with run_in_thread(config) as big, RedisServer(tmp_path / "redis") as redis:
        fetcher = subprocess.Popen(
            fetcher_cmd(redis, tmp_path / "f", "--processes", "1", "--concurrency", "4")
        )
        # Every host a seed: each crawl has far more hosts ready than the fetcher can take.
        port = big.seeds[0].rsplit(":", 1)[1].rstrip("/")
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("".join(f"http://site{i}.test:{port}/\n" for i in range(config.hosts)))
        managers = []
        for name, weight in (("heavy", "3"), ("light", "1")):
            cmd = manager_cmd(big, redis, tmp_path / name, "0/1", "--max-time", "8")
            cmd += ["--seeds", str(seeds)]
            cmd[cmd.index("--crawl") + 1] = name
            cmd[cmd.index("--host-delay") + 1] = "0"
            cmd[cmd.index("--ip-delay") + 1] = "0"
            cmd[cmd.index("--concurrency") + 1] = "400"  # work waits in Redis for both
            # Shares are kept in items, claim by claim: tasks of a few items make the grain
            # fine against the few hundred fetches a second this machine measures.
            # Checkpoints as by default: one every half second would hold a manager's
            # dispatch now and then, and its crawl would run out of work in Redis.
            config_text = CONFIG.replace("checkpoint_interval_s = 0.5", "")
            (tmp_path / f"{name}.toml").write_text(config_text + "task_max_items = 4\n")
            managers.append(subprocess.Popen([*cmd, "--weight", weight]))
        try:
            codes = _finish(managers, 120)
            fetcher.terminate()  # it flushes its last counts
            assert fetcher.wait(timeout=30) == 0
        finally:
            _kill_running(fetcher)
        assert codes == [0, 0]
        fetched = _fetched_per_second(redis)
    # The seconds both crawls were served, less the first two and the last (start-up, the
    # crawls' ends): the fetcher's own counts (drumbeat.stats), per crawl.
    both = sorted(sec for sec, n in fetched.items() if n["heavy"] and n["light"])[2:-1]
    counts = {name: sum(fetched[sec][name] for sec in both) for name in ("heavy", "light")}
    assert len(both) >= 3 and counts["light"] > 100, counts
    assert counts["heavy"] / counts["light"] == pytest.approx(3.0, rel=0.05), counts
