from drumbeat.drum import Gathered


def test_parts_wait_until_the_limit_then_go_in_order_as_one_submit() -> None:
    submits: list[list[str]] = []
    gathered: Gathered[str] = Gathered(5, submits.append)
    gathered.add("a", 2)
    gathered.add("b", 2)
    assert submits == [] and gathered.items == 4
    gathered.add("c", 1)  # 5 items: the limit
    assert submits == [["a", "b", "c"]] and gathered.items == 0


def test_give_submits_what_waits_and_nothing_when_nothing_does() -> None:
    submits: list[list[str]] = []
    gathered: Gathered[str] = Gathered(100, submits.append)
    gathered.give()
    assert submits == []
    gathered.add("a", 3)
    gathered.give()
    gathered.give()
    assert submits == [["a"]] and gathered.items == 0
