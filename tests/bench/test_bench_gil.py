"""``drumbeat bench gil`` runs and reports each switch interval (no timing asserted)."""

from __future__ import annotations

import json
import sys

import pytest

from drumbeat.bench import gil
from drumbeat.standalone import MANAGER_SWITCH_INTERVAL_S


def test_reports_the_loop_alone_and_beside_a_thread_at_each_interval(
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = sys.getswitchinterval()
    assert gil.main(["--seconds", "0.1", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert [r["switch_interval_s"] for r in results] == [0.005, 0.001, MANAGER_SWITCH_INTERVAL_S]
    for r in results:
        assert r["loop_alone_per_s"] > 0 and r["loop_beside_thread_per_s"] > 0
        assert r["thread_rows_per_s"] > 0
        assert r["share_of_alone"] == pytest.approx(
            r["loop_beside_thread_per_s"] / r["loop_alone_per_s"]
        )
    assert sys.getswitchinterval() == before  # the process's own setting is put back


def test_bad_seconds_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        gil.main(["--seconds", "0"])
    assert stop.value.code == 2
    assert "--seconds must be > 0" in capsys.readouterr().err
