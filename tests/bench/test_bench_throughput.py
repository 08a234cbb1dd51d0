"""``drumbeat bench throughput``: the web it builds, the figures it derives, and a tiny run
end to end (real nginx on loopback, the real SimDNS, a real ``drumbeat crawl``)."""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from drumbeat import urls
from drumbeat.bench._throughput_web import (
    ABSOLUTE_LINKS,
    ONE_PLD,
    PRIVATE_PREFIX,
    WebShape,
    build_tree,
    nginx_binary,
    read_access_log,
)
from drumbeat.bench.throughput import (
    crawl_log_page_times,
    ip_delay_for,
    make_plan,
    parse,
    steady_rate,
)

HREF = re.compile(r'href="([^"]+)"')


def test_tree_names_every_host_and_pages_look_like_the_issue_says(tmp_path):
    shape = WebShape.make(hosts=300, pages=10, ips=30, seeds=20)
    assert shape.pages * ABSOLUTE_LINKS >= shape.hosts  # grown to name every host
    build_tree(tmp_path, shape, port=23456)
    named = set()
    pages = [tmp_path / "index.html", *sorted((tmp_path / "p").glob("*.html"))]
    assert len(pages) == shape.pages + 1
    for page in pages:
        body = page.read_text(encoding="utf-8")
        links = HREF.findall(body)
        assert 55 <= len(links) <= 65
        assert 15_000 <= len(body) <= 25_000
        assert sum(u.startswith(PRIVATE_PREFIX) for u in links) == 1
        named.update(re.findall(r"http://(h\d{5}\.test):23456/", body))
    assert named == set(shape.dns_table())
    assert (tmp_path / "robots.txt").read_text() == f"User-agent: *\nDisallow: {PRIVATE_PREFIX}\n"
    assert all(ip.startswith("127.77.") for ip in shape.dns_table().values())
    assert len(set(shape.dns_table().values())) == 30
    assert len(shape.seed_urls(23456)) == 20


def test_access_log_gaps(tmp_path):
    log = tmp_path / "access.log"
    log.write_text(
        "100.000 a.test /robots.txt 200 1\n"
        "101.000 a.test /p/0001.html 200 2\n"
        "102.500 a.test /p/0002.html 200 1\n"
        "100.000 b.test /robots.txt 200 1\n"
        "100.400 b.test /private/3.html 404 2\n"
        "garbage\n",
        encoding="utf-8",
    )
    server = read_access_log(log, delay_s=1.0)
    assert (server.requests, server.robots, server.pages, server.disallowed) == (5, 2, 3, 1)
    assert server.errors == 0  # the 404 under /private/ is a robots violation, not an error
    assert server.hosts == 2
    assert server.min_gap_s == pytest.approx(0.4)
    assert server.hosts_under_delay == 1  # b.test; a.test's 1.000 s gap is allowed
    assert server.statuses == {200: 4, 404: 1}
    assert server.connections == 3  # lines whose $connection_requests is 1


def test_steady_rate_leaves_out_warmup_and_counts_a_stopped_crawl_as_zero():
    times = [1000.0 + i / 10 for i in range(100)]  # 10 pages/s for 10 s
    rate = steady_rate(times, started=999.0, warmup_s=2.0, seconds=5.0)
    assert rate.pages == 100 and rate.steady_pages == 50
    assert rate.pages_per_s == pytest.approx(10.0)
    assert rate.first_page_s == pytest.approx(1.0)
    stopped = steady_rate(times, started=999.0, warmup_s=2.0, seconds=20.0)
    assert stopped.pages_per_s == pytest.approx(80 / 20)
    assert stopped.slowest_window_pages_per_s == 0.0
    assert steady_rate([], 0.0, 1.0, 1.0).pages == 0


def test_page_times_skip_torn_lines_even_when_they_parse(tmp_path):
    # Part of a line (read while a crawl writes it, or cut by a kill) can be valid JSON of
    # another type, a number: a device run of bench cluster lost a configuration to one.
    page = {"time": 5.0, "kind": "page", "status": 200}
    lines = [
        json.dumps(page),
        json.dumps({**page, "status": 404}),
        json.dumps({**page, "kind": "robots"}),
        "1795839422.99",
        '{"time": 6.0, "kind": "pa',
        json.dumps({**page, "time": 7.0}),
    ]
    log = tmp_path / "crawl.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert crawl_log_page_times(log) == [5.0, 7.0]
    assert crawl_log_page_times(tmp_path / "none.log") == []


def test_one_pld_web_is_subdomains_of_one_pld_all_seeded(tmp_path):
    shape = WebShape.make(hosts=300, pages=10, ips=30, seeds=300, pld=ONE_PLD)
    build_tree(tmp_path, shape, port=23456)
    named = set(re.findall(r"http://([a-z0-9.]+):23456/", (tmp_path / "index.html").read_text()))
    assert named and named <= set(shape.dns_table())
    assert {urls.pld(h) for h in shape.dns_table()} == {ONE_PLD}
    assert len(shape.dns_table()) == 300 and len(shape.seed_urls(23456)) == 300
    # --web one-pld seeds every host unless told otherwise; the default web seeds SEEDS.
    assert make_plan(parse(["--web", "one-pld"])).seeds == 5000
    assert make_plan(parse(["--web", "one-pld", "--seeds", "40"])).seeds == 40
    assert make_plan(parse(["--seeds", "5000"])).seeds == 5000
    assert make_plan(parse([])).seeds == 300 and make_plan(parse([])).web == "distinct"


def test_ip_delay_leaves_room_for_the_hosts_of_an_address():
    shape = WebShape.make(hosts=5000, pages=500, ips=500, seeds=300)
    assert ip_delay_for(shape, 1.0) == pytest.approx(0.05)  # 10 hosts per IP, 20/s per IP


@pytest.mark.skipif(
    nginx_binary() is None, reason="nginx is not installed (scripts/install-bench installs it)"
)
def test_tiny_polite_drumbeat_run_end_to_end(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "drumbeat",
            "bench",
            "throughput",
            "--tiny",
            "--only",
            "drumbeat",
            "--politeness",
            "on",
            "--poll-api",
            "--json",
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["mode"] == "tiny"
    assert list(report["runs"]) == ["drumbeat-polite"]
    run = report["runs"]["drumbeat-polite"]
    assert run["exit_code"] == 0
    assert run["pages"] > 0 and run["cpu_s"] > 0 and run["peak_rss_bytes"] > 0
    server = run["server"]
    # nginx saw the crawl: robots.txt first, pages of several hosts, and the gap check ran.
    assert server["robots"] > 0 and server["pages"] >= run["pages"]
    assert server["hosts"] > 1 and server["min_gap_s"] is not None
    assert server["min_gap_s"] >= run["host_delay_s"] - 0.001
    assert server["hosts_under_delay"] == 0
    assert server["disallowed"] == 0
    # The API poller read the crawl's control API while it ran, every call answered.
    assert run["api_polls"]["rounds"] > 0 and run["api_polls"]["failed"] == 0
    assert server["errors"] == 0 and set(server["statuses"]) == {"200"}
    assert run["warc_bytes"] > 0
    assert list(Path(tmp_path).iterdir()) == [], "the work directory is cleaned up"
    # The CPU is named, as /proc/cpuinfo names its first processor (x86 has "model name").
    with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
        model = next(
            (line.partition(":")[2].strip() for line in cpuinfo if line.startswith("model name")),
            "",
        )
    assert report["cpu_model"] and report["cpu_model"] != "unknown"
    assert report["cpu_model"].startswith(model)
    # The interpreter both crawlers ran on is named, with where its libpython comes from.
    python = report["python"]
    assert python["version"] == platform.python_version()
    assert python["executable"] == sys.executable
    assert python["libpython"] == "static" or (
        Path(python["libpython"]).name.startswith("libpython")
        and Path(python["libpython"]).is_file()
    )


def test_set_gives_checked_config_lines(capsys):
    """--set NAME=VALUE (drumbeat.bench._settings, shared with bench site): a config-file
    line for drumbeat's crawls; a name or value drumbeat would refuse is a usage error
    before anything runs."""
    plan = make_plan(parse(["--set", "journal=false", "--set", "journal_commit_s = 1.0"]))
    assert plan.settings == ("journal = false", "journal_commit_s = 1.0")
    for bad, says in (("jornal=false", "unknown setting 'jornal'"), ("journal=1", "journal")):
        with pytest.raises(SystemExit) as stop:
            parse(["--set", bad])
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert f"--set {bad!r}" in err and says in err
