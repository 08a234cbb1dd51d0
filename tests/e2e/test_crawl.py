"""End-to-end: `drumbeat crawl` (a real subprocess) against simweb on loopback.

The synthetic web knows the truth (drumbeat.simweb.oracle): which URLs a correct crawler
fetches, which robots.txt forbids, which hosts are unreachable. Politeness is checked from
the server's side, on the arrival times simweb recorded.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from drumbeat.simweb.model import SimWebConfig
from drumbeat.simweb.server import run_in_thread
from drumbeat.standalone import MANAGER_SWITCH_INTERVAL_S

HOST_DELAY = 0.2
IP_DELAY = 0.05
CLOCK_SLACK = 0.002  # server timestamps are taken a little after the bytes arrive

CONFIG = """\
checkpoint_interval_s = 0.5
robots_retry_s = 0.4
robots_max_attempts = 2
dns_timeout_s = 2.0
connect_timeout_s = 3.0
total_timeout_s = 10.0
"""


def crawl_cmd(web, state: Path, *extra: str) -> list[str]:
    cfg = state.parent / f"{state.name}.toml"
    cfg.write_text(CONFIG)
    return [
        sys.executable,
        "-m",
        "drumbeat",
        "crawl",
        *web.seeds,
        "--state",
        str(state),
        "--dns-server",
        web.dns_address,
        "--host-delay",
        str(HOST_DELAY),
        "--ip-delay",
        str(IP_DELAY),
        "--concurrency",
        "50",
        "--config",
        str(cfg),
        "--no-progress",
        *extra,
    ]


def read_log(state: Path) -> list[dict]:
    lines = (state / "crawl.log").read_text().splitlines()
    return [json.loads(ln) for ln in lines if ln.endswith("}")]


def fetched_pages(entries: list[dict]) -> list[str]:
    return [e["url"] for e in entries if e["kind"] == "page" and e["status"] is not None]


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    config = SimWebConfig(seed=7, hosts=50, ips=8, pages_per_host=8, crawl_delay_s=0.3)
    with run_in_thread(config) as w:
        yield w


# The tests that check the one full crawl: one pytest-xdist worker runs them all, so that
# the crawl runs once.
on_full_crawl = pytest.mark.xdist_group("full_crawl")


@pytest.fixture(scope="module")
def full_crawl(web, tmp_path_factory):
    """One uninterrupted crawl of the whole web, shared by the checks below."""
    state = tmp_path_factory.mktemp("full") / "state"
    start = len(web.requests)
    proc = subprocess.run(
        crawl_cmd(web, state, "--allow-loopback"), capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr
    return state, list(web.requests[start:]), proc


def assert_matches_oracle(web, entries: list[dict]) -> dict[str, set[str]]:
    """The crawl log ``entries`` fetched each page simweb's oracle says once, and dropped
    what it says for the reasons it says; returns the dropped URLs by reason."""
    truth = web.model.crawl(web.seeds)
    pages = fetched_pages(entries)
    assert Counter(pages).most_common(1)[0][1] == 1, "a page was fetched twice"
    assert set(pages) == truth.fetched
    dropped = defaultdict(set)
    for e in entries:
        if e["status"] is None:
            dropped[e["error"]].add(e["url"])
    assert dropped["robots_disallowed"] == truth.disallowed
    assert truth.host_blocked <= dropped["robots_unavailable"]
    assert truth.unreachable <= set().union(*dropped.values())
    return dropped


@on_full_crawl
def test_every_reachable_allowed_page_is_fetched_exactly_once(web, full_crawl):
    state, _, _ = full_crawl
    dropped = assert_matches_oracle(web, read_log(state))
    assert any(r.startswith("dns:") for r in dropped), "the NXDOMAIN host is reported"


TIGHT_FRONTIER = """\
budget_default = 1
budget_max = 1
beast_queues = 1
beast_max_queues = 4
frontier_ram_urls = 16
robots_ram_entries = 4
robots_wait_max_s = 120.0
"""


def test_tight_frontier_loses_nothing_and_each_url_waits_in_qr_once(web, tmp_path):
    """Budget 1 per PLD and queue, 16 URLs in RAM, 4 robots entries in RAM: every URL goes
    through BEAST's queues and re-splits, robots rules come back from disk, and still every
    page is fetched exactly once, each URL waiting for robots.txt in QR at most once."""
    from drumbeat.checkpoint import read_counters

    state = tmp_path / "state"
    cmd = crawl_cmd(web, state, "--allow-loopback")
    cfg = Path(cmd[cmd.index("--config") + 1])
    cfg.write_text(CONFIG + TIGHT_FRONTIER)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    pages = fetched_pages(read_log(state))
    assert Counter(pages).most_common(1)[0][1] == 1, "a page was fetched twice"
    assert set(pages) == web.model.crawl(web.seeds).fetched
    counters = read_counters(state)
    assert counters["qr_waited"] > 0 and counters["qr_replayed"] == counters["qr_waited"]
    assert counters.get("qr_repeats", 0) == 0


@on_full_crawl
def test_pld_indegree_counts_each_linking_pld_once(web, full_crawl):
    from drumbeat.checkpoint import Checkpoints
    from drumbeat.frontier.pldgraph import PLDIndegree
    from drumbeat.urls import host_of, pld

    state, _, _ = full_crawl
    model = web.model
    edges = set()
    for url in model.crawl(web.seeds).fetched:
        host = host_of(url)
        page = model.page(host, "/" + url.split("/", 3)[3])
        if page.content_type != "text/html" or page.status != 200 or page.meta_nofollow:
            continue
        for link in page.links:
            if link.url and link.url.startswith("http") and not link.nofollow:
                if pld(host_of(link.url)) != pld(host):
                    edges.add((pld(host), pld(host_of(link.url))))
    expected = {}
    for _, target in edges:
        expected[target] = expected.get(target, 0) + 1
    cps = Checkpoints(state)
    meta = cps.read_meta(cps.current())
    graph = PLDIndegree(state / "pldgraph", ram_bytes=2 << 20, manifest=meta.pld_manifest)
    assert expected and graph.lookup(sorted(expected)) == expected


@on_full_crawl
def test_server_saw_no_disallowed_request_and_no_repeat(web, full_crawl):
    _, requests, _ = full_crawl
    model = web.model
    pages = Counter((r.host, r.path) for r in requests if r.path != "/robots.txt")
    assert pages and max(pages.values()) == 1
    for host, path in pages:
        assert model.robots_status(host) != 500
        assert model.robots_allows(host, path), f"disallowed {host}{path} was requested"
    first = {}
    for r in sorted(requests, key=lambda r: r.time):
        first.setdefault(r.host, r.path)
    assert set(first.values()) == {"/robots.txt"}, "robots.txt comes before any page of a host"
    robots = Counter(r.host for r in requests if r.path == "/robots.txt")
    for host, n in robots.items():
        assert n == (2 if model.robots_status(host) == 500 else 1), host


@on_full_crawl
def test_politeness_from_the_server_side(web, full_crawl):
    _, requests, _ = full_crawl
    assert_polite(web, requests)


def assert_polite(web, requests) -> None:
    """No host closer than its delay, no IP closer than IP_DELAY, as the server saw it."""
    by_host, by_ip = defaultdict(list), defaultdict(list)
    for r in requests:
        by_host[r.host].append(r.time)
        by_ip[r.server_ip].append(r.time)
    gaps_checked = 0
    for host, times in by_host.items():
        times.sort()
        delay = max(HOST_DELAY, web.model.crawl_delay(host) or 0.0)
        for a, b in itertools.pairwise(times):
            assert b - a >= delay - CLOCK_SLACK, f"{host}: {b - a:.3f}s < {delay}s"
            gaps_checked += 1
    for ip, times in by_ip.items():
        times.sort()
        for a, b in itertools.pairwise(times):
            assert b - a >= IP_DELAY - CLOCK_SLACK, f"{ip}: {b - a:.3f}s < {IP_DELAY}s"
    assert gaps_checked > 20


def test_one_process_and_several_fetcher_processes_find_the_same(web, tmp_path):
    """Fetching on the manager's loop (--fetchers 0) and in 3 processes: the same fetches,
    drops, links and admitted URLs, and politeness holds with several fetchers."""
    from drumbeat.checkpoint import read_counters

    outcomes = {}
    for fetchers in ("0", "3"):
        state = tmp_path / f"state{fetchers}"
        start = len(web.requests)
        proc = subprocess.run(
            crawl_cmd(web, state, "--allow-loopback", "--fetchers", fetchers),
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert proc.returncode == 0, proc.stderr
        assert_polite(web, web.requests[start:])
        log_lines = Counter((e["url"], e["kind"], e["status"], e["error"]) for e in read_log(state))
        counters = read_counters(state)
        same = {
            k: v
            for k, v in counters.items()
            if k.startswith(("links_dropped.", "status.", "dropped.", "robots."))
            or k in ("urls_admitted", "fetches", "pld_edges_new")
        }
        stages = json.loads((state / "stages.json").read_text())
        assert stages["fetchers"] == int(fetchers) and stages["pages"] > 0
        assert stages["seconds"]["journal"] > 0  # the group commits' CPU (journal on)
        # The manager's loop waits at most this long for the GIL (MANAGER_SWITCH_...).
        assert stages["switch_interval_s"] == pytest.approx(MANAGER_SWITCH_INTERVAL_S)
        stalls = stages["stalls"]  # the manager's long loop turns, the worst 8 kept
        assert len(stalls["worst"]) == min(stalls["turns"], 8)
        # The default allocator ("auto"): the best one installed, in every process.
        malloc = _auto_allocator()
        assert stages["allocator"] == {"manager": malloc, "fetchers": [malloc]}
        # The tests run on an editable install: pure Python (tests/test_compiled.py
        # covers the compiled module).
        assert stages["compiled"] == {"manager": [], "fetchers": []}
        # Each fetcher process: its fetches, and its CPU with what starting it took.
        procs = stages["fetcher_processes"]
        assert len(procs) == int(fetchers)
        if procs:
            answered = sum(n for (_, _, status, _), n in log_lines.items() if status is not None)
            assert sum(p["fetched"] for p in procs) == answered  # robots.txt's too
            assert all(0 < p["startup_cpu_s"] < p["cpu_s"] for p in procs)
            crawling = [p["cpu_s"] - p["startup_cpu_s"] for p in procs]
            assert crawling == sorted(crawling, reverse=True)
        outcomes[fetchers] = (log_lines, same)
    assert outcomes["0"] == outcomes["3"]


def read_warc_targets(state) -> tuple[list[str], int]:
    """The target URI of every response record in the crawl's WARC files, and the number
    of request records; every record is read to its end (it must decode)."""
    responses, requests = [], 0
    for path in sorted((state / "warc").glob("*.warc.gz")):
        with open(path, "rb") as f:
            for rec in ArchiveIterator(f):
                rec.content_stream().read()
                if rec.rec_type in ("response", "revisit"):  # revisit: a payload seen before
                    responses.append(rec.rec_headers.get_header("WARC-Target-URI"))
                elif rec.rec_type == "request":
                    requests += 1
    return responses, requests


@on_full_crawl
def test_warc_has_one_response_per_fetch_and_reads_back(full_crawl):
    state, _, _ = full_crawl
    entries = read_log(state)
    answered = [e for e in entries if e["status"] is not None]
    assert list((state / "warc").glob("*.warc.gz"))
    assert not list((state / "warc").glob("*.open"))
    responses, requests = read_warc_targets(state)
    assert Counter(responses) == Counter(e["url"] for e in answered)
    assert requests == len(responses)
    assert any(u.endswith("/robots.txt") for u in responses)


@on_full_crawl
def test_bad_input_is_counted_and_the_crawl_goes_on(web, full_crawl):
    state, _, proc = full_crawl
    counters = json.loads(
        subprocess.run(
            [sys.executable, "-m", "drumbeat", "stats", str(state), "--json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    c = counters["counters"]
    assert c.get("links_dropped.unparsable", 0) > 0  # the malformed URL
    assert c.get("links_dropped.scheme", 0) > 0  # mailto: and javascript:
    assert counters["pages"] == len(web.model.crawl(web.seeds).fetched)
    assert counters["status_counts"].get("404", 0) > 0
    assert "crawl stopped (done)" in proc.stderr


def test_loopback_is_refused_without_allow_flag(web, tmp_path):
    state = tmp_path / "state"
    start = len(web.requests)
    proc = subprocess.run(crawl_cmd(web, state), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr  # every seed refused: the crawl failed
    assert "use --allow-loopback" in proc.stderr
    assert len(web.requests) == start, "nothing may reach a refused address"
    entries = read_log(state)
    assert entries and all(e["error"] == "guard:loopback" for e in entries)


def test_sigkill_at_random_moments_loses_nothing(web, tmp_path):
    truth = web.model.crawl(web.seeds)
    state = tmp_path / "state"
    rng = random.Random(int(os.environ.get("DRUMBEAT_TEST_SEED", "11")))
    kills = 0
    start = len(web.requests)
    for _ in range(4):
        proc = subprocess.Popen(
            crawl_cmd(web, state, "--allow-loopback"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(1.0, 3.0))
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
    assert kills >= 2, "the crawl finished before it could be killed twice"
    proc = subprocess.run(
        crawl_cmd(web, state, "--allow-loopback"), capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr
    assert set(fetched_pages(read_log(state))) == truth.fetched
    # Politeness holds across restarts too: a restarted crawl waits a full delay first.
    assert_polite(web, web.requests[start:])


def test_scope_host_keeps_to_the_seed_hosts(web, tmp_path):
    state = tmp_path / "state"
    proc = subprocess.run(
        crawl_cmd(web, state, "--allow-loopback", "--scope", "host"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    seed_hosts = {u.split("/")[2].split(":")[0] for u in web.seeds}
    pages = fetched_pages(read_log(state))
    assert pages and {u.split("/")[2].split(":")[0] for u in pages} == seed_hosts


def test_sigterm_stops_gracefully_and_resume_completes(web, tmp_path):
    truth = web.model.crawl(web.seeds)
    state = tmp_path / "state"
    start = len(web.requests)
    proc = subprocess.Popen(
        crawl_cmd(web, state, "--allow-loopback"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Stop it once pages are being fetched (fetcher processes take a moment to start).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(
        r.path != "/robots.txt" for r in web.requests[start:]
    ):
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err  # stopped, resumable
    assert "crawl stopped (signal)" in err
    first = fetched_pages(read_log(state))
    assert 0 < len(first) < len(truth.fetched)
    # Only --state: the crawl remembers its seeds and settings (DNS server, delays, ...).
    start = len(web.requests)
    proc = subprocess.run(
        [sys.executable, "-m", "drumbeat", "crawl", "--state", str(state)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    pages = fetched_pages(read_log(state))
    assert set(pages) == truth.fetched
    # A graceful stop checkpoints everything it reported: nothing is fetched twice.
    assert len(pages) == len(set(pages))
    assert_polite(web, web.requests[start:])


# Politeness is read from simweb's stamps: a loaded machine delays the stamp of the
# killed fetcher's last request towards its retry's (seen once beside 4 workers).
@pytest.mark.alone
def test_a_killed_fetcher_process_is_replaced_and_its_work_done(web, tmp_path):
    truth = web.model.crawl(web.seeds)
    state = tmp_path / "state"
    start = len(web.requests)
    proc = subprocess.Popen(
        crawl_cmd(web, state, "--allow-loopback", "--fetchers", "2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while (
        time.monotonic() < deadline
        and sum(r.path != "/robots.txt" for r in web.requests[start:]) < 5
    ):
        time.sleep(0.1)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    assert len(children) == 2
    os.kill(int(children[0]), signal.SIGKILL)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    assert set(fetched_pages(read_log(state))) == truth.fetched
    assert "exited with code -9" in (state / "drumbeat.log").read_text()
    assert_polite(web, web.requests[start:])


def test_max_pages_stops_and_counts_across_resumes(web, tmp_path):
    state = tmp_path / "state"
    for _ in range(2):
        proc = subprocess.run(
            crawl_cmd(web, state, "--allow-loopback", "--max-pages", "20"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert "crawl stopped (max_pages)" in proc.stderr
    assert len(fetched_pages(read_log(state))) == 20


def _auto_allocator() -> str:
    from drumbeat.runtime.allocator import library

    lib = library("auto") or ""
    return "mimalloc" if "mimalloc" in lib else "jemalloc" if "jemalloc" in lib else "system"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["crawl", "--state", "x", "--host-delay", "soon"], "--host-delay"),
        (["crawl", "--state", "x", "--concurrency", "0"], "--concurrency"),
        (["crawl", "--state", "x", "--scope", "galaxy"], "--scope"),
        (["crawl", "--state", "x", "--allocator", "tcmalloc"], "--allocator"),
        (["crawl", "http://a.test/", "--state", "x", "--frobnicate"], "--frobnicate"),
    ],
)
def test_bad_cli_flags_exit_2_with_one_line(args, needle):
    proc = subprocess.run(
        [sys.executable, "-m", "drumbeat", *args], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2
    assert needle in proc.stderr and proc.stderr.count("\n") == 1


def test_bad_config_value_exits_2_naming_the_setting(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("host_delay_s = -3\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "drumbeat",
            "crawl",
            "http://a.test/",
            "--state",
            str(tmp_path / "s"),
            "--config",
            str(cfg),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "host_delay_s" in proc.stderr and proc.stderr.count("\n") == 1


def test_a_state_dir_in_use_is_refused(web, tmp_path):
    state = tmp_path / "state"
    first = subprocess.Popen(
        crawl_cmd(web, state, "--allow-loopback"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not (state / "crawl.log").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = subprocess.run(
            crawl_cmd(web, state, "--allow-loopback"), capture_output=True, text=True, timeout=30
        )
        assert second.returncode == 1 and "in use" in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=60)


def test_demo_runs_and_reports_where_the_warc_files_are(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "drumbeat",
            "demo",
            "--seconds",
            "4",
            "--hosts",
            "20",
            "--state",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "WARC files" in proc.stdout and "pages fetched" in proc.stdout
    assert list((tmp_path / "demo" / "warc").glob("*.warc.gz"))


def test_a_corrupt_state_file_is_named_and_exits_1(web, tmp_path):
    state = tmp_path / "state"
    proc = subprocess.run(
        crawl_cmd(web, state, "--allow-loopback", "--max-pages", "5"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    [drum_state] = (state / "urlseen").glob("STATE*")
    drum_state.write_bytes(drum_state.read_bytes()[:-7] + b"garbage")
    proc = subprocess.run(crawl_cmd(web, state), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert drum_state.name in proc.stderr and "Traceback" not in proc.stderr
