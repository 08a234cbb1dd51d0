"""Tests mirror the package: tests/<package>/ holds the unit tests of drumbeat.<package>,
run against real servers on loopback. tests/e2e/ holds whole crawls and crash tests,
marked ``e2e`` so that ``pytest -m "not e2e"`` runs the rest alone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from drumbeat.testing import RedisServer

E2E = Path(__file__).parent / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if E2E in item.path.parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A real redis-server on loopback, its files under this test's tmp_path."""
    with RedisServer(tmp_path / "redis") as server:
        yield server
