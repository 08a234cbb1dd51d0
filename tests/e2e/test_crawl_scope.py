"""End-to-end: the scope rules (drumbeat.frontier.scope) in `drumbeat crawl` (a real
subprocess) against simweb on loopback.

The expected pages come from a walk of simweb's model like its oracle's
(drumbeat.simweb.oracle.crawl), with the rule applied to each link found: a link the rules
drop is not seen, so a later link to the same URL that passes may still bring it.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from drumbeat.simweb.model import SimWebConfig, SimWebModel
from drumbeat.simweb.server import run_in_thread
from tests.e2e.test_crawl import crawl_cmd, fetched_pages, read_log


@pytest.fixture(scope="module")
def web():
    config = SimWebConfig(seed=11, hosts=30, ips=8, pages_per_host=6, crawl_delay_s=0.3)
    with run_in_thread(config) as w:
        yield w


def expected_pages(
    model: SimWebModel,
    seeds: list[str],
    keep: Callable[[str], bool] = lambda url: True,
    max_depth: int | None = None,
) -> dict[str, int]:
    """The pages a crawl from ``seeds`` fetches when it follows only the links ``keep``
    passes, at most ``max_depth`` deep, each with its depth (breadth-first: the least)."""
    depth = dict.fromkeys(seeds, 0)
    queue = deque(seeds)
    fetched: dict[str, int] = {}

    def discover(url: str | None, d: int) -> None:
        if url is None or not url.startswith(("http://", "https://")) or url in depth:
            return
        if (max_depth is not None and d > max_depth) or not keep(url):
            return
        depth[url] = d
        queue.append(url)

    while queue:
        url = queue.popleft()
        parts = urlsplit(url)
        host = parts.hostname or ""
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if host in (model.refused_host, model.nxdomain_host) or model.host(host) is None:
            continue
        robots = model.robots(host)
        if robots.fetch_nothing or not robots.allows(path):
            continue
        fetched[url] = depth[url]
        page = model.page(host, path)
        discover(page.location, depth[url] + 1)
        if not page.meta_nofollow:
            for link in page.links:
                if not link.nofollow:
                    discover(link.url, depth[url] + 1)
    return fetched


def run(web, state: Path, *flags: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        crawl_cmd(web, state, "--allow-loopback", *flags),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def stats(state: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "drumbeat", "stats", "--json", str(state)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_include_and_exclude_follow_only_the_links_they_pass(web, tmp_path):
    include, excludes = r"//(\w+\.)?site[0-9]\.test", [r"/p/", r"search\?"]
    state = tmp_path / "state"
    flags = ["--include", include]
    for x in excludes:
        flags += ["--exclude", x]
    run(web, state, *flags)

    def keep(url: str) -> bool:
        return re.search(include, url) is not None and not any(re.search(x, url) for x in excludes)

    expected = expected_pages(web.model, web.seeds, keep)
    pages = fetched_pages(read_log(state))
    assert Counter(pages).most_common(1)[0][1] == 1
    assert set(pages) == set(expected)
    everything = expected_pages(web.model, web.seeds)
    assert len(everything) > len(expected)  # the rules dropped something
    drops = stats(state)["drops"]
    assert drops["include"]["links"] > 0 and drops["exclude"]["links"] > 0


def test_max_depth_stops_one_hop_from_the_seeds(web, tmp_path):
    state = tmp_path / "state"
    run(web, state, "--max-depth", "1")
    entries = read_log(state)
    expected = expected_pages(web.model, web.seeds, max_depth=1)
    assert set(fetched_pages(entries)) == set(expected)
    assert max(e["depth"] for e in entries if e["kind"] == "page") <= 1
    assert stats(state)["drops"]["max_depth"]["links"] > 0


def test_max_pages_per_host_caps_every_host(web, tmp_path):
    state = tmp_path / "state"
    run(web, state, "--max-pages-per-host", "3")
    entries = read_log(state)
    per_host = Counter(urlsplit(u).hostname for u in fetched_pages(entries))
    everything = Counter(urlsplit(u).hostname for u in expected_pages(web.model, web.seeds))
    assert per_host and max(per_host.values()) == 3
    assert set(per_host) <= set(everything)
    # Hosts with more pages than the cap got it; the rest of theirs were dropped.
    assert sum(n for n in everything.values() if n > 3) > 0
    drops = stats(state)["drops"]["max_pages_per_host"]
    assert drops["links"] + drops["urls"] > 0
    logged = [e for e in entries if e["error"] == "max_pages_per_host"]
    assert drops["urls"] == len(logged)


def test_blocklist_file_is_read_again_mid_crawl(web, tmp_path):
    """A host named in the blocklist at the start is never fetched; one added to the file
    mid-crawl is not fetched once the file has been read again."""
    everything = expected_pages(web.model, web.seeds)
    per_host = Counter(urlsplit(u).hostname for u in everything)
    seed_hosts = {urlsplit(u).hostname for u in web.seeds}
    # The host added mid-crawl: a seed's (fetched from the start), with the most pages.
    late = max(sorted(seed_hosts), key=lambda h: per_host[h])
    early = next(h for h, _ in per_host.most_common() if h not in seed_hosts)
    blocklist = tmp_path / "blocklist.txt"
    blocklist.write_text(f"# blocked from the start\nhost:{early}\n")
    state = tmp_path / "state"
    cmd = crawl_cmd(web, state, "--allow-loopback", "--blocklist", str(blocklist))
    # Slow enough that `late` still has pages to fetch when the file changes.
    cmd[cmd.index("--host-delay") + 1] = "0.5"
    with open(state.parent / f"{state.name}.toml", "a") as f:
        f.write("blocklist_check_s = 0.2\n")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if (state / "crawl.log").exists() and any(
                urlsplit(u).hostname == late for u in fetched_pages(read_log(state))
            ):
                break
            time.sleep(0.05)
        else:
            pytest.fail("the crawl fetched nothing of its seed host")
        blocklist.write_text(f"host:{early}\n{late}  # added mid-crawl\n")
        changed = time.time()
        # Long enough for the file to be read again and the host's next fetches to come
        # due; then a graceful stop (the log is complete, the rest of the web untouched).
        time.sleep(3.0)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode in (0, 3), err
    entries = read_log(state)
    pages = [e for e in entries if e["kind"] == "page" and e["status"] is not None]
    assert not [e for e in pages if urlsplit(e["url"]).hostname == early]
    # Read again within blocklist_check_s of the change, plus a fetch in flight.
    late_pages = [e for e in pages if urlsplit(e["url"]).hostname == late]
    assert late_pages and not [e for e in late_pages if e["time"] > changed + 2.0]
    assert len(late_pages) < per_host[late]
    assert {urlsplit(e["url"]).hostname for e in entries if e["error"] == "blocklist"} == {late}
