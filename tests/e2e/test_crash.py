"""Crash safety: the whole crawl (manager and fetcher processes) killed with SIGKILL at
ten random instants, restarted each time, then run to the end.

The kills land wherever the crawl is: WARC writes, DRUM merges, disk-queue appends,
checkpoints, journal writes. At the end every reachable allowed page has been fetched,
every WARC file reads back with warcio (torn tails were cut on restart), and the pages
a kill makes the crawl fetch again are at most those it had fetched in the last group
commit of the journal (the fetches in flight have no crawl-log line yet).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from drumbeat.simweb.model import SimWebConfig
from drumbeat.simweb.server import run_in_thread
from drumbeat.store.summary import summarize
from tests.e2e.test_crawl import CONFIG, crawl_cmd, fetched_pages, read_log

KILLS = 10
COMMIT_S = 0.25  # journal_commit_s of these crawls
# A fetch is journaled by the group commit after it is collected: the crawl-log time of
# the last fetches a kill can cost lies within two commit intervals and the time a
# commit takes (a WARC sync round trip, two fsyncs) of the run's last logged fetch.
WINDOW_S = 2 * COMMIT_S + 1.0


@pytest.fixture(scope="module")
def web():
    # Its longest host takes 20 s of host delays (100 pages): far more than the fetching
    # the ten kills leave time for, so the crawl is still going at the tenth.
    config = SimWebConfig(seed=23, hosts=60, ips=10, pages_per_host=20, crawl_delay_s=0.3)
    with run_in_thread(config) as w:
        yield w


def _cmd(web, state: Path, config: str) -> list[str]:
    cmd = crawl_cmd(web, state, "--allow-loopback")
    (state.parent / f"{state.name}.toml").write_text(config)
    return cmd


def _wait_for_fetches(state: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until the crawl log grows (this run fetches), or the run ends."""
    log = state / "crawl.log"
    before = log.stat().st_size if log.exists() else 0
    end = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < end:
        if log.exists() and log.stat().st_size > before:
            return
        time.sleep(0.02)


def _pages_logged(state: Path) -> int:
    """Pages fetched by the crawl log's complete lines so far (the crawl is running)."""
    log = state / "crawl.log"
    data = log.read_bytes() if log.exists() else b""
    lines = data[: data.rfind(b"\n") + 1].decode().splitlines()
    return len(fetched_pages([json.loads(ln) for ln in lines]))


def _runs(state: Path) -> list[list[dict]]:
    """The crawl-log entries of each run, in order (runs.jsonl: where each began)."""
    data = (state / "crawl.log").read_bytes()
    lines = (state / "runs.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    starts = sorted({r["log_offset"] for r in records if "log_offset" in r})  # not end lines
    runs = []
    for start, end in zip(starts, [*starts[1:], len(data)]):
        lines = data[start:end].decode().splitlines()
        runs.append([json.loads(ln) for ln in lines if ln.endswith("}")])
    return runs


def _refetches_per_kill(state: Path) -> list[tuple[int, int]]:
    """For each run but the last: (pages it fetched that a later run fetched again,
    pages it fetched in its last WINDOW_S)."""
    runs = _runs(state)
    out = []
    for k, entries in enumerate(runs[:-1]):
        mine = [e for e in entries if e["kind"] == "page" and e["status"] is not None]
        later = {u for run in runs[k + 1 :] for u in fetched_pages(run)}
        again = len({e["url"] for e in mine} & later)
        last = max((e["time"] for e in mine), default=0.0)
        out.append((again, sum(e["time"] >= last - WINDOW_S for e in mine)))
    return out


def _assert_warc_reads_back(state: Path, pages: list[str]) -> None:
    files = sorted((state / "warc").glob("*.warc.gz"))
    assert files and not list((state / "warc").glob("*.open"))
    responses = 0
    for path in files:
        with open(path, "rb") as f:
            for record in ArchiveIterator(f):
                record.content_stream().read()
                responses += record.rec_type in ("response", "revisit")
    # Every fetch answered after the last kill is archived; earlier ones may have been
    # cut with a torn file tail, and refetched.
    assert responses >= len(set(pages))


def test_ten_sigkills_of_the_whole_crawl_lose_nothing(web, tmp_path):
    truth = web.model.crawl(web.seeds)
    state = tmp_path / "state"
    config = CONFIG + f"journal_commit_s = {COMMIT_S}\n"
    rng = random.Random(int(os.environ.get("DRUMBEAT_TEST_SEED", "5")))
    kills = 0
    while kills < KILLS:
        # Its own process group, so that the fetcher processes die with the manager, as
        # in a machine crash (killing the manager alone lets them finish their files).
        proc = subprocess.Popen(
            _cmd(web, state, config),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        if kills % 3 == 2:
            time.sleep(rng.uniform(0.3, 2.0))  # at start-up, or soon after
        else:
            _wait_for_fetches(state, proc)  # while fetching
            time.sleep(rng.uniform(0.0, 1.2))
        if proc.poll() is not None:
            break
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
    assert kills == KILLS, "the crawl finished before it was killed ten times"
    proc = subprocess.run(_cmd(web, state, config), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]

    pages = fetched_pages(read_log(state))
    assert set(pages) == truth.fetched
    per_kill = _refetches_per_kill(state)
    print("refetches per kill (again, fetched in the last window):", per_kill)
    for again, window in per_kill:
        assert again <= window, per_kill
    _assert_warc_reads_back(state, pages)
    # drumbeat stats counts each page once, the ones fetched again after a kill included.
    assert summarize(state)["pages"] == len(set(pages))


@pytest.fixture(scope="module")
def big_web():
    # 782 pages, the longest host 11 s of host delays: far from done after 100 pages.
    config = SimWebConfig(seed=29, hosts=40, ips=8, pages_per_host=15, crawl_delay_s=0.3)
    with run_in_thread(config) as w:
        yield w


def test_a_kill_before_any_checkpoint_resumes_from_the_state_dir_alone(big_web, tmp_path):
    """Killed once a fresh crawl has fetched over 100 pages (checkpoints 60 s apart: none
    but the run's first), then `drumbeat crawl --state DIR` with nothing else: the crawl
    goes on to the end, every page fetched once but the last group commit's."""
    web = big_web
    truth = web.model.crawl(web.seeds)
    state = tmp_path / "state"
    config = CONFIG.replace("checkpoint_interval_s = 0.5", "checkpoint_interval_s = 60")
    proc = subprocess.Popen(
        _cmd(web, state, config),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline and _pages_logged(state) <= 100:
        time.sleep(0.05)
    assert proc.poll() is None, "the crawl ended before it was killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (state / "checkpoints" / "CURRENT").read_text() == "ckpt-000001"
    fetched_before = len(fetched_pages(read_log(state)))
    assert fetched_before > 100

    proc = subprocess.run(
        [sys.executable, "-m", "drumbeat", "crawl", "--state", str(state), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    pages = fetched_pages(read_log(state))
    assert set(pages) == truth.fetched
    [(again, window)] = _refetches_per_kill(state)
    print(f"fetched before the kill {fetched_before}, again {again}, last window {window}")
    assert again <= window
    repeats = sum(n - 1 for n in Counter(pages).values())
    assert repeats == again
    _assert_warc_reads_back(state, pages)
    assert summarize(state)["pages"] == len(set(pages))
