"""`drumbeat crawl --revisit [--revisit-share F]`: the flags, their help and one-line
errors for bad values (the flag's and the config file's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from drumbeat.cli import build_parser, settings_from_args
from drumbeat.settings import Settings, SettingsError


def _crawl(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "drumbeat", "crawl", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def test_the_flags_set_the_settings_and_default_off() -> None:
    parser = build_parser()
    off = settings_from_args(parser.parse_args(["crawl", "http://a.test/", "--state", "s"]))
    assert off.revisit is False and off.revisit_share == Settings().revisit_share
    on = settings_from_args(
        parser.parse_args(
            ["crawl", "http://a.test/", "--state", "s", "--revisit", "--revisit-share", "0.5"]
        )
    )
    assert on.revisit is True and on.revisit_share == 0.5


def test_help_names_the_flags() -> None:
    out = _crawl("--help").stdout
    assert "--revisit" in out and "--revisit-share F" in out and "never finishes" in out


@pytest.mark.parametrize("value", ["0", "1.5", "x", "nan"])
def test_a_bad_share_is_a_one_line_error(tmp_path: Path, value: str) -> None:
    proc = _crawl("http://a.test/", "--state", str(tmp_path / "s"), "--revisit-share", value)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert "--revisit-share" in lines[-1] and "Traceback" not in proc.stderr


def test_bad_settings_are_refused() -> None:
    with pytest.raises(SettingsError, match="revisit_share"):
        Settings().with_changes(revisit_share=0.0)
    with pytest.raises(SettingsError, match="revisit_min_interval_s"):
        Settings().with_changes(revisit_min_interval_s=10.0, revisit_max_interval_s=5.0)
