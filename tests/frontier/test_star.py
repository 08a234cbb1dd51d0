"""STAR: budgets follow PLD in-degree, RAM holds only the best-linked PLDs."""

from drumbeat.frontier.pldgraph import PLDIndegree
from drumbeat.frontier.star import SeedTrust, Star, irlbot_budget, pld_hash
from drumbeat.urls import pld


def make_star(table_size: int = 100) -> Star:
    return Star(budget=irlbot_budget(10, 1000, 5), indegree_floor=5, table_size=table_size)


def test_budget_shape():
    f = irlbot_budget(10, 1000, 5)
    assert [f(d) for d in (0, 1, 5, 6, 10, 50, 499, 500, 10**6)] == [
        10,
        10,
        10,
        12,
        20,
        100,
        998,
        1000,
        1000,
    ]


def test_budgets_follow_indegree_from_the_pld_graph(tmp_path):
    star = make_star()
    g = PLDIndegree(tmp_path / "g", ram_bytes=2 << 20, fsync=False, on_indegree=star.observe)
    g.add([(f"fan{i}.test", "hub.test") for i in range(20)])
    g.add([(f"fan{i}.test", "hub.test") for i in range(20)])  # repeats count once
    g.add([("spam1.spam", "spam2.spam"), ("spam2.spam", "spam1.spam")])
    g.flush()
    assert star.indegree("hub.test") == 20
    assert star.budget("hub.test") == 40
    assert star.budget("spam1.spam") == 10  # in-degree 1: the long tail's default
    assert star.budget("never-seen.test") == 10
    g.add([(f"more{i}.test", "hub.test") for i in range(30)])
    g.flush()
    assert star.budget("hub.test") == 100  # refreshed as the in-degree grows
    plds = ["hub.test", "spam1.spam", "never-seen.test", "hub.test"]
    assert star.budgets(plds) == [star.budget(p) for p in plds] == [100, 10, 10, 100]
    assert star.budgets_by_hash(map(pld_hash, plds)) == [100, 10, 10, 100]


def test_table_keeps_the_best_linked_plds():
    star = make_star(table_size=3)
    star.observe(["a", "b", "c", "d"], [6, 50, 7, 9])
    assert len(star) == 3
    assert star.indegree("a") == 0 and star.budget("a") == 10  # evicted: smallest
    assert star.indegree("b") == 50
    assert star.budgets_by_hash(map(pld_hash, "abcd")) == [10, 100, 14, 18]
    star.observe(["a"], [60])  # a new edge brings its exact count back
    assert star.indegree("a") == 60 and len(star) == 3
    assert star.budgets_by_hash(map(pld_hash, "abcd")) == [120, 100, 10, 18]


def test_save_and_load(tmp_path):
    star = make_star()
    star.observe(["a", "b"], [6, 70])
    star.save(tmp_path)
    again = make_star()
    again.load(tmp_path)
    assert again.budget("b") == star.budget("b") == 140
    assert again.budgets_by_hash([pld_hash("a"), pld_hash("b")]) == [12, 140]


def _trust(enabled: bool = True, scoped_budget: int | None = None) -> SeedTrust:
    trust = SeedTrust(enabled=enabled, scoped_budget=scoped_budget)
    trust.set_seed_hosts(["a.uni.test", "b.uni.test", "solo.test"], pld)
    return trust


def test_seed_hosts_are_units_of_their_own_with_their_plds_budget():
    star = make_star()
    star.observe(["uni.test"], [50])  # budget 100
    trust = _trust()
    # Seed hosts of a shared PLD are their own units; a host the crawl finds in that PLD,
    # and a seed host that is its PLD, are budgeted by the PLD, as STAR alone would.
    assert [
        trust.unit(h, pld(h)) for h in ("a.uni.test", "b.uni.test", "c.uni.test", "solo.test")
    ] == ["a.uni.test", "b.uni.test", "uni.test", "solo.test"]
    units = ["a.uni.test", "uni.test", "solo.test", "other.test"]
    assert trust.budgets(units, star.budgets(units), star.budget) == [100, 100, 10, 10]
    hashes = [pld_hash(u) for u in units]
    assert trust.budgets_by_hash(hashes, star.budgets_by_hash(hashes), star.budget) == [
        100,
        100,
        10,
        10,
    ]
    star.observe(["uni.test"], [500])  # the PLD's budget, whenever asked
    assert trust.budgets(["b.uni.test"], [10], star.budget) == [1000]


def test_scoped_seeds_get_the_maximum_and_trust_off_is_pure_star():
    star = make_star()
    scoped = _trust(scoped_budget=1000)
    assert scoped.unit("solo.test", "solo.test") == "solo.test"
    units = ["a.uni.test", "uni.test", "solo.test", "other.test"]
    assert scoped.budgets(units, star.budgets(units), star.budget) == [1000, 1000, 1000, 10]
    off = _trust(enabled=False, scoped_budget=1000)
    assert off.unit("a.uni.test", "uni.test") == "uni.test" and len(off) == 0
    assert off.budgets(units, star.budgets(units), star.budget) == [10, 10, 10, 10]
    # Seeds that are their own PLDs in an unscoped crawl change nothing: no table at all.
    plain = SeedTrust(enabled=True, scoped_budget=None)
    plain.set_seed_hosts(["solo.test", "x.test"], pld)
    assert len(plain) == 0
