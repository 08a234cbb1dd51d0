"""``drumbeat bench cluster``: its figures from samples, its ratios, and a tiny run end to
end (real nginx and redis-server on loopback, real managers and fetchers)."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys

import pytest

from drumbeat.bench._throughput_web import nginx_binary
from drumbeat.bench.cluster import (
    MAIN,
    Config,
    Sample,
    _cpu_s,
    at,
    clock_at,
    page_clock,
    parse_configs,
    ratios,
    same_pages_ratio,
)

BENCH = [sys.executable, "-m", "drumbeat", "bench", "cluster"]


def test_configs_parse_by_name():
    assert parse_configs("standalone,1m2f,4m12f") == (Config(0, 1), Config(1, 2), Config(4, 12))
    assert [c.name for c in parse_configs("standalone,2m8f")] == ["standalone", "2m8f"]
    with pytest.raises(argparse.ArgumentTypeError, match="no configuration '0m1f'"):
        parse_configs("0m1f")


def test_a_configuration_named_twice_is_a_usage_error():
    # Its second run would find the first's state and resume that crawl.
    with pytest.raises(argparse.ArgumentTypeError, match="'1m2f' is named twice"):
        parse_configs("1m2f,2m2f,1m2f")
    with pytest.raises(argparse.ArgumentTypeError, match="named twice"):
        parse_configs("standalone,standalone1")
    proc = subprocess.run(
        [*BENCH, "--configs", "1m2f,1m2f"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith(
        "drumbeat bench cluster: error: argument --configs: '1m2f' is named twice"
    )


def test_values_are_interpolated_between_samples():
    samples = [Sample(10.0, {"manager": 1.0}), Sample(12.0, {"manager": 3.0})]
    assert at(samples, 11.5, lambda s: s.cpu_s["manager"]) == pytest.approx(2.5)
    assert at(samples, 13.0, lambda s: s.cpu_s["manager"]) is None


def test_a_main_thread_counts_apart_from_the_others():
    import os
    import threading
    import time

    def spin(seconds: float) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    before_main, before_all = _cpu_s(os.getpid(), MAIN, {}), time.process_time()
    t = threading.Thread(target=spin, args=(0.3,))
    t.start()
    t.join()
    spin(0.1)
    main = _cpu_s(os.getpid(), MAIN, {}) - before_main
    # /proc counts in clock ticks: 0.1 s of the main thread, not the other thread's 0.3 s
    assert 0.05 <= main <= 0.25
    assert time.process_time() - before_all >= 0.35


def test_growth_per_added_fetcher_and_manager():
    def c(m: int, p: int, rate: float) -> dict:
        return {"managers": m, "processes": p, "pages_per_s": rate}

    r = ratios(
        {
            "standalone": c(0, 1, 100),
            "1m1f": c(1, 1, 80),
            "1m2f": c(1, 2, 144),
            "2m2f": c(2, 2, 216),
        }
    )
    assert r["1m1f"]["vs_standalone"] == pytest.approx(0.8)
    assert r["1m2f"]["growth_per_added_fetcher"] == pytest.approx(0.8)
    assert r["2m2f"]["growth_per_added_manager"] == pytest.approx(0.5)
    assert r["1m1f"]["growth_per_added_fetcher"] is None


def test_a_page_clock_says_when_a_run_had_fetched_how_many_pages():
    times = [100.0 + k * 0.01 for k in range(1000)]  # 100 pages a second
    clock = page_clock(times, points=10)
    assert clock[0] == (1, 0.0) and clock[-1] == (1000, pytest.approx(9.99))
    assert len(clock) == 11
    assert clock_at(clock, 550) == pytest.approx(5.49)  # between two points
    assert clock_at(clock, 2000) is None and page_clock([]) == []


def _run(rates: list[tuple[int, float]], window: tuple[int, int]) -> dict:
    """A configuration's figures with a page clock made of ``rates``: (pages, pages/s)
    legs one after the other."""
    times, t = [], 0.0
    for pages, rate in rates:
        times += [t + (k + 1) / rate for k in range(pages)]
        t = times[-1]
    return {"page_clock": page_clock(times), "window_page_range": window}


def test_growth_over_the_same_pages_compares_runs_as_far_into_the_crawl():
    # Both runs slow down alike as the crawl goes on (1,000 pages/s for the first 20,000
    # pages, then 500): the faster one, twice as fast at every page, reaches the slow
    # part within its window of the same seconds, so its window's rate is less than twice.
    one = _run([(20_000, 1000.0), (40_000, 500.0)], (5_000, 20_000))  # 15 s at 1,000
    two = _run([(20_000, 2000.0), (40_000, 1000.0)], (10_000, 30_000))  # 5 s at 2k, 10 at 1k
    r, lo, hi = same_pages_ratio(two, one)
    assert (lo, hi) == (10_000, 20_000)  # the pages both windows hold
    assert r == pytest.approx(2.0, rel=0.02)
    configs = {
        "1m2f": {"managers": 1, "processes": 2, "pages_per_s": 1000.0, **one},
        "2m2f": {"managers": 2, "processes": 2, "pages_per_s": 20_000 / 15, **two},
    }
    got = ratios(configs)["2m2f"]
    assert got["growth_per_added_manager"] == pytest.approx(1 / 3)  # over the same 15 s
    assert got["growth_per_added_manager_same_pages"] == pytest.approx(1.0, abs=0.02)
    assert got["same_pages_manager"] == [10_000, 20_000]
    # Windows that share too few pages give no figure.
    far = _run([(60_000, 1000.0)], (40_000, 55_000))
    assert same_pages_ratio(far, one) is None


@pytest.mark.skipif(
    nginx_binary() is None or shutil.which("redis-server") is None,
    reason="needs nginx (scripts/install-bench) and redis-server (scripts/test)",
)
def test_tiny_run_end_to_end(tmp_path):
    done = subprocess.run(
        # The baseline and the cluster's every part (two managers forwarding links to
        # each other, two fetcher processes): the other configurations add no code path.
        [*BENCH, "--tiny", "--configs", "standalone,2m2f", "--json", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=90,  # about 25 s on 2 cores
    )
    assert done.returncode == 0, (done.stdout or done.stderr)[-3000:]
    report = json.loads(done.stdout)
    assert report["mode"] == "tiny" and report["cpu_model"]
    assert list(report["configs"]) == ["standalone", "2m2f"]
    for name, c in report["configs"].items():
        assert c["steady_pages"] > 0 and c["pages_per_s"] > 0, name
        assert c["cpu_ms_per_page"]["manager"] > 0 and c["cpu_ms_per_page"]["fetchers"] > 0
        # each manager's main thread, its event loop: a share of one core
        assert 0 < c["manager_loop_busy"] <= 1.2
        # the fetcher processes' own account (stages.json; a cluster fetcher's stages/)
        stages = c["fetcher_stages_us"]
        assert stages["parse"] > 0 and stages["warc"] > 0 and stages["fetch"] > 0, stages
        assert ("handoff" in stages) == bool(c["managers"])
        # a cluster fetcher's wall time: waiting for tasks, with every slot taken, and
        # (its archiver) waiting for its reports to reach Redis
        wall = c["fetcher_wall_share"]
        if c["managers"]:
            assert set(wall) == {"waiting_for_tasks", "slots_full", "sending_reports"}, wall
            assert all(0 <= v <= 1 for v in wall.values()), wall
            assert wall["waiting_for_tasks"] + wall["slots_full"] <= 1
        else:
            assert wall is None
        assert set(report["ratios"][name]) >= {"vs_standalone", "vs_1m1f"}
        lo, hi = c["window_page_range"]
        assert 0 <= lo < hi <= c["pages"] and c["page_clock"][-1][0] == c["pages"]
        if c["managers"]:
            redis = c["redis"]
            assert redis["ops_per_page"] > 0 and redis["bytes_per_page"] > 0
            assert redis["queued_urls"] > 0 and redis["bytes_per_queued_url"] is not None
            assert len(c["dispatch_latency"]) == c["managers"]
            # the managers' items in flight: within their limit, each host's one at a time
            f = c["in_flight"]
            assert 0 < f["in_flight"] <= f["in_flight_limit"], f
            assert 0 < f["busy_hosts"] <= min(f["in_flight"], report["web"]["hosts"]), f
        else:
            assert c["redis"] is None and c["dispatch_latency"][0]["p50_ms"] >= 0
            assert c["in_flight"] is None
    assert report["ratios"]["standalone"]["vs_standalone"] == pytest.approx(1.0)
