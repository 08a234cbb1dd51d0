"""Which modules a statement loads, run in a fresh interpreter: for the tests of what a
command imports before it does its work (a crawl's start, ``drumbeat ctl``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence


def loaded_by(statement: str, modules: Sequence[str]) -> list[str]:
    """Those of ``modules`` that are in ``sys.modules`` after ``statement`` runs."""
    probe = f"import sys; {statement}; print(*[m for m in {list(modules)!r} if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return out.split()
