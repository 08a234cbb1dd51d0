"""drumbeat: a polite, crash-safe web crawler whose memory is fixed by configuration.

Layers (imports only go down; nothing below ``manager``/``fetcher`` imports ``cli``):

1. foundations  ``urls``, ``settings``, ``stats``, ``drum``, ``store``, ``queue``, ``simweb``
2. net          ``fetch`` (DNS cache, address guard, HTTP client)
3. crawl logic  ``frontier`` (URL-seen, STAR, BEAST, robots, QR, politeness), ``parse``
4. roles        ``manager`` (owns crawl state), ``fetcher`` (stateless fetch + parse + archive)
5. faces        ``cli``

``simweb`` is a synthetic web for tests, benchmarks and the demo; it imports nothing
of the crawler.
"""

__version__ = "0.1.0"


def compiled_modules() -> list[str]:
    """The drumbeat modules this process runs as compiled extensions, sorted (setup.py
    compiles drumbeat.urls with mypyc when it can; an editable install is pure Python)."""
    import sys
    from importlib.machinery import EXTENSION_SUFFIXES

    suffixes = tuple(EXTENSION_SUFFIXES)
    return sorted(name for name, module in list(sys.modules.items())
                  if name.startswith("drumbeat.") and not name.endswith("__mypyc")  # its runtime
                  and (getattr(module, "__file__", None) or "").endswith(suffixes))
