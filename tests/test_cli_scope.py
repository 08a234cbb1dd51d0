"""`drumbeat crawl`'s scope flags: bad values are one line on stderr and exit 2, before
anything is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--include", "("], "setting 'include' (--include) has a bad regex '('"),
        (["--exclude", "ok", "--exclude", "[z-a"], "setting 'exclude' (--exclude) has a bad"),
        (["--blocklist", "missing.txt"], "(--blocklist): no such file"),
        (["--blocklist", "{bad}"], "bad.txt:2: bad regex '(x'"),
        (["--max-bytes-per-host", "10Q"], "--max-bytes-per-host: expected bytes"),
        (["--max-pages-per-host", "0"], "--max-pages-per-host: expected a number >= 1"),
    ],
)
def test_bad_scope_flags_are_one_line_errors(tmp_path: Path, flags: list[str], words: str):
    bad = tmp_path / "bad.txt"
    bad.write_text("ok.test\nre:(x\n")
    flags = [f.replace("{bad}", str(bad)) for f in flags]
    state = tmp_path / "state"
    proc = subprocess.run(
        [sys.executable, "-m", "drumbeat", "crawl", "--state", str(state), "a.test", *flags],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert words in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not state.exists()


def test_sizes_take_binary_units():
    from drumbeat.cli import build_parser

    def parsed(text: str) -> int:
        args = build_parser().parse_args(["crawl", "--state", "s", "--max-bytes-per-host", text])
        return int(args.max_bytes_per_host)

    assert parsed("500000") == 500_000
    assert parsed("64K") == parsed("64KiB") == parsed("64kb") == 64 << 10
    assert parsed("10M") == 10 << 20 and parsed("1G") == 1 << 30
