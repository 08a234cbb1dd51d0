"""STAR: budgets follow PLD in-degree, RAM holds only the best-linked PLDs."""

from drumbeat.frontier.pldgraph import PLDIndegree
from drumbeat.frontier.star import Star, irlbot_budget, pld_hash


def make_star(table_size: int = 100) -> Star:
    return Star(budget=irlbot_budget(10, 1000, 5), indegree_floor=5, table_size=table_size)


def test_budget_shape():
    f = irlbot_budget(10, 1000, 5)
    assert [f(d) for d in (0, 1, 5, 6, 10, 50, 499, 500, 10**6)] == \
        [10, 10, 10, 12, 20, 100, 998, 1000, 1000]


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
