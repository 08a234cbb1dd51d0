"""Benchmarks: ``drumbeat bench NAME [options]`` runs ``drumbeat.bench.NAME.main(argv)``.

Benchmarks print tables of ratios against peers measured in the same run;
they are never timed unit tests.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys


def available() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``NAME args...`` to ``drumbeat.bench.NAME.main(args)``; return its exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    names = available()
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in names:
        print(f"usage: drumbeat bench {{{','.join(names)}}} [options]", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(f"drumbeat.bench.{argv[0]}")
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
