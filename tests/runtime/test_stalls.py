"""The manager's long-turn recorder (drumbeat.runtime.stalls)."""

from drumbeat.runtime.stalls import Stalls


def test_short_turns_are_not_counted():
    stalls = Stalls(threshold_s=0.1)
    assert not stalls.turn(1.0, {"place": 0.04, "feed": 0.05})
    assert stalls.as_dict() == {
        "threshold_s": 0.1,
        "turns": 0,
        "seconds": 0.0,
        "by_part_s": {},
        "worst": [],
    }


def test_a_turn_counts_by_its_total_and_names_its_largest_part():
    stalls = Stalls(threshold_s=0.1)
    # No part reaches the threshold alone; together they do.
    assert stalls.turn(5.0, {"place": 0.06, "merge": 0.07, "feed": 0.0})
    assert stalls.turn(9.0, {"place": 0.3, "merge": 0.0, "feed": 0.01})
    d = stalls.as_dict()
    assert d["turns"] == 2 and d["seconds"] == 0.44
    assert d["by_part_s"] == {"place": 0.36, "merge": 0.07, "feed": 0.01}
    assert d["worst"] == [
        {"s": 0.31, "at_s": 9.0, "part": "place"},
        {"s": 0.13, "at_s": 5.0, "part": "merge"},
    ]


def test_only_the_worst_turns_are_kept_longest_first():
    stalls = Stalls(threshold_s=0.1, keep=3)
    for i in range(100):
        stalls.turn(float(i), {"collect": 0.1 + (i * 37 % 100) / 1000})
    worst = stalls.worst()
    assert [round(s, 3) for s, _, _ in worst] == [0.199, 0.198, 0.197]
    assert stalls.count == 100 and len(worst) == 3
