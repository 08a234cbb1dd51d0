"""drumbeat: a polite, crash-safe web crawler whose memory is fixed by configuration.

Floors, from the bottom; a module imports only from its own floor or those below it
(pyproject.toml's import-linter contracts check this in ``scripts/check``):

1. runtime helpers  ``runtime`` (malloc choice, GC tuning, pacing, long-turn recording),
                    ``urls``, ``settings``
2. storage and      ``drum`` (bucketed disk repositories), ``store`` (WARC, crawl log,
   transport        durable files), ``queue`` (task hand-off), ``checkpoint``,
                    ``stats`` (the cluster's counters in Redis)
3. net              ``fetch`` (DNS cache, address guard, the HTTP clients)
4. crawl logic      ``frontier`` (URL-seen, STAR, BEAST, robots, QR, politeness, scope,
                    crawl order), ``parse`` (links, encodings, sitemaps, feeds, simhash),
                    ``focus`` (a focused crawl's relevance functions); above them
                    ``revisit`` (change rates, the revisit schedule and its history)
5. roles            ``manager`` (owns the crawl state), ``fetcher`` (fetch, archive, parse);
                    below them ``fetcher_links`` (a fetched body's links, packed)
6. faces            ``web`` (the dashboard, the control API and /metrics over a manager;
                    below the faces that start it), ``standalone`` (one manager and its
                    fetcher processes on this machine), ``worker`` (a fetcher process),
                    ``progress``, ``testing``, ``bench``, ``cli``

``simweb`` is a synthetic web for tests, benchmarks and the demo; it imports nothing of
the crawler.
"""

import os

__version__ = "0.1.0"

# numpy's OpenBLAS starts a thread for each core when it is imported, and each spins on
# its core for a while before it sleeps: in the manager, in every fetcher process and in
# every CLI call. drumbeat's matrix products are small; one thread does them. Set before
# any drumbeat module imports numpy; a value given in the environment wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def compiled_modules() -> list[str]:
    """The drumbeat modules this process runs as compiled extensions, sorted (setup.py
    compiles drumbeat.urls with mypyc when it can; an editable install is pure Python)."""
    import sys
    from importlib.machinery import EXTENSION_SUFFIXES

    suffixes = tuple(EXTENSION_SUFFIXES)
    return sorted(
        name
        for name, module in list(sys.modules.items())
        if name.startswith("drumbeat.")
        and not name.endswith("__mypyc")  # its runtime
        and (getattr(module, "__file__", None) or "").endswith(suffixes)
    )
