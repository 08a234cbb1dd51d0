"""Tests mirror the package: tests/<package>/ holds the unit tests of drumbeat.<package>,
run against real servers on loopback. tests/e2e/ holds whole crawls and crash tests,
marked ``e2e`` so that ``pytest -m "not e2e"`` runs the rest alone."""

from __future__ import annotations

from pathlib import Path

import pytest

E2E = Path(__file__).parent / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if E2E in item.path.parents:
            item.add_marker(pytest.mark.e2e)
