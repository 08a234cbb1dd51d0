"""End-to-end: duplicates in a crawl of simweb's planted copies.

Each article is served three times: the original, an exact copy and a near copy
(SimWebConfig.duplicate_articles). The crawl writes one response for the original and
its exact copy together, and a revisit for the other; near copies are marked in the
crawl log, only ever as copies of their own article.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from drumbeat.simweb.model import SimWebConfig
from drumbeat.simweb.server import run_in_thread
from drumbeat.store.warc import IDENTICAL_PAYLOAD_DIGEST, iter_records
from tests.e2e.test_crawl import crawl_cmd, fetched_pages, read_log

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("fetchers", ["2", "0"])  # two processes share one index; in-process
def test_exact_copies_are_revisits_and_near_copies_are_marked(
    tmp_path: Path, fetchers: str
) -> None:
    config = SimWebConfig(seed=3, hosts=6, ips=3, pages_per_host=3, duplicate_articles=4)
    with run_in_thread(config) as web:
        state = tmp_path / "state"
        proc = subprocess.run(
            crawl_cmd(web, state, "--allow-loopback", "--fetchers", fetchers, "--near-dup"),
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert proc.returncode == 0, proc.stderr
        model = web.model
        entries = read_log(state)
        assert set(fetched_pages(entries)) == model.crawl(web.seeds).fetched

    records = [r for path in sorted((state / "warc").glob("*.warc.gz")) for r in iter_records(path)]
    by_uri = defaultdict(list)
    for r in records:
        if r.rec_type in ("response", "revisit"):
            by_uri[r.header("WARC-Target-URI")].append(r)
    groups: dict[str, list[str]] = defaultdict(list)  # original URL -> exact copies fetched
    for url in by_uri:
        page = model.page(*_host_path(url)) if "/article/" in url else None
        if page is not None and page.article_variant in ("original", "copy"):
            groups[page.article].append(url)
    assert len(groups) >= 12
    log_by_url = {e["url"]: e for e in entries if e["kind"] == "page"}
    for urls in groups.values():
        assert len(urls) == 2
        kinds = sorted(by_uri[u][0].rec_type for u in urls)
        assert kinds == ["response", "revisit"], urls
        [response] = [by_uri[u][0] for u in urls if by_uri[u][0].rec_type == "response"]
        [revisit] = [by_uri[u][0] for u in urls if by_uri[u][0].rec_type == "revisit"]
        assert revisit.header("WARC-Profile") == IDENTICAL_PAYLOAD_DIGEST
        assert revisit.header("WARC-Refers-To-Target-URI") == response.header("WARC-Target-URI")
        assert revisit.header("WARC-Refers-To-Date") == response.header("WARC-Date")
        assert revisit.header("WARC-Payload-Digest") == response.header("WARC-Payload-Digest")
        assert revisit.content == b""
        revisited = log_by_url[revisit.header("WARC-Target-URI")]
        assert revisited["revisit_of"] == response.header("WARC-Target-URI")
        assert revisited["warc"]

    marked = {e["url"]: e["near_dup_of"] for e in entries if e.get("near_dup_of")}
    assert marked, "no near copy found"
    for url, earlier in marked.items():
        page, other = model.page(*_host_path(url)), model.page(*_host_path(earlier))
        assert page.article is not None and page.article == other.article, (url, earlier)


def _host_path(url: str) -> tuple[str, str]:
    rest = url.split("://", 1)[1]
    host_port, _, path = rest.partition("/")
    return host_port.split(":")[0], "/" + path
