"""robots.txt groups are matched on the crawler's product token (RFC 9309 §2.2.1), not on
the whole User-Agent header: RobotsEntry on its own, then a crawl against real servers on
loopback that serve robots.txt."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aiohttp import web

from drumbeat.frontier.robots import RULES, RobotsEntry, _parse, select_group
from drumbeat.settings import DEFAULT_USER_AGENT, Settings, SettingsError, build

# Groups named after words of the default User-Agent, and a prefix of the token.
NOT_OURS = """\
User-agent: github
User-agent: contact
User-agent: crawler
User-agent: beat
User-agent: drum
User-agent: set
Disallow: /

User-agent: *
Disallow: /star-only
"""
OURS_OVER_STAR = """\
User-agent: *
Disallow: /

# the version is no part of the product token
User-agent: DrumBeat/2.0
Disallow: /secret
Crawl-delay: 0.25

User-agent: examplebot
Disallow: /a
"""


def _entry(text: str, robots_agent: str = "drumbeat") -> RobotsEntry:
    return RobotsEntry("http://h.test", RULES, text, 0.0, 1.0, 0, _parse(text, robots_agent))


def _allowed(entry: RobotsEntry, *paths: str) -> set[str]:
    # The manager passes its User-Agent header; it must not change which group applies.
    return {p for p in paths if entry.allows(f"http://h.test{p}")}


PATHS = ("/", "/a", "/secret", "/star-only")


def test_groups_named_after_words_of_the_user_agent_do_not_apply() -> None:
    assert _allowed(_entry(NOT_OURS), *PATHS) == {"/", "/a", "/secret"}


def test_the_group_naming_the_token_applies_over_star_case_insensitively() -> None:
    entry = _entry(OURS_OVER_STAR)
    assert _allowed(entry, *PATHS) == {"/", "/a", "/star-only"}
    assert entry.crawl_delay() == 0.25


def test_a_custom_token_applies() -> None:
    assert _allowed(_entry(OURS_OVER_STAR, "ExampleBot"), *PATHS) == {"/", "/secret", "/star-only"}
    # No group names it: the "*" group applies.
    assert _allowed(_entry(OURS_OVER_STAR, "other_bot"), *PATHS) == set()
    assert _allowed(_entry(NOT_OURS, "github"), *PATHS) == set()


def test_groups_naming_the_token_are_combined_and_rules_before_any_group_ignored() -> None:
    text = (
        "Disallow: /a\n"
        "User-agent: drumbeat\nSitemap: http://h.test/s.xml\nuser agent: other\n"
        "Disallow: /secret\n"
        "User-agent: *\nDisallow: /\n"
        "useragent: DRUMBEAT # a comment\nDisallow: /star-only\n"
    )
    assert _allowed(_entry(text), *PATHS) == {"/", "/a"}
    assert (
        select_group(text, "drumbeat") == "User-agent: *\nDisallow: /secret\nDisallow: /star-only\n"
    )


def test_a_group_naming_the_token_without_rules_allows_everything() -> None:
    assert _allowed(_entry("User-agent: *\nDisallow: /\nUser-agent: drumbeat\n"), *PATHS) == set(
        PATHS
    )


def test_the_setting_is_a_product_token() -> None:
    assert Settings().robots_agent == "drumbeat"
    assert DEFAULT_USER_AGENT.startswith(Settings().robots_agent + "/")
    assert build(None, {"robots_agent": "My_Bot-x"}).robots_agent == "My_Bot-x"
    for bad in ("", "drumbeat/1.0", "drum beat", "bot2", "*"):
        with pytest.raises(SettingsError, match="robots_agent.*product token"):
            build(None, {"robots_agent": bad})


# -- a crawl against servers on loopback ---------------------------------------------------


@contextmanager
def _sites(robots: list[str]) -> Iterator[tuple[list[str], list[list[str]]]]:
    """One aiohttp server on loopback per robots.txt; yields their origins and the paths
    each was asked for."""
    asked: list[list[str]] = [[] for _ in robots]
    loop = asyncio.new_event_loop()
    origins: list[str] = []

    def app(i: int) -> web.Application:
        async def handle(request: web.Request) -> web.Response:
            asked[i].append(request.path)
            if request.path == "/robots.txt":
                return web.Response(text=robots[i])
            links = "".join(f'<a href="{p}">{p}</a>' for p in PATHS)
            return web.Response(text=f"<html><body>{links}</body></html>", content_type="text/html")

        a = web.Application()
        a.router.add_get("/{tail:.*}", handle)
        return a

    async def start() -> list[web.AppRunner]:
        runners = []
        for i in range(len(robots)):
            runner = web.AppRunner(app(i), shutdown_timeout=1)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            origins.append(f"http://127.0.0.1:{port}")
            runners.append(runner)
        return runners

    runners = loop.run_until_complete(start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield origins, asked
    finally:

        async def stop() -> None:
            for r in runners:
                await r.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@pytest.mark.parametrize(
    "robots_agent, expected",
    [
        (None, [{"/", "/a", "/secret"}, {"/", "/a", "/star-only"}]),
        ("examplebot", [{"/", "/a", "/secret"}, {"/", "/secret", "/star-only"}]),
    ],
)
def test_a_crawl_obeys_the_group_of_its_product_token(tmp_path: Path, robots_agent, expected):
    with _sites([NOT_OURS, OURS_OVER_STAR]) as (origins, asked):
        config = tmp_path / "crawl.toml"
        config.write_text("" if robots_agent is None else f'robots_agent = "{robots_agent}"\n')
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "drumbeat",
                "crawl",
                *(o + "/" for o in origins),
                "--state",
                str(tmp_path / "state"),
                "--config",
                str(config),
                "--allow-loopback",
                "--host-delay",
                "0",
                "--ip-delay",
                "0",
                "--fetchers",
                "0",
                "--max-time",
                "60",
                "--no-progress",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert "crawl stopped (done)" in proc.stderr
        for got, want in zip(asked, expected):
            assert got[0] == "/robots.txt"
            assert set(got[1:]) == want
