"""End-to-end: `drumbeat crawl` through simweb's hostile hosts (drumbeat.simweb.hostile).

Every broken or malicious server is met, recorded in the crawl log with a reason, and the
crawl goes on to fetch the whole finite web. Hosts that answer 429/503 are backed off and
their URL retried a bounded number of times.
"""

from __future__ import annotations

import itertools
import subprocess
from collections import defaultdict

from drumbeat.checkpoint import read_counters
from drumbeat.simweb.model import SimWebConfig
from drumbeat.simweb.server import run_in_thread
from tests.e2e.test_crawl import crawl_cmd, fetched_pages, read_log

HOSTILE_CONFIG = """\
checkpoint_interval_s = 0.5
robots_retry_s = 0.4
robots_max_attempts = 2
connect_timeout_s = 3.0
read_timeout_s = 2.0
total_timeout_s = 3.0
dns_timeout_s = 0.5
max_body_bytes = 2097152
max_decoded_bytes = 4194304
backoff_max_s = 0.3
fetch_max_attempts = 3
"""


def test_a_crawl_through_the_hostile_web_records_every_case_and_goes_on(tmp_path):
    config = SimWebConfig(
        seed=11, hosts=12, ips=4, pages_per_host=4, hostile=True, hostile_interval_s=0.5
    )
    with run_in_thread(config) as web:
        state = tmp_path / "state"
        cmd = crawl_cmd(web, state, "--allow-loopback")
        (state.parent / f"{state.name}.toml").write_text(HOSTILE_CONFIG)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        truth = web.model.crawl(web.seeds)
        entries = read_log(state)
        counters = read_counters(state)

    # The finite web is crawled completely, hostile neighbours notwithstanding.
    assert truth.fetched <= set(fetched_pages(entries))
    by_url = defaultdict(list)
    for e in entries:
        by_url[e["url"]].append(e)
    # Every case was met and recorded: an HTTP status or an error reason.
    missing = [u for u in web.model.hostile_entry_urls() if u not in by_url]
    assert not missing, missing
    for url in web.model.hostile_entry_urls():
        assert all(e["status"] is not None or e["error"] for e in by_url[url]), url
    # 429 and 503: fetched fetch_max_attempts times, backed off between, then given up.
    for name in ("status-429", "status-503", "status-503-bad-retry"):
        [url] = [u for u in web.model.hostile_entry_urls() if f"//{name}." in u]
        fetches = [e for e in by_url[url] if e["status"] is not None]
        assert len(fetches) == 3 and len({e["status"] for e in fetches}) == 1, by_url[url]
        assert by_url[url][-1]["error"] == "retries_exhausted", name
        gaps = [b["time"] - a["time"] for a, b in itertools.pairwise(fetches)]
        assert min(gaps) >= 0.3 - 0.01, (name, gaps)  # backoff_max_s caps Retry-After: 120
    assert counters["backoffs"] >= 9 and counters["dropped.retries_exhausted"] >= 3
    # Bounded: bombs and endless bodies were cut, slow servers timed out, DNS faults named.
    errors = {e["error"] for e in entries if e["error"]}
    assert {"timeout", "dns:nxdomain", "dns:servfail"} <= errors, errors
    assert any(e["truncated"] == "length" for e in entries)
    # A 50-hop redirect chain is followed max_redirects (10) hops from its entry URL, then
    # the next Location is dropped with a reason.
    [chain] = [u for u in web.model.hostile_entry_urls() if "//redirect-chain." in u]
    hops = [e for e in entries if e["url"].startswith(chain.rstrip("/") + "/hop/")]
    assert sorted(int(e["url"].rsplit("/", 1)[1]) for e in hops) == list(range(1, 11))
    assert all(e["status"] == 301 for e in hops)
    assert [e.get("location_dropped") for e in hops if e.get("location_dropped")] == [
        "too_many_redirects"
    ]
    assert counters["links_dropped.too_many_redirects"] == 1
    # Pages cut short after their head arrived are kept, marked why, and not fetched again.
    for name, why in (("slow-body", "time"), ("reset", "disconnect"), ("short-body", "disconnect")):
        [url] = [u for u in web.model.hostile_entry_urls() if f"//{name}." in u]
        assert [(e["status"], e["truncated"]) for e in by_url[url]] == [(200, why)], by_url[url]
