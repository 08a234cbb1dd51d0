"""``drumbeat bench cluster``: its figures from samples, its ratios, and a tiny run end to
end (real nginx and redis-server on loopback, real managers and fetchers)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from drumbeat.bench._throughput_web import nginx_binary
from drumbeat.bench.cluster import MAIN, Config, Sample, _cpu_s, at, parse_configs, ratios

BENCH = [sys.executable, "-m", "drumbeat", "bench", "cluster"]


def test_configs_parse_by_name():
    assert parse_configs("standalone,1m2f,4m12f") == (Config(0, 1), Config(1, 2), Config(4, 12))
    assert [c.name for c in parse_configs("standalone,2m8f")] == ["standalone", "2m8f"]
    with pytest.raises(SystemExit):
        parse_configs("0m1f")


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
