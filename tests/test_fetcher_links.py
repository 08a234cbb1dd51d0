"""LinkExtractor, the fetcher's reading of fetched bodies for links, on its own: its two
passes, a redirect's target, and content that breaks a parser (the fetcher's tests run
it through Fetcher.complete, against real servers)."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from drumbeat.fetch.response import FetchResponse
from drumbeat.fetcher_links import LinkExtractor
from drumbeat.queue.base import FetchItem, ItemResult
from drumbeat.queue.partition import Splitter
from drumbeat.settings import Settings

PAGE_HTML = b"<html><body><a href='/a'>a</a><a href='http://other.test/b'>b</a></body></html>"


def response(status: int = 200, **fields: object) -> FetchResponse:
    fields.setdefault("decoded", PAGE_HTML)
    fields.setdefault("content_type", "text/html")
    return FetchResponse(  # type: ignore[arg-type]
        url="http://s.test/p", ip="127.0.0.1", fetch_time=1.0, status=status, **fields
    )


def extract(
    settings: Settings, resp: FetchResponse, item: FetchItem | None = None, partitions: int = 1
) -> tuple[ItemResult, defaultdict[str, float]]:
    stage_s: defaultdict[str, float] = defaultdict(float)
    links = LinkExtractor(settings, stage_s, Counter(), partitions=partitions)
    item = item or FetchItem(0, "http://s.test/p", "127.0.0.1", depth=2)
    result = ItemResult(0, 0, item, status=resp.status, log={})
    found = links.references(item, result, resp)
    if found is not None:
        links.links(item, result, found)
    return result, stage_s


def test_a_page_s_references_become_its_links_packed() -> None:
    result, stage_s = extract(Settings(), response())
    assert result.found is not None
    assert result.found.urls() == ["http://s.test/a", "http://other.test/b"]
    assert result.found.payloads_list()[0].split(b"\n", 1)[0] == b"http://s.test/a"
    assert result.pld_edges is not None and result.pld_edges.source == "s.test"
    assert stage_s["normalize"] > 0 and stage_s["pack"] > 0
    assert stage_s["parse"] == pytest.approx(-stage_s["normalize"] - stage_s["pack"])


def test_a_redirect_gives_its_target_until_the_chain_is_too_long() -> None:
    resp = response(301, location="/next", decoded=b"")
    result, _ = extract(Settings(), resp)
    assert result.found is not None and result.found.urls() == ["http://s.test/next"]
    item = FetchItem(0, "http://s.test/p", "127.0.0.1", hops=Settings().max_redirects)
    result, _ = extract(Settings(), resp, item)
    assert result.found is None and result.dropped == {"too_many_redirects": 1}
    assert result.log == {"location_dropped": "too_many_redirects"}


def test_content_that_breaks_a_parser_is_a_parse_error_not_a_crash() -> None:
    # A field of the wrong type stands for content that a parser chokes on.
    result, _ = extract(Settings(), response(decoded=12345))
    assert result.found is None and result.dropped == {"parse_error": 1}


def test_a_cluster_fetcher_packs_a_page_s_links_apart_for_each_owner() -> None:
    # What the fetcher packs per partition is exactly what splitting the page's links
    # and edges packed whole gives: the same fingerprints, payloads and edges, each
    # partition's in the page's order.
    sites = [f"site{i}.test" for i in range(30)]
    html = "".join(
        f"<a href='/own{i}'>o</a><a href='http://{s}/x'>x</a>" for i, s in enumerate(sites)
    )
    resp = response(decoded=html.encode())
    whole, _ = extract(Settings(), resp)
    assert whole.found is not None and whole.pld_edges is not None
    for parts in (2, 3, 7):
        result, _ = extract(Settings(), resp, partitions=parts)
        assert result.found is None and result.pld_edges is None
        assert result.by_partition is not None
        splitter = Splitter(parts)
        found = splitter.split_found(whole.found)
        edges = splitter.split_edges(whole.pld_edges)
        assert set(result.by_partition) == set(found) | set(edges)
        for part, (f, e) in result.by_partition.items():
            assert f == found.get(part)
            assert e == edges.get(part)
    one, _ = extract(Settings(), response(decoded=b"<a href='/a'>a</a>"), partitions=4)
    assert one.by_partition is not None and len(one.by_partition) == 1
    ((f, e),) = one.by_partition.values()
    assert f is not None and f.urls() == ["http://s.test/a"] and e is None
