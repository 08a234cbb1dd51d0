"""Crawl order policies (drumbeat.frontier.order) and BEAST's bands: each policy's band
follows what it approximates; a banded BEAST queue is read highest band first, keeps a
one-band (breadth-first) queue byte for byte as before, and commits and reopens the
policy's knowledge."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from drumbeat import urls
from drumbeat.frontier.beast import Beast
from drumbeat.frontier.order import (
    Focus,
    InDegree,
    LargerSites,
    Opic,
    OrderPolicy,
    URLSketch,
    make_order,
    policy_for,
)
from drumbeat.frontier.urlseen import encode_payload
from drumbeat.settings import Settings
from drumbeat.testing import FakeClock

WIDTH = 1 << 12


def _payload(url: str) -> bytes:
    return encode_payload(url, 1, "http://a.test/")


def _fps(*links: str) -> np.ndarray:
    return np.array([urls.fingerprint(u) for u in links], np.uint64)


def test_sketch_never_undercounts_and_keeps_maxima() -> None:
    sketch = URLSketch(64)  # small: many collisions
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 2**63, 500, dtype=np.uint64)
    counts = rng.integers(1, 5, 500)
    for key, n in zip(keys, counts):
        sketch.add(np.repeat(key, n))
    assert (sketch.get(keys) >= counts).all()
    best = URLSketch(WIDTH)
    best.raise_to(keys[:3], 0.25)
    best.raise_to(keys[:1], 0.75)
    best.raise_to(keys[:1], 0.5)  # lower: the maximum stays
    assert best.get(keys[:3]).tolist() == [0.75, 0.25, 0.25]
    again = URLSketch(WIDTH)
    again.load(best.tables("x"), "x")
    assert (again.table == best.table).all()
    other = URLSketch(64)
    other.load(best.tables("x"), "x")  # another width: starts empty
    assert not other.table.any()


def test_indegree_bands_follow_links_found() -> None:
    policy = InDegree(4, WIDTH)
    for page in range(9):
        policy.links(page, _fps("http://x.test/hot", *(["http://x.test/warm"] * (page < 2))))
    policy.links(99, _fps("http://x.test/cold"))
    records = [_payload(f"http://x.test/{n}") for n in ("cold", "warm", "hot", "unknown")]
    plds = np.zeros(4, np.uint64)
    bands = policy.band_of(records, plds, None, True)
    assert bands is not None and bands.tolist() == [0, 1, 3, 0]  # 1, 2, 9, 0 links


def test_opic_shares_a_pages_cash_among_its_links() -> None:
    policy = Opic(4, WIDTH)
    # A page of two links gives each half its cash; a page of 64 links a 64th.
    policy.links(1, _fps("http://x.test/few", "http://x.test/few2"))
    policy.links(2, _fps(*(f"http://x.test/many{i}" for i in range(64))))
    # Cash passes on: "few" is fetched and gives its cash (1 + 1/2) to its one link.
    policy.links(urls.fingerprint("http://x.test/few"), _fps("http://x.test/child"))
    records = [_payload(f"http://x.test/{n}") for n in ("many0", "few", "child")]
    bands = policy.band_of(records, np.zeros(3, np.uint64), None, True)
    assert bands is not None and bands.tolist() == [0, 3, 3]
    assert policy.sketch.get(_fps("http://x.test/child"))[0] == pytest.approx(1.5)


def test_larger_sites_counts_urls_placed_new_per_site() -> None:
    policy = LargerSites(4, WIDTH)
    big, small = np.uint64(7), np.uint64(8)
    records = [_payload(f"http://big.test/{i}") for i in range(300)]
    policy.band_of(records, np.full(300, big), np.full(300, big), True)
    bands = policy.band_of(
        [_payload("http://big.test/x"), _payload("http://small.test/")],
        np.array([big, small]),
        np.array([big, small]),
        True,
    )
    assert bands is not None and bands.tolist() == [3, 0]  # sqrt(301) >= 8; sqrt(1)
    # A re-split's URLs are not counted again.
    before = policy.sketch.get(np.array([big]))[0]
    policy.band_of(records, np.full(300, big), np.full(300, big), False)
    assert policy.sketch.get(np.array([big]))[0] == before


def test_focus_band_is_the_best_linking_pages_score() -> None:
    policy = Focus(4, WIDTH)
    policy.links(0, _fps("http://x.test/a", "http://x.test/b"), 0.1)
    policy.links(0, _fps("http://x.test/a"), 0.9)
    policy.links(0, _fps("http://x.test/c"), 1.0)
    records = [_payload(f"http://x.test/{n}") for n in "abc"]
    bands = policy.band_of(records, np.zeros(3, np.uint64), None, True)
    assert bands is not None and bands.tolist() == [3, 0, 3]


def test_policy_for_settings() -> None:
    assert type(policy_for(Settings())) is OrderPolicy  # bfs: one band, no work
    assert policy_for(Settings()).bands == 1
    assert isinstance(policy_for(Settings(order="opic", order_bands=6)), Opic)
    assert policy_for(Settings(order="opic", order_bands=6)).bands == 6
    assert isinstance(policy_for(Settings(focus="m:f")), Focus)
    with pytest.raises(ValueError, match="no crawl order"):
        make_order("pagerank", bands=4, sketch_width=WIDTH)


def _beast(path: Path, order: OrderPolicy | None, **kw: object) -> Beast:
    return Beast(
        path,
        queues=2,
        rebudget=lambda rs: ([1] * len(rs), [100] * len(rs), None),
        order=order,
        **kw,  # type: ignore[arg-type]
    )


def test_beast_reads_a_queue_highest_band_first(tmp_path: Path) -> None:
    policy = InDegree(4, WIDTH)
    policy.links(1, _fps(*["http://x.test/hot"] * 8, *["http://x.test/warm"] * 2))
    beast = _beast(tmp_path / "b", policy)
    names = ["cold1", "warm", "cold2", "hot", "cold3"]
    beast.place_many([_payload(f"http://x.test/{n}") for n in names], [1] * 5, [100] * 5)
    got = [r.split(b"\n")[0].decode().rsplit("/", 1)[1] for r in beast.read(10)]
    assert got == ["hot", "warm", "cold1", "cold2", "cold3"]  # FIFO within a band


def test_beast_paced_turn_puts_a_hot_url_ahead_in_the_current_queue(tmp_path: Path) -> None:
    clock = FakeClock()
    policy = InDegree(4, WIDTH)
    beast = _beast(tmp_path / "b", policy, turn_s=10.0, clock=clock)
    beast.place_many([_payload(f"http://x.test/c{i}") for i in range(4)], [1] * 4, [100] * 4)
    assert len(beast.read(1)) == 1  # the turn has begun: its queue is open to new URLs
    policy.links(2, _fps(*["http://x.test/hot"] * 4))
    clock.advance(1.0)
    beast.place_many([_payload("http://x.test/hot")], [1], [100])
    assert beast.read(1)[0].startswith(b"http://x.test/hot\n")


def test_one_band_commits_as_before_and_bands_reopen(tmp_path: Path) -> None:
    plain = _beast(tmp_path / "plain", None)
    plain.place_many([_payload("http://x.test/1")], [1], [100])
    state = plain.commit()
    assert all("bands" not in q for q in state["ring"]) and "order" not in state
    assert sorted(p.name for p in (tmp_path / "plain").iterdir() if p.is_dir()) == [
        "q000",
        "q001",
        "qf",
    ]
    plain.close()

    policy = InDegree(4, WIDTH)
    policy.links(1, _fps(*["http://x.test/hot"] * 8))
    banded = _beast(tmp_path / "banded", policy)
    banded.place_many(
        [_payload("http://x.test/cold"), _payload("http://x.test/hot")], [1, 1], [100, 100]
    )
    state = banded.commit()
    assert state["order"] == "indegree" and all("bands" in q for q in state["ring"])
    banded.close()
    # Reopened: the queued URLs keep their bands, the policy its counts.
    policy2 = InDegree(4, WIDTH)
    reopened = Beast(
        tmp_path / "banded",
        state=state,
        rebudget=lambda rs: ([1] * len(rs), [100] * len(rs), None),
        order=policy2,
    )
    assert policy2.sketch.get(_fps("http://x.test/hot"))[0] == 8
    assert [r.split(b"\n")[0] for r in reopened.read(5)] == [
        b"http://x.test/hot",
        b"http://x.test/cold",
    ]
    reopened.close()
    # Reopened breadth-first: the bands are still read, nothing is lost.
    bfs = Beast(
        tmp_path / "banded", state=state, rebudget=lambda rs: ([1] * len(rs), [100] * len(rs), None)
    )
    assert len(bfs.read(5)) == 2
    bfs.close()


@pytest.mark.parametrize("policy_class", [InDegree, Opic])
def test_links_of_many_pages_at_once_is_links_page_by_page(policy_class) -> None:
    one, many = policy_class(4, WIDTH), policy_class(4, WIDTH)
    pages = [("http://x.test/a", ["http://x.test/c"]), ("http://x.test/b", ["http://x.test/a"])]
    pages += [("http://x.test/", ["http://x.test/a", "http://x.test/b"]), ("http://x.test/z", [])]
    for page, links in pages:
        one.links(urls.fingerprint(page), _fps(*links))
    many.links_of_pages(
        _fps(*(p for p, _ in pages)),
        _fps(*(u for _, links in pages for u in links)),
        np.array([len(links) for _, links in pages]),
    )
    # links_of_pages reads each page's cash as it was before the batch: here no page
    # links to one before it in the batch, so both agree.
    keys = _fps("http://x.test/a", "http://x.test/b", "http://x.test/c")
    assert one.sketch.get(keys).tolist() == pytest.approx(many.sketch.get(keys).tolist())
