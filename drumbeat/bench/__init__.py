r"""Benchmarks: ``drumbeat bench NAME [options]`` runs ``drumbeat.bench.NAME.main(argv)``.

Benchmarks print tables of ratios against peers measured in the same run;
they are never timed unit tests. A module of this package is a benchmark when its
docstring begins ``\`\`drumbeat bench NAME\`\`: what it measures``; that line is its
entry in ``drumbeat bench --help``. Other modules (helpers) are not listed.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import sys
from pathlib import Path


def benchmarks() -> dict[str, str]:
    """Benchmark name -> what it measures, from each module's docstring (not imported)."""
    found: dict[str, str] = {}
    for m in pkgutil.iter_modules(__path__):
        if m.name.startswith("_"):
            continue
        source = Path(__path__[0], f"{m.name}.py").read_text(encoding="utf-8")
        doc = ast.get_docstring(ast.parse(source)) or ""
        head = f"``drumbeat bench {m.name}``:"
        if doc.startswith(head):
            first = doc[len(head) :].split("\n\n", 1)[0]
            # A closing aside (why the benchmark exists) stays in the module's docstring.
            found[m.name] = re.sub(r"\s*\([^()]*\)\.?$", "", " ".join(first.split()))
    return dict(sorted(found.items()))


def available() -> list[str]:
    return list(benchmarks())


def usage() -> str:
    rows = benchmarks()
    width = max(map(len, rows), default=0)
    lines = [f"  {name:<{width}}  {what}" for name, what in rows.items()]
    return (
        "usage: drumbeat bench NAME [options]   (drumbeat bench NAME --help for its options)\n"
        "\nbenchmarks:\n" + "\n".join(lines) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``NAME args...`` to ``drumbeat.bench.NAME.main(args)``; return its exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    names = available()
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] not in names:
        print(
            f"drumbeat bench: error: no benchmark {argv[0]!r}\n\n{usage()}", end="", file=sys.stderr
        )
        return 2
    module = importlib.import_module(f"drumbeat.bench.{argv[0]}")
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
