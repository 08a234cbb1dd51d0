"""The mypyc-compiled drumbeat.urls (setup.py) behaves as the Python module does.

The editable install the tests run on is pure Python, so this builds the compiled
module into a copy of the package, as ``pip install .`` does, and runs the tests of
what uses it (URLs, links, the fetcher) against that copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = ["test_urls.py", "parse/test_links.py", "test_fetcher.py", "queue/test_partition.py"]


def test_compiled_urls_pass_the_url_link_fetcher_and_partition_tests(tmp_path: Path) -> None:
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(
        REPO / "drumbeat",
        tmp_path / "drumbeat",
        ignore=shutil.ignore_patterns("__pycache__", "*.so"),
    )
    env = {**os.environ, "DRUMBEAT_COMPILE": "1", "PYTHONPATH": str(tmp_path)}
    build = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr

    # The check and the tests in one process: they run on the module it imported.
    # importlib mode: pytest must not put the repository (and its drumbeat) on sys.path.
    # No addopts: its pytest-xdist workers would run the tests in other processes.
    args = [
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "--import-mode=importlib",
        *(str(REPO / "tests" / name) for name in TESTS),
    ]
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import sys, pytest, drumbeat, drumbeat.urls\n"
                "assert drumbeat.compiled_modules() == ['drumbeat.urls'], drumbeat.urls.__file__\n"
                f"sys.exit(pytest.main({args!r}))"
            ),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
    assert " passed" in run.stdout
