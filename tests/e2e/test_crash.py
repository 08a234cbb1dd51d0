"""Crash safety: the whole crawl (manager and fetcher processes) killed with SIGKILL at
ten random instants, restarted each time, then run to the end.

The kills land wherever the crawl is: WARC writes, DRUM merges, disk-queue appends,
checkpoints. At the end every reachable allowed page has been fetched, every WARC file
reads back with warcio (torn tails were cut on restart), and the pages fetched twice are
bounded by what can be lost per kill (the fetches since the last checkpoint).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter

import pytest
from warcio.archiveiterator import ArchiveIterator

from drumbeat.simweb.model import SimWebConfig
from drumbeat.simweb.server import run_in_thread
from tests.e2e.test_crawl import crawl_cmd, fetched_pages, read_log

KILLS = 10


@pytest.fixture(scope="module")
def web():
    config = SimWebConfig(seed=23, hosts=60, ips=10, pages_per_host=25, crawl_delay_s=0.3)
    with run_in_thread(config) as w:
        yield w


def test_ten_sigkills_of_the_whole_crawl_lose_nothing(web, tmp_path):
    truth = web.model.crawl(web.seeds)
    state = tmp_path / "state"
    rng = random.Random(int(os.environ.get("DRUMBEAT_TEST_SEED", "5")))
    kills = 0
    while kills < KILLS:
        # Its own process group, so that the fetcher processes die with the manager, as
        # in a machine crash (killing the manager alone lets them finish their files).
        proc = subprocess.Popen(
            crawl_cmd(web, state, "--allow-loopback"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        time.sleep(rng.uniform(0.5, 2.0))
        if proc.poll() is not None:
            break
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
    assert kills == KILLS, "the crawl finished before it was killed ten times"
    proc = subprocess.run(
        crawl_cmd(web, state, "--allow-loopback"), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    pages = fetched_pages(read_log(state))
    assert set(pages) == truth.fetched
    # Lost per kill at most: the fetches in flight (concurrency 50) and those reported
    # since the last checkpoint (0.5 s apart in these tests).
    repeats = sum(n - 1 for n in Counter(pages).values())
    assert repeats <= KILLS * 100, repeats

    files = sorted((state / "warc").glob("*.warc.gz"))
    assert files and not list((state / "warc").glob("*.open"))
    responses = 0
    for path in files:
        with open(path, "rb") as f:
            for record in ArchiveIterator(f):
                record.content_stream().read()
                responses += record.rec_type == "response"
    # Every fetch answered after the last kill is archived; earlier ones may have been
    # cut with a torn file tail, and refetched.
    assert responses >= len(set(pages))
