"""PLDindegree on DRUM: each PLD->PLD edge counts once; state rolls back with a manifest."""

import numpy as np
import pytest

from drumbeat.fetcher_links import pack_edges
from drumbeat.frontier.pldgraph import (
    INDEGREE_DTYPE,
    PLDIndegree,
    _counted,
    edge_key,
    pld_key,
)


def test_each_edge_counts_once(tmp_path):
    g = PLDIndegree(tmp_path / "g", ram_bytes=2 << 20, fsync=False)
    g.add([("a.test", "hub.test"), ("b.test", "hub.test"), ("a.test", "hub.test")])
    g.add([("c.test", "hub.test"), ("hub.test", "a.test"), ("b.test", "hub.test")])
    assert g.lookup(["hub.test", "a.test", "nobody.test"]) == {
        "hub.test": 3,
        "a.test": 1,
        "nobody.test": 0,
    }
    g.add([("d.test", "hub.test"), ("a.test", "hub.test")])
    assert g.lookup(["hub.test"]) == {"hub.test": 4}
    assert g.new_edges == 5


def test_rollback_to_a_manifest_never_double_counts(tmp_path):
    g = PLDIndegree(tmp_path / "g", ram_bytes=2 << 20)
    g.add([("a.test", "hub.test"), ("b.test", "hub.test")])
    manifest = g.commit()  # both edges still pending in the edges DRUM
    g.add([("c.test", "hub.test")])
    assert g.lookup(["hub.test"]) == {"hub.test": 3}
    again = PLDIndegree(tmp_path / "g", ram_bytes=2 << 20, manifest=manifest)
    again.add([("a.test", "hub.test"), ("c.test", "hub.test")])  # a page seen again
    assert again.lookup(["hub.test"]) == {"hub.test": 3}


def test_small_batches_of_edges_wait_for_one_drum_submit(tmp_path):
    """Edges a few at a time are gathered for one submit to the edges DRUM
    (GATHER_EDGES): they count as queued, and a commit or a merge gives them to it."""
    g = PLDIndegree(tmp_path / "g", ram_bytes=2 << 20)
    g.add([("a.test", "hub.test")])
    g.add([("b.test", "hub.test")])
    assert g.queued_edges == 2 and g.edges.stats().pending == 0
    manifest = g.commit()
    assert g.edges.stats().pending == 2
    again = PLDIndegree(tmp_path / "g", ram_bytes=2 << 20, manifest=manifest)
    again.add([("a.test", "hub.test")])
    assert again.lookup(["hub.test"]) == {"hub.test": 2}
    many = [(f"s{i}.test", "t.test") for i in range(PLDIndegree.GATHER_EDGES)]
    again.add(many[:10])
    assert again.edges.stats().pending == 0
    again.add(many[10:])
    assert again.edges.stats().pending == len(many)
    again.add([("late.test", "t.test")])
    again.merge_edges()
    assert again.queued_edges == 0
    assert again.lookup(["t.test"]) == {"t.test": len(many) + 1}


def test_each_target_of_new_edges_reports_its_exact_new_indegree(tmp_path):
    """A merge's new edges are counted per target: the target hears its in-degree after
    all of them, once."""
    heard: list[tuple[str, int]] = []
    g = PLDIndegree(
        tmp_path / "g",
        ram_bytes=2 << 20,
        fsync=False,
        on_indegree=lambda plds, counts: heard.extend(zip(plds, counts)),
    )
    g.add(
        [
            ("a.test", "hub.test"),
            ("b.test", "hub.test"),
            ("a.test", "hub.test"),
            ("a.test", "x.test"),
        ]
    )
    g.flush()
    assert heard == [("hub.test", 2), ("x.test", 1)]
    g.add([("c.test", "hub.test"), ("b.test", "hub.test")])
    g.flush()
    assert heard[2:] == [("hub.test", 3)]
    assert g.new_edges == 4


def test_counts_of_one_target_from_several_pumps_add_up(tmp_path):
    """Targets pumped twice before the in-degree repository merges: each tuple's answer
    is the in-degree before it, so the later tuple has both counts, and a target is
    reported once a round, with its last tuple's."""
    heard: list[tuple[str, int]] = []
    g = PLDIndegree(
        tmp_path / "g",
        ram_bytes=2 << 20,
        fsync=False,
        on_indegree=lambda plds, counts: heard.extend(zip(plds, counts)),
    )
    g.add([("a.test", "hub.test"), ("b.test", "hub.test")])
    g.merge_edges()
    g.pump()
    g.add([("c.test", "hub.test"), ("c.test", "x.test")])
    g.merge_edges()
    g.pump()
    assert heard == []  # both still queued in the in-degree repository
    g.flush()
    assert heard == [("hub.test", 3), ("x.test", 1)]
    assert g.lookup(["hub.test", "x.test"]) == {"hub.test": 3, "x.test": 1}


def test_a_pump_with_a_budget_goes_on_where_it_stopped(tmp_path):
    """A budget of 0 takes one chunk of results a call; the round is counted once it is
    wholly taken, one in-degree tuple per target as with one pump, and a commit takes
    what a stopped pump left."""
    edges = [(f"s{i}.test", f"t{i % 50}.test") for i in range(20_000)]
    heard: list[tuple[str, int]] = []
    g = PLDIndegree(
        tmp_path / "g",
        ram_bytes=1 << 20,
        fsync=False,
        on_indegree=lambda plds, counts: heard.extend(zip(plds, counts)),
    )
    g.add(edges)
    g.merge_edges()
    calls = 1
    while (moved := g.pump(budget_s=0.0)) == 0:
        calls += 1
        assert calls < 1_000
    assert moved == len(edges) and calls > 2  # several chunks, counted once
    assert g.indegree.stats().pending == 50  # one tuple per target
    g.flush()
    assert sorted(heard) == sorted((f"t{i}.test", 400) for i in range(50))
    g.add([(f"u{i}.test", "t0.test") for i in range(20_000)])
    g.merge_edges()
    assert g.pump(budget_s=0.0) == 0  # stopped after its first chunk
    g.add([("late.test", "t0.test")])  # submits go on meanwhile
    g.commit()  # takes the rest of the round
    assert g.new_edges == 2 * len(edges)
    assert g.lookup(["t0.test", "t1.test"]) == {"t0.test": 20_401, "t1.test": 400}


def test_a_refresh_reports_what_pumps_queued_and_leaves_the_rest_to_them(tmp_path):
    """refresh() merges the edges queued and reports the in-degrees pumped so far; what
    that merge finds new, and a round a budgeted pump is part way through, reach the
    in-degrees by later pumps and are heard at the next refresh."""
    heard: list[tuple[str, int]] = []
    g = PLDIndegree(
        tmp_path / "g",
        ram_bytes=1 << 20,
        fsync=False,
        on_indegree=lambda plds, counts: heard.extend(zip(plds, counts)),
    )
    g.add([("a.test", "hub.test"), ("b.test", "hub.test")])
    g.merge_edges()
    assert g.pump() == 2
    g.add([("c.test", "hub.test")])
    g.refresh()
    assert heard == [("hub.test", 2)] and g.new_edges == 2
    assert g.queued_edges == 0  # merged, not yet pumped
    g.add([(f"s{i}.test", "hub.test") for i in range(20_000)])
    g.merge_edges()
    assert g.pump(budget_s=0.0) == 0  # stopped after its first chunk
    g.refresh()
    assert heard == [("hub.test", 2)] and g.new_edges == 2
    while g.pump(budget_s=0.0) == 0:
        pass
    g.refresh()
    assert heard[1:] == [("hub.test", 20_003)] and g.new_edges == 20_003


def test_a_target_of_several_rounds_is_reported_once_with_its_last_count(tmp_path):
    """Rounds of the in-degree repository not yet reported are reported together: a
    target in several of them is heard once, with the in-degree after the last."""
    heard: list[tuple[str, int]] = []
    g = PLDIndegree(
        tmp_path / "g",
        ram_bytes=2 << 20,
        fsync=False,
        on_indegree=lambda plds, counts: heard.extend(zip(plds, counts)),
    )
    for target, count in (("hub.test", 2), ("x.test", 1), ("hub.test", 1)):
        g.indegree.check_update(
            np.array([pld_key(target)], np.uint64),
            np.array([(count,)], INDEGREE_DTYPE),
            aux=[_counted((target.encode(), count))],
        )
        g.indegree.flush()  # a round each, none taken yet
    g.refresh()
    assert heard == [("x.test", 1), ("hub.test", 3)]


@pytest.mark.parametrize("first", ["pump", "refresh"])
def test_a_format_1_manifest_reports_its_pending_edges_on_open(tmp_path, first):
    """Format 1 queued one in-degree tuple per new edge with the bare target name: such
    tuples pending at a checkpoint are merged and reported (one edge each) by the first
    pump or refresh after reopening (the manager loads STAR's table in between), before
    tuples of the current format can join them."""
    g = PLDIndegree(tmp_path / "g", ram_bytes=2 << 20, fsync=False)
    g.add([("a.test", "hub.test")])
    g.flush()
    # Two edges to hub.test queued the way format 1 queued them.
    g.indegree.check_update(
        np.full(2, pld_key("hub.test"), np.uint64),
        np.ones(2, INDEGREE_DTYPE),
        aux=[b"hub.test", b"hub.test"],
    )
    manifest = g.commit()
    assert manifest.pop("format") == 2
    heard: list[tuple[str, int]] = []
    again = PLDIndegree(
        tmp_path / "g",
        ram_bytes=2 << 20,
        fsync=False,
        manifest=manifest,
        on_indegree=lambda plds, counts: heard.extend(zip(plds, counts)),
    )
    assert heard == []
    getattr(again, first)()
    assert heard == [("hub.test", 3)]
    again.add([("b.test", "hub.test"), ("b.test", "x.test")])
    again.flush()
    assert heard[1:] == [("hub.test", 4), ("x.test", 1)]


def test_an_unknown_manifest_format_is_refused(tmp_path):
    g = PLDIndegree(tmp_path / "g", ram_bytes=2 << 20, fsync=False)
    manifest = {**g.commit(), "format": 99}
    with pytest.raises(ValueError, match="format 99"):
        PLDIndegree(tmp_path / "g", ram_bytes=2 << 20, fsync=False, manifest=manifest)


def test_edges_packed_by_fetchers_count_as_added_ones(tmp_path):
    """Fetchers pack a page's edges (keys and target names); the manager concatenates
    the pages' packs. Counts must be those of the same edges given as pairs."""
    pages = [
        ("a.test", ["hub.test", "x.test"]),
        ("b.test", ["hub.test"]),
        ("a.test", ["hub.test"]),
        ("hub.test", ["a.test", "b.test", "x.test"]),
    ]
    packs = [pack_edges(source, targets) for source, targets in pages]
    assert pack_edges("a.test", []) is None
    assert packs[0] is not None
    assert packs[0].pairs() == [("a.test", "hub.test"), ("a.test", "x.test")]
    assert list(memoryview(packs[0].keys).cast("Q")) == [
        edge_key("a.test", "hub.test"),
        edge_key("a.test", "x.test"),
    ]
    packed = PLDIndegree(tmp_path / "packed", ram_bytes=2 << 20, fsync=False)
    packed.add_packed(
        b"".join(p.keys for p in packs if p),
        b"".join(p.targets for p in packs if p),
        b"".join(p.lengths for p in packs if p),
    )
    packed.add_packed(b"", b"", b"")
    pairs = PLDIndegree(tmp_path / "pairs", ram_bytes=2 << 20, fsync=False)
    pairs.add([pair for p in packs if p for pair in p.pairs()])
    names = ["hub.test", "a.test", "b.test", "x.test", "nobody.test"]
    assert (
        packed.lookup(names)
        == pairs.lookup(names)
        == {"hub.test": 2, "a.test": 1, "b.test": 1, "x.test": 2, "nobody.test": 0}
    )
    assert packed.new_edges == pairs.new_edges == 6
