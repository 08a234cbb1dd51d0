"""A standalone crawl's start (drumbeat/standalone.py): what the manager loads before its
fetcher processes are started."""

from __future__ import annotations

from tests.imports import loaded_by

# Modules the manager needs only once its fetcher processes are started (they import
# theirs meanwhile), or never in a standalone crawl (redis-py).
_LATER = ("drumbeat.manager", "drumbeat.progress", "drumbeat.web.server", "aiohttp", "redis")


def test_the_crawl_module_leaves_the_managers_modules_until_the_fetchers_start() -> None:
    assert loaded_by("import drumbeat.standalone", _LATER) == []


def test_the_managers_modules_load_no_redis_client() -> None:
    loaded = loaded_by("import drumbeat.standalone, drumbeat.manager, drumbeat.web.server", _LATER)
    assert "drumbeat.manager" in loaded  # the probe sees what is imported
    assert "redis" not in loaded
