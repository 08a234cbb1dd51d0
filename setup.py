"""drumbeat's build: pure Python, plus ``drumbeat.urls`` compiled by mypyc when it can be.

``drumbeat.urls`` joins and normalizes every link of every page a fetcher parses
(``normalize_links``) and reduces the links to the PLDs they point to (``pld_targets``):
compiled, the same code takes about half the time, and it behaves the same
(tests/test_compiled.py runs the URL, link and fetcher tests against it). Other hot
modules were measured and are not compiled: they are mostly calls into C libraries
(docs/benchmarks.md, "Compiling with mypyc").

``DRUMBEAT_COMPILE`` chooses: unset, compile when mypy (a build requirement) and a C
compiler are at hand, else install pure Python with a warning; ``0``, never; ``1``,
always (the build fails when it cannot). Editable installs (``pip install -e``) are
not compiled unless it is ``1``: the extension would sit in the source tree beside
urls.py and shadow every later edit of it.
"""

from __future__ import annotations

import os
import sys

from setuptools import setup

COMPILED = ["drumbeat/urls.py"]
# Third-party modules without type information are Any; modules of drumbeat that the
# compiled ones import are type-checked but stay Python. The build ignores pyproject.toml's
# [tool.mypy] (no config file): those are scripts/check's rules, for an environment with
# every dependency installed, and the isolated build has none of them (their Any would
# fail the strict rules, and the build would fall back to pure Python).
MYPY_FLAGS = [
    "--config-file",
    os.devnull,
    "--ignore-missing-imports",
    "--follow-imports=silent",
    "--disable-error-code=import-untyped",
]


def compiled_extensions() -> list:
    mode = os.environ.get("DRUMBEAT_COMPILE", "")
    if mode == "0" or (mode != "1" and "editable_wheel" in sys.argv):
        return []
    try:
        from mypyc.build import mypycify

        extensions = mypycify([*MYPY_FLAGS, *COMPILED])
    except (Exception, SystemExit) as e:  # mypyc exits on a type error
        if mode == "1":
            raise
        print(
            f"warning: drumbeat is installed as pure Python, not compiled: {e!r}", file=sys.stderr
        )
        return []
    for extension in extensions:
        # mypyc builds with -Werror; a new compiler's new warning must not fail a build.
        extension.extra_compile_args.append("-Wno-error")
        # Without a C compiler setuptools warns and installs the pure module instead.
        extension.optional = mode != "1"
    return extensions


setup(ext_modules=compiled_extensions())
