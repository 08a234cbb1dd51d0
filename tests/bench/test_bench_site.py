"""drumbeat bench site: its reading of nginx's log, its skip where the site is missing, and
another tree given by --root."""

from __future__ import annotations

import json

import pytest

from drumbeat.bench import benchmarks, site
from drumbeat.bench._throughput_proc import Usage
from drumbeat.bench._throughput_web import nginx_binary


def test_log_gives_pages_overlap_and_gaps(tmp_path):
    log = tmp_path / "access.log"
    log.write_text(
        # $msec $request_time $connection $status $request_uri
        "10.000 0.000 1 404 /robots.txt\n"
        "10.020 0.010 1 200 /en/index.html\n"
        "10.050 0.020 2 200 /en/c%3D.html\n"
        "10.045 0.010 1 200 /en/cpp.html\n"  # overlaps the one before
        "10.060 0.000 1 200 /common/ext.css\n"
        "10.070 0.000 1 404 /en/gone.html\n"
        "garbage\n"
    )
    read = site.read_log(log)
    assert read.pages == {"/en/index.html", "/en/c=.html", "/en/cpp.html"}
    assert read.requests == 6
    assert abs(read.span_s - 0.070) < 1e-9
    assert read.most_at_once == 2 and read.connections == 2
    assert read.min_gap_s is not None and read.min_gap_s < 0  # two were in flight at once
    assert read.first_start == 10.0  # robots.txt, answered at once


def test_one_connection_log_has_no_overlap(tmp_path):
    log = tmp_path / "access.log"
    log.write_text("".join(f"{10 + k * 0.01:.3f} 0.004 1 200 /p/{k}.html\n" for k in range(5)))
    read = site.read_log(log)
    assert len(read.pages) == 5 and read.most_at_once == 1
    assert read.min_gap_s is not None and abs(read.min_gap_s - 0.006) < 1e-9
    assert read.first_start is not None and abs(read.first_start - 9.996) < 1e-9


def test_skips_with_a_message_without_the_doc_package(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(site, "DOC_ROOT", tmp_path / "absent")
    assert site.main(["--quick"]) == 0
    err = capsys.readouterr().err
    assert "skipped" in err and site.DOC_PACKAGE in err and "install-bench" in err


def test_is_listed():
    assert "site" in benchmarks()


def test_an_empty_log_has_no_first_request(tmp_path):
    log = tmp_path / "access.log"
    log.write_text("")
    read = site.read_log(log)
    assert read.requests == 0 and read.first_start is None and read.span_s == 0.0


def test_instant_requests_count_as_in_flight(tmp_path):
    log = tmp_path / "access.log"
    log.write_text(
        "10.000 0.000 1 200 /a.html\n10.000 0.000 2 200 /b.html\n10.005 0.000 1 200 /c.html\n"
    )
    assert site.read_log(log).most_at_once == 1


def test_report_gives_drumbeats_cpu_a_page_by_process_and_stage(capsys):
    """stages.json's CPU seconds, by process and by stage, come out as µs a page."""
    usage = Usage(0, 0.0, 2.0, 3.0, 0, 3, False)
    stages = {
        "pages": 1000,
        "cpu_s": {"manager": 0.4, "fetchers": 1.5},
        "seconds": {"parse": 0.62, "fetch": 0.4, "journal": 0.0004},
        "dispatch_latency": {"p50_ms": 2.5, "p90_ms": 4.5},
        "fetcher_processes": [
            {"fetched": 700, "cpu_s": 1.1, "startup_cpu_s": 0.3},
            {"fetched": 300, "cpu_s": 0.4, "startup_cpu_s": 0.3},
        ],
    }
    pages = {f"/p/{k}.html" for k in range(1000)}

    def run(name: str, crawler: str, delay: float | None, conns: int, st) -> site.Run:
        first = usage.started_at + 0.7 if st else None  # launch to first request: 0.7 s
        log = site.ServerLog(pages, 1000, 1.0, 1, None, 1, first)
        return site.Run(name, crawler, delay, conns, usage, log, None, st)

    runs = [run("wget", "wget", None, 1, None), run("drumbeat 0 ms x4", "drumbeat", 0.0, 4, stages)]
    rep = site.report(runs, 3.0)
    four = rep["runs"]["drumbeat 0 ms x4"]
    assert four["first_request_s"] == 0.7 and rep["runs"]["wget"]["first_request_s"] is None
    assert four["cpu_us_per_page"] == {"manager": 400.0, "fetchers": 1500.0}
    assert four["stage_us_per_page"] == {"parse": 620.0, "fetch": 400.0, "journal": 0.4}
    assert four["dispatch_latency"] == {"p50_ms": 2.5, "p90_ms": 4.5}
    assert rep["runs"]["wget"]["cpu_us_per_page"] is None
    # The busiest process's crawling CPU (its startup left out) over the 1 s span.
    assert four["busiest_fetcher_cores"] == 0.8
    assert rep["runs"]["wget"]["busiest_fetcher_cores"] is None
    site.print_report(rep)
    out = capsys.readouterr().out
    line = "drumbeat 0 ms x4, CPU µs a page: manager 400, fetchers 1,500; by stage: parse 620"
    assert line + ", fetch 400" in out
    assert "; busiest fetcher process 0.80 cores" in out
    assert "0.70" in out and "start = launch to the first request" in out
    assert "2x wget: n/a" not in out and "2x wget: 1.0x" in out  # wget ran here
    site.print_report(site.report(runs[1:], 1.0))  # --only 0ms-x4: no wget to compare with
    out = capsys.readouterr().out
    assert "2x wget: n/a" in out and "pages/s: n/a." in out


def test_rounds_report_the_median_run_and_the_median_of_the_rounds_ratios(capsys):
    """--rounds: wget's rate swings between runs, so each round's ratio compares the
    runs made side by side, and the target's figure is the median of those."""
    usage = Usage(0, 0.0, 2.0, 3.0, 0, 3, False)
    pages = {f"/p/{k}.html" for k in range(1000)}

    def run(name: str, crawler: str, delay: float | None, conns: int, span_s: float) -> site.Run:
        log = site.ServerLog(pages, 1000, span_s, 1, None, 1, None)
        return site.Run(name, crawler, delay, conns, usage, log, None, None)

    runs = []
    # Three rounds: wget at 1,000 / 1,600 / 1,250 pages/s, four connections at 900 /
    # 1,000 / 1,000.
    for wget_s, four_s in ((1.0, 1 / 0.9), (1 / 1.6, 1.0), (0.8, 1.0)):
        runs += [run("wget", "wget", None, 1, wget_s), run("x4", "drumbeat", 0.0, 4, four_s)]
    rep = site.report(runs, 3.0)
    assert rep["rounds"] == 3
    assert rep["runs"]["wget"]["pages_per_s_by_round"] == [1000.0, 1600.0, 1250.0]
    assert rep["runs"]["wget"]["pages_per_s"] == 1250.0  # the median run
    assert rep["runs"]["x4"]["pages_per_s"] == 1000.0
    assert rep["targets"]["ratio_by_round"] == [0.9, 0.62, 0.8]
    assert rep["targets"]["ratio_4_connections_to_wget"] == 0.8
    site.print_report(rep)
    out = capsys.readouterr().out
    assert "0.8x (median of 0.9x / 0.62x / 0.8x)" in out
    assert "wget 1,000 / 1,600 / 1,250" in out
    # Of two rounds, the slower middle run.
    assert site._median_run(runs[:4:2]).pages_per_s == 1000.0


def test_rounds_out_of_range_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stop:
        site.main(["--rounds", "0"])
    assert stop.value.code == 2
    assert "--rounds must be 1..100" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ("host_pipeline", "give NAME=VALUE"),
        ("no_such=1", "unknown setting 'no_such'"),
        ("host_pipeline=-1", "must be >= 0"),
        ("host_pipeline=[", "--set 'host_pipeline=['"),
    ],
)
def test_a_bad_setting_is_a_usage_error(capsys, setting, says):
    with pytest.raises(SystemExit) as stop:
        site.main(["--set", setting])
    assert stop.value.code == 2
    assert says in capsys.readouterr().err


def test_root_without_the_front_page_is_an_error(tmp_path, capsys):
    assert site.main(["--quick", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--root {tmp_path}" in err and site.FRONT_PAGE in err


@pytest.mark.e2e
@pytest.mark.skipif(
    nginx_binary() is None, reason="nginx is not installed (scripts/install-bench installs it)"
)
def test_root_serves_another_tree(tmp_path, capsys):
    """--root: the site is the tree given (a carried copy where the package cannot be
    installed); four connections fetch every page of it."""
    root = tmp_path / "site"
    (root / "en").mkdir(parents=True)
    names = [f"p{k}.html" for k in range(6)]
    links = "".join(f'<a href="{n}">{n}</a>' for n in names)
    (root / "en" / "index.html").write_text(f"<html><body>{links}</body></html>")
    for n in names:
        (root / "en" / n).write_text('<html><body><a href="index.html">up</a></body></html>')
    root.chmod(0o755)
    tmp_path.chmod(0o755)  # nginx's workers read the tree as another user
    args = ["--only", "0ms-x4", "--rounds", "2", "--json", "--root", str(root)]
    code = site.main([*args, "--dir", str(tmp_path), "--set", "host_pipeline = 1"])
    rep = json.loads(capsys.readouterr().out)
    assert code == 0
    assert rep["site"]["root"] == str(root)
    assert rep["settings"] == ["host_pipeline = 1"]
    assert rep["runs"]["drumbeat 0 ms x4"]["pages"] == 7
    # Each round crawled the whole tree again, in a state directory of its own.
    by_round = rep["runs"]["drumbeat 0 ms x4"]["pages_per_s_by_round"]
    assert len(by_round) == 2 and all(v > 0 for v in by_round)
