"""What importing drumbeat sets up for every process (drumbeat/__init__.py)."""

from __future__ import annotations

import os
import subprocess
import sys

# A child that imports drumbeat, then numpy, and says what it runs with.
_PROBE = (
    "import os, drumbeat, numpy; "
    "print(os.environ.get('OPENBLAS_NUM_THREADS'), len(os.listdir('/proc/self/task')))"
)


def _probe(env: dict[str, str]) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0], int(out[1])


def test_numpy_starts_no_blas_threads_in_a_drumbeat_process() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    assert _probe(env) == ("1", 1)  # the main thread alone


def test_a_blas_thread_count_given_in_the_environment_wins() -> None:
    setting, _ = _probe({**os.environ, "OPENBLAS_NUM_THREADS": "2"})
    assert setting == "2"
