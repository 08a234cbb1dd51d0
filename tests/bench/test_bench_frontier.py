"""Smoke test of ``drumbeat bench frontier``: the tiny mode runs end to end (a real simweb,
two real crawls, a Manager RSS run in its own process, a crawl per order policy and a
focused one) and prints the JSON it promises."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def test_tiny_json_has_every_figure(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "drumbeat",
            "bench",
            "frontier",
            "--tiny",
            "--json",
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["mode"] == "tiny"

    share = report["spam_share"]
    assert set(share["contenders"]) == {"drumbeat", "bfs"}
    for out in share["contenders"].values():
        assert out["pages"] == share["pages"]
        assert set(out["share"]) == {"spam", "trap", "big", "legit"}
        assert abs(sum(out["share"].values()) - 1) < 1e-9
        assert out["spam_trap_share"] == pytest.approx(out["share"]["spam"] + out["share"]["trap"])
        assert out["pages_per_s"] > 0 and out["wall_s"] > 0

    rss = report["manager_rss"]
    for run in rss["runs"].values():
        assert run["queued_beast"] == run["urls"]
        assert 0 < run["queued_ram"] <= run["ram_bound"]
        assert run["peak_rss"] >= run["rss"] > 0
    assert rss["peak_rss_ratio"] > 0

    for io in report["beast_io"].values():
        assert io["pages"] == share["pages"]
        assert io["bytes_written"] > 0 and io["b"] > 0
        assert io["theorem7_bytes_per_page"] > 0
    order = report["order"]
    assert set(order["contenders"]) == {"bfs", "indegree", "opic", "larger-sites", "focus"}
    assert 0 < order["web"]["on_topic_share"] < 1
    for out in order["contenders"].values():
        assert out["pages"] == order["pages"]
        assert 0 < out["indegree_of_best"] <= 1
        assert out["mean_indegree"] > 0 and 0 <= out["on_topic_share"] <= 1
    assert list(tmp_path.iterdir()) == [], "the work directory is cleaned up"
