"""The command line tells the truth (issue 46): bad --state, refused seeds, exit codes,
seed files, help texts. Crawls are real subprocesses against simweb on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from drumbeat.simweb.model import SimWebConfig
from drumbeat.simweb.server import run_in_thread
from drumbeat.standalone import with_scheme
from tests.e2e.test_crawl import crawl_cmd, fetched_pages, read_log


def drumbeat(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "drumbeat", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def web():
    config = SimWebConfig(seed=3, hosts=4, ips=2, pages_per_host=3, crawl_delay_s=0.3)
    with run_in_thread(config) as w:
        yield w


def one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_state_naming_a_file_or_a_path_under_one_exits_2(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    one_line_error(drumbeat("crawl", "http://a.test/", "--state", str(afile)), "is a file")
    one_line_error(
        drumbeat("crawl", "http://a.test/", "--state", str(afile / "sub")), f"under {afile}"
    )


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_state_where_nothing_can_be_written_exits_2() -> None:
    # /proc refuses new files even to root, as a read-only directory refuses others.
    one_line_error(
        drumbeat("crawl", "http://a.test/", "--state", "/proc/self"), "cannot write in it"
    )
    one_line_error(
        drumbeat("crawl", "http://a.test/", "--state", "/proc/drumbeat-state"), "cannot create it"
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in read-only directories")
def test_state_in_a_read_only_directory_exits_2(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        one_line_error(drumbeat("crawl", "http://a.test/", "--state", str(ro)), "cannot write")
        one_line_error(
            drumbeat("crawl", "http://a.test/", "--state", str(ro / "new")), "cannot create"
        )
    finally:
        ro.chmod(0o755)


def test_refused_seeds_are_explained_and_crawled_on_a_rerun_with_the_flag(web, tmp_path):
    state = tmp_path / "state"
    start = len(web.requests)
    proc = subprocess.run(crawl_cmd(web, state), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    n = len(web.seeds)
    line = f"all {n} seeds were refused: loopback address (use --allow-loopback)"
    assert line in proc.stderr
    assert line in (state / "drumbeat.log").read_text()
    assert len(web.requests) == start, "nothing may reach a refused address"
    # The same flags again: still refused, still said.
    proc = subprocess.run(crawl_cmd(web, state), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and line in proc.stderr
    # With the flag, the same state dir crawls them: the refusal did not mark them seen.
    proc = subprocess.run(
        crawl_cmd(web, state, "--allow-loopback"), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "were refused" not in proc.stderr
    pages = fetched_pages(read_log(state))
    assert set(web.seeds) <= set(pages)
    assert set(pages) == web.model.crawl(web.seeds).fetched
    assert (state / "refused_seeds.jsonl").read_text() == ""


def test_a_seed_dns_cannot_resolve_is_explained_and_tried_again(web, tmp_path):
    state = tmp_path / "state"
    cmd = crawl_cmd(web, state)
    cmd[4 : 4 + len(web.seeds)] = ["http://no-such-host.invalid/"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "the seed was refused: DNS: no such host name" in proc.stderr
    saved = [json.loads(ln) for ln in (state / "refused_seeds.jsonl").read_text().splitlines()]
    assert saved == [{"url": "http://no-such-host.invalid/", "reason": "dns:nxdomain"}]
    proc = drumbeat("crawl", "--state", str(state), "--no-progress")
    assert proc.returncode == 1 and "DNS: no such host name" in proc.stderr
    drops = [e for e in read_log(state) if e["error"] == "dns:nxdomain"]
    assert len(drops) == 2, "each run tried the seed again"


def test_some_seeds_refused_are_counted_and_the_crawl_succeeds(web, tmp_path):
    state = tmp_path / "state"
    cmd = crawl_cmd(web, state, "--allow-loopback")
    cmd.insert(4, "http://no-such-host.invalid/")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"1 of {len(web.seeds) + 1} seeds were refused: DNS" in proc.stderr


def test_a_seeds_file_with_a_bom_and_seeds_without_scheme(web, tmp_path):
    state = tmp_path / "state"
    seeds = tmp_path / "seeds.txt"
    bare = [u.removeprefix("http://") for u in web.seeds]
    seeds.write_text("\ufeff" + "\n".join(bare) + "\n", encoding="utf-8")
    cmd = crawl_cmd(web, state, "--allow-loopback", "--seeds", str(seeds))
    del cmd[4 : 4 + len(web.seeds)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr
    assert set(web.seeds) <= set(fetched_pages(read_log(state)))


@pytest.mark.parametrize(
    "seed, expected",
    [
        ("example.org", "http://example.org"),
        ("example.org/a?b", "http://example.org/a?b"),
        ("localhost:8080/x", "http://localhost:8080/x"),
        ("127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("//example.org/", "http://example.org/"),
        ("https://example.org/", "https://example.org/"),
        ("mailto:someone@example.org", "mailto:someone@example.org"),
    ],
)
def test_with_scheme(seed: str, expected: str) -> None:
    assert with_scheme(seed) == expected


def test_a_mailto_seed_is_rejected_naming_the_scheme(tmp_path: Path) -> None:
    proc = drumbeat("crawl", "mailto:a@example.org", "--state", str(tmp_path / "s"))
    assert proc.returncode == 2
    assert "scheme" in proc.stderr and "Traceback" not in proc.stderr


def test_crawl_help_lists_the_exit_codes() -> None:
    out = drumbeat("crawl", "--help").stdout
    assert "Exit status:" in out
    for code in ("0 ", "1 ", "2 ", "3 "):
        assert f"\n  {code} " in out
    assert "this run only" in out


def test_bench_help_lists_only_benchmarks_each_with_a_line() -> None:
    proc = drumbeat("bench", "--help")
    assert proc.returncode == 0
    rows = proc.stdout.split("benchmarks:\n", 1)[1].splitlines()
    names = [r.split()[0] for r in rows]
    assert names == ["cluster", "drum", "freshness", "frontier", "gil", "site", "throughput"]
    assert all(len(r.split(None, 1)[1]) > 20 for r in rows)
    bad = drumbeat("bench", "offline_manager")
    assert bad.returncode == 2 and "no benchmark" in bad.stderr


def test_simweb_and_stats_help_say_what_they_do() -> None:
    simweb = drumbeat("simweb", "--help").stdout
    assert "JSON line" in simweb and "(default: 50)" in simweb
    stats = drumbeat("stats", "--help").stdout
    assert "state directory" in stats
