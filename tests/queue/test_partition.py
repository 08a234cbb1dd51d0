"""drumbeat.queue.partition: who owns a URL, and splitting what a page found by owner."""

from __future__ import annotations

import pytest

from drumbeat import urls
from drumbeat.fetcher_links import pack_edges, pack_found
from drumbeat.queue.base import FoundEdges, FoundURLs
from drumbeat.queue.partition import Splitter, parse_partition, partition_of, partition_of_pld
from drumbeat.settings import SettingsError

SITES = [f"site{i}.test" for i in range(40)] + ["example.co.uk", "alice.github.io"]
LINKS = [
    f"{scheme}://{sub}{site}/{page}"
    for page in ("a", "b?q=1")
    for scheme, sub in (("http", ""), ("https", "www."), ("http", "x.y."))
    for site in SITES
]


def test_partition_of_is_stable_and_in_range() -> None:
    # Managers and fetchers of one crawl may run different processes, machines and
    # drumbeat builds: the owner must not depend on anything but the URL.
    assert [partition_of("http://example.com/", m) for m in (1, 2, 3, 7, 16)] == [0, 1, 0, 6, 3]
    assert [partition_of("https://www.example.co.uk/a", m) for m in (2, 7)] == [1, 4]
    for parts in (1, 2, 3, 5, 16):
        owners = [partition_of(u, parts) for u in LINKS]
        assert owners == [partition_of(u, parts) for u in LINKS]
        assert all(0 <= o < parts for o in owners)
    assert {partition_of(u, 4) for u in LINKS} == {0, 1, 2, 3}, "every partition owns some"


def test_every_host_of_a_pld_has_one_owner() -> None:
    hosts = [
        "http://example.co.uk/",
        "https://www.example.co.uk/x/y",
        "http://a.b.c.example.co.uk:8080/",
        "https://shop.example.co.uk/?q=1",
    ]
    for parts in (2, 3, 7, 16):
        owners = {partition_of(u, parts) for u in hosts}
        assert owners == {partition_of_pld("example.co.uk", parts)}, parts
        for u in LINKS:
            assert partition_of(u, parts) == partition_of_pld(urls.pld(urls.host_of(u)), parts)
    # A private suffix makes each of its sites its own PLD, owned on its own.
    spread = {partition_of(f"https://user{i}.github.io/", 8) for i in range(40)}
    assert len(spread) > 1


def _found_rows(found: FoundURLs) -> list[tuple[bytes, bytes]]:
    fps = found.fingerprints
    return [(fps[8 * i : 8 * i + 8], p) for i, p in enumerate(found.payloads_list())]


def _edge_rows(edges: FoundEdges) -> list[tuple[bytes, str]]:
    return [(edges.keys[8 * i : 8 * i + 8], t) for i, (_, t) in enumerate(edges.pairs())]


def _is_subsequence(part: list, whole: list) -> bool:
    it = iter(whole)
    return all(any(x == y for y in it) for x in part)


def test_split_found_keeps_every_link_once_with_its_owner_in_order() -> None:
    found = pack_found(LINKS, 3, "http://from.test/page", hops=1)
    rows = _found_rows(found)
    for parts in (2, 3, 7):
        split = Splitter(parts).split_found(found)
        got = [row for group in split.values() for row in _found_rows(group)]
        assert sorted(got) == sorted(rows), "every fingerprint and payload exactly once"
        for part, group in split.items():
            assert len(group) > 0
            assert {partition_of(u, parts) for u in group.urls()} == {part}
            assert _is_subsequence(_found_rows(group), rows), "order kept within a group"
            # The payloads are URL-seen's, unchanged: url, depth, via, hops.
            tail = group.payloads_list()[0].split(b"\n")[1:]
            assert tail == [b"3", b"http://from.test/page", b"1"]


def test_split_found_of_one_owner_is_one_group() -> None:
    one = [u for u in LINKS if partition_of(u, 3) == 2]
    found = pack_found(one, 1, "http://from.test/")
    split = Splitter(3).split_found(found)
    assert list(split) == [2]
    assert _found_rows(split[2]) == _found_rows(found)


def test_split_edges_keeps_every_edge_once_with_its_owner_in_order() -> None:
    targets = sorted(SITES)
    edges = pack_edges("from.test", targets)
    assert edges is not None
    rows = _edge_rows(edges)
    for parts in (2, 5):
        split = Splitter(parts).split_edges(edges)
        got = [row for group in split.values() for row in _edge_rows(group)]
        assert sorted(got) == sorted(rows)
        for part, group in split.items():
            assert group.source == "from.test"
            assert {partition_of_pld(t, parts) for _, t in group.pairs()} == {part}
            assert _is_subsequence(_edge_rows(group), rows)


def test_one_partition_is_the_identity() -> None:
    found = pack_found(LINKS, 0, "http://from.test/")
    edges = pack_edges("from.test", sorted(SITES))
    assert edges is not None
    splitter = Splitter(1)
    assert splitter.split_found(found) == {0: found}
    assert splitter.split_edges(edges) == {0: edges}
    assert {partition_of(u, 1) for u in LINKS} == {0}


def test_owner_of_payload_agrees_with_partition_of_past_its_cache() -> None:
    splitter = Splitter(5)
    splitter.MAX_ORIGINS = 8  # the remembered origins are dropped when full
    for _ in range(2):
        for payload in pack_found(LINKS, 0, "http://from.test/").payloads_list():
            url = payload.split(b"\n", 1)[0].decode()
            assert splitter.owner_of_payload(payload) == partition_of(url, 5), url


def test_split_page_gives_each_link_and_pld_once_to_its_owner_in_order() -> None:
    own = [f"http://site3.test/own{i}" for i in range(5)]
    pages = [
        ("http://site3.test/page", LINKS),
        ("https://www.example.co.uk/x", LINKS),
        ("http://site3.test/page", own + LINKS[::7] + own),  # own links around others
        ("http://site3.test/page", own),  # none leaves the source's origin
        ("http://elsewhere.test/", LINKS[:6]),  # none is on the source's origin
        ("http://site3.test/page", []),
    ]
    for source, links in pages:
        want_source, want_targets = urls.pld_targets(source, links)
        for parts in (2, 3, 7):
            splitter = Splitter(parts)
            splitter.MAX_ORIGINS = 8  # the remembered PLDs are dropped when full
            for _ in range(2):
                pld, groups, plds = splitter.split_page(source, links)
                assert pld == want_source
                assert sorted(u for g in groups.values() for u in g) == sorted(links)
                for part, group in groups.items():
                    assert group and {partition_of(u, parts) for u in group} == {part}
                    assert _is_subsequence(group, links)
                home = partition_of(source, parts)
                if any(partition_of(u, parts) == home for u in links):
                    assert next(iter(groups)) == home, "the source's owner's links first"
                whole = pack_found(links, 1, source)
                packed = {p: pack_found(g, 1, source) for p, g in groups.items()}
                assert packed == (Splitter(parts).split_found(whole) if links else {})
                assert sorted(t for g in plds.values() for t in g) == want_targets
                for part, group in plds.items():
                    assert group and {partition_of_pld(t, parts) for t in group} == {part}
                    assert group == sorted(group)


def test_partitions_are_i_of_m() -> None:
    assert parse_partition("0/1") == (0, 1) and parse_partition("3/4") == (3, 4)
    for bad in ("2/2", "-1/2", "1", "a/b", "1/0", ""):
        with pytest.raises(SettingsError, match="0 <= I < M"):
            parse_partition(bad)
