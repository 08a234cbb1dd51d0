"""``drumbeat bench freshness`` runs, reports every contender, and orders the ones the
theory orders (no timing asserted)."""

from __future__ import annotations

import json

import pytest

from drumbeat.bench import freshness

NAMES = {"drumbeat", "uniform", "proportional", "adaptive", "optimal"}


def test_reports_freshness_and_age_of_every_contender(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--pages", "300", "--sites", "5", "--days", "12", "--json"]
    assert freshness.main(args) == 0
    report = json.loads(capsys.readouterr().out)
    fresh, age = report["freshness"], report["age"]
    assert set(fresh) == NAMES | {"optimal_analytic"} and set(age) == NAMES
    assert all(0 <= fresh[n] <= 1 and age[n] >= 0 for n in NAMES)
    assert all(v == pytest.approx(12.0, abs=0.1) for v in report["visits_per_page"].values())
    assert all(len(report["learning"][n]) == freshness.WINDOWS for n in NAMES)
    # Cho & Garcia-Molina: the optimum beats uniform, which beats proportional
    assert fresh["optimal"] > fresh["uniform"] > fresh["proportional"]
    assert fresh["optimal"] == pytest.approx(fresh["optimal_analytic"], abs=0.03)


def test_table_and_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert freshness.main(["--pages", "100", "--sites", "3", "--days", "3"]) == 0
    assert "drumbeat within 5 % of the optimum" in capsys.readouterr().out
    assert freshness.main(["--pages", "5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error" in err
