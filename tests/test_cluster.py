"""The cluster's faces (drumbeat.cluster, `drumbeat manager | fetcher | status`): their
arguments and what an operator reads when the cluster cannot be joined. The crawls
themselves are in tests/e2e/test_cluster.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from drumbeat.cluster import render_status
from tests.imports import loaded_by

# Nothing listens on port 1 of loopback: a refused connection, never a remote one.
NOWHERE = "redis://127.0.0.1:1/0"


def drumbeat(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "drumbeat", *args], capture_output=True, text=True, timeout=60
    )


def two_fetchers(redis_url: str, state: Path) -> subprocess.Popen[str]:
    """`drumbeat fetcher --processes 2` (a supervisor and its two processes), its stderr
    piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "drumbeat", "fetcher", "--redis", redis_url,
         "--state", str(state), "--processes", "2"],
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--partition", "2/2"], "--partition '2/2'"),
        (["--crawl", "a:b"], "--crawl 'a:b'"),
        (["--redis", "localhost:6379"], "expected redis://"),
    ],
)
def test_bad_manager_arguments_are_one_line_and_exit_2(tmp_path, args, says) -> None:
    base = {"--redis": NOWHERE, "--crawl": "c", "--partition": "0/1"}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    flags = [x for kv in base.items() for x in kv]
    done = drumbeat("manager", "http://a.test/", *flags, "--state", str(tmp_path / "s"))
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_an_unreachable_redis_is_one_line_and_exit_1(tmp_path) -> None:
    manager = drumbeat(
        "manager", "http://a.test/", "--redis", NOWHERE, "--crawl", "c", "--state", str(tmp_path)
    )
    assert manager.returncode == 1 and "cannot reach Redis" in manager.stderr
    assert "Traceback" not in manager.stderr
    status = drumbeat("status", "--redis", NOWHERE)
    assert status.returncode == 1 and status.stderr.count("\n") == 1
    assert "cannot reach Redis at redis://127.0.0.1:1/0" in status.stderr


def test_status_text_names_what_an_operator_looks_for() -> None:
    text = render_status(
        {
            "redis": NOWHERE,
            "redis_used_memory": 1_500_000,
            "fetchers": [
                {"name": "vm:12", "tasks_held": 3, "slots": 200, "last_heartbeat_s": 0.2}
            ],
            "crawls": [
                {
                    "crawl": "news",
                    "done": False,
                    "weight": 3.0,
                    "partitions": 2,
                    "pages_done": 1234,
                    "tasks_pending": 7,
                    "rates": {"fetched": 55.5, "errors": 0.5},
                    "managers": [
                        {"partition": 0, "alive": True, "host": "vm", "pid": 7, "inbox": 1,
                         "idle": False, "pages_done": 1000, "queued": 50, "in_flight": 4,
                         "in_flight_limit": 1600, "busy_hosts": 3},
                        {"partition": 1, "alive": False, "inbox": 9, "idle": False},
                    ],
                }
            ],
        }
    )  # fmt: skip
    assert "1 fetcher processes" in text and "vm:12: 3 tasks held, 200 slots" in text
    assert "4 in flight of 1,600 on 3 hosts" in text
    assert "crawl news (running): weight 3, 2 partitions, 1,234 pages" in text
    assert "55.5 fetches/s" in text
    assert "partition 1: no manager running" in text


def test_status_text_tells_a_stopped_crawl_from_a_running_one() -> None:
    """No manager alive and the crawl not done: stopped (by a limit or a signal; the
    same commands resume it), not "running" with "0 pages"."""
    manager = {"alive": False, "inbox": 0, "idle": False}
    crawl = {
        "crawl": "news", "weight": 1.0, "partitions": 2, "pages_done": 0,
        "tasks_pending": 0, "rates": {},
        "managers": [{"partition": 0, **manager}, {"partition": 1, **manager}],
    }  # fmt: skip
    status = {"redis": NOWHERE, "redis_used_memory": 0, "fetchers": []}
    stopped = render_status({**status, "crawls": [{**crawl, "done": False}]})
    assert "crawl news (stopped): weight 1, 2 partitions, no manager running" in stopped
    assert "0 pages" not in stopped
    done = render_status({**status, "crawls": [{**crawl, "done": True}]})
    assert "crawl news (done)" in done


def test_a_stopped_crawl_can_be_forgotten(redis_server) -> None:
    """`drumbeat status --forget NAME` removes that crawl's keys only (a name with glob
    characters included), and refuses while one of its managers runs."""
    import asyncio

    import redis as redis_py

    from drumbeat.cluster import forget_crawl
    from drumbeat.queue.redis import ClusterError, Keys

    k = Keys()
    client = redis_py.Redis.from_url(redis_server.url)
    try:
        for crawl in ("a*b", "axb"):
            client.hset(k.crawls, crawl, 1)
            client.rpush(k.crawl(crawl, "pending"), "0:1:2:1")
            client.hset(k.crawl(crawl, "meta"), "partitions", 1)
        client.hset(k.part("a*b", "mgr", 0), "json", "{}")
        with pytest.raises(ClusterError, match="managers running"):
            asyncio.run(forget_crawl(redis_server.url, "a*b"))
        client.delete(k.part("a*b", "mgr", 0))
        assert asyncio.run(forget_crawl(redis_server.url, "a*b")) == 2
        assert client.hkeys(k.crawls) == [b"axb"]
        assert client.exists(k.crawl("axb", "pending"), k.crawl("axb", "meta")) == 2
        with pytest.raises(ClusterError, match="no crawl 'a\\*b'"):
            asyncio.run(forget_crawl(redis_server.url, "a*b"))
        done = drumbeat("status", "--redis", redis_server.url, "--forget", "axb")
        assert done.returncode == 0 and "forgot 'axb'" in done.stderr
        assert "no crawls" in done.stdout
    finally:
        client.close()


def test_status_never_says_a_heartbeat_came_in_the_future(redis_server) -> None:
    """A fetcher's beat stamped later than the clock `drumbeat status` read (which cuts
    Redis's TIME to the millisecond) is 0.0 s ago, not "-0.0 s ago"."""
    import asyncio

    import redis as redis_py

    from drumbeat.cluster import cluster_status
    from drumbeat.queue.redis import Keys

    client = redis_py.Redis.from_url(redis_server.url)
    try:
        seconds, micros = client.time()
        client.zadd(Keys().workers, {"vm:1": seconds * 1000 + micros / 1000 + 40})
        status = asyncio.run(cluster_status(redis_server.url))
        assert [f["last_heartbeat_s"] for f in status["fetchers"]] == [0.0]
        assert "heartbeat 0.0 s ago" in render_status(status)
    finally:
        client.close()


def test_a_fetcher_runs_as_many_transfers_as_its_own_concurrency(redis_server, tmp_path) -> None:
    """A crawl's --concurrency is its managers' in-flight floor; each fetcher process's
    HTTP client takes its own --concurrency, whatever the crawl registered."""
    import asyncio
    import json

    from drumbeat.cluster import FetcherProcess, FetcherRole
    from drumbeat.queue.redis import RedisLink, RedisManagerQueue

    async def go() -> str:
        mgr_link = RedisLink(redis_server.url)
        mgr = RedisManagerQueue(mgr_link, "c", 0, 1, tick_s=3600.0)
        await mgr.open(json.dumps({"concurrency": 7}))
        link = RedisLink(redis_server.url)
        role = FetcherRole(redis_url=redis_server.url, state_dir=tmp_path, concurrency=300)
        made = await FetcherProcess(role, link).for_crawl("c")
        try:
            return repr(made.http)
        finally:
            made.warc.close()
            if made.fetcher.content is not None:
                made.fetcher.content.close()
            await made.http.close()
            await made.dns.close()
            await mgr.close()
            await link.close()
            await mgr_link.close()

    assert "limit 300" in asyncio.run(go())


def test_a_fetcher_started_before_redis_says_once_that_it_waits(tmp_path) -> None:
    """Fetchers may start before Redis: the supervisor of two fetcher processes says
    once that it waits (not once per process, not in the log only), and a stop while
    Redis is still away is a clean exit."""
    import select
    import signal
    import time

    proc = two_fetchers(NOWHERE, tmp_path)
    try:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], 60)
        first = proc.stderr.readline() if ready else ""
        time.sleep(2.0)  # the two processes start and wait too
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "cannot reach Redis at redis://127.0.0.1:1/0" in first and "waiting for it" in first
    assert rest == "", rest
    assert proc.returncode == 0


def test_a_fetcher_refused_by_redis_stops_with_one_line(tmp_path) -> None:
    from drumbeat.testing import RedisServer

    with RedisServer(tmp_path / "redis", password="right-one") as server:
        wrong = server.url.replace("right-one", "wrong-one")
        done = drumbeat("fetcher", "--redis", wrong, "--state", str(tmp_path / "f"))
    assert done.returncode == 1, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "refused" in done.stderr
    assert "wrong-one" not in done.stderr


def test_fetchers_refused_mid_crawl_stop_with_one_line(tmp_path) -> None:
    """Redis starts asking for a password while two fetcher processes serve: their
    supervisor stops them all and says why once, instead of starting processes that
    Redis refuses again and again."""
    import time

    import redis as redis_py

    from drumbeat.testing import RedisServer

    with RedisServer(tmp_path / "redis") as server:
        proc = two_fetchers(server.url, tmp_path / "f")
        admin = redis_py.Redis(port=server.port)
        try:
            deadline = time.monotonic() + 60
            while admin.zcard("drumbeat:workers") < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert admin.zcard("drumbeat:workers") == 2, "both processes joined"
            admin.config_set("requirepass", "changed")
            admin.execute_command("CLIENT", "KILL", "TYPE", "normal")  # ours too
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
            admin.close()
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "refused" in lines[0], err


def test_fetchers_and_status_load_no_manager() -> None:
    # `drumbeat fetcher` and `drumbeat status` import drumbeat.cluster; only a manager
    # role needs the manager's modules, and it imports them when it starts.
    assert loaded_by("import drumbeat.cli, drumbeat.cluster", ["drumbeat.manager"]) == []
