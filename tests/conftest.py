"""Tests mirror the package: tests/<package>/ holds the unit tests of drumbeat.<package>,
run against real servers on loopback. tests/e2e/ holds whole crawls and crash tests,
marked ``e2e`` so that ``pytest -m "not e2e"`` runs the rest alone."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from drumbeat.testing import RedisServer

HERE = Path(__file__).parent
E2E = HERE / "e2e"
# The longest tests besides the crawls: a mypyc build, and the benchmarks' runs.
LONG = (E2E, HERE / "test_compiled.py", HERE / "bench")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if E2E in item.path.parents:
            item.add_marker(pytest.mark.e2e)

    # pytest-xdist hands tests out in this order: the long ones first, so that none of
    # them starts last, and the ``alone`` tests at the end, when the others are done.
    # A stable sort: modules stay together (their module-scoped fixtures are made once).
    def turn(item: pytest.Item) -> tuple[bool, int]:
        long = [i for i, p in enumerate(LONG) if p == item.path or p in item.path.parents]
        return item.get_closest_marker("alone") is not None, long[0] if long else len(LONG)

    items.sort(key=turn)


_turns: list[int] = []  # this pytest-xdist worker's descriptor of the run's lock file


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    """Under pytest-xdist, a test marked ``alone`` runs while no other test does: every
    test (its fixtures' setup and teardown included) holds a shared lock on one file of
    the run, an ``alone`` test the exclusive one. Without workers, nothing is locked."""
    workerinput = getattr(item.config, "workerinput", None)
    if workerinput is None:
        return (yield)
    if not _turns:
        # The run's folder: every worker's basetemp is a folder in it (pytest-xdist).
        run = Path(item.config.option.basetemp).parent
        _turns.append(os.open(run / "alone.lock", os.O_RDWR | os.O_CREAT, 0o644))
    fd = _turns[0]
    fcntl.flock(fd, fcntl.LOCK_EX if item.get_closest_marker("alone") else fcntl.LOCK_SH)
    try:
        return (yield)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A real redis-server on loopback, its files under this test's tmp_path."""
    with RedisServer(tmp_path / "redis") as server:
        yield server
