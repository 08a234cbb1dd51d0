"""End-to-end: the dashboard in a real headless Chromium during a simweb crawl.

The page is loaded from a `drumbeat crawl --web` subprocess and driven over CDP
(tests/web/chromium.py): the page count it shows rises, its charts and tables fill,
the host search answers, pause and resume work from the page with the token, no
console error or uncaught exception happens, it requests nothing from another origin,
and a screenshot is saved under the
test's tmp_path (and to $DRUMBEAT_DASHBOARD_PNG when set, as docs/dashboard.png is
made).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from drumbeat.simweb.model import SimWebConfig
from drumbeat.simweb.server import run_in_thread
from tests.web.chromium import Page, chromium, find_chromium
from tests.web.test_web_crawl import crawl_cmd, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        find_chromium() is None,
        reason="needs Debian's chromium (scripts/test installs it: apt-get install chromium)",
    ),
]


STATES = {
    "blocked",
    "unknown",
    "resolving",
    "robots",
    "in_flight",
    "backed_off",
    "waiting",
    "waiting_for_ip",
    "paused",
    "idle",
    "ready",
}


async def until(page: Page, expression: str, timeout_s: float, what: str) -> object:
    """Poll a JavaScript expression until it is truthy."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = await page.evaluate(expression)
        if value:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} ({expression})")


def shown_pages(text: str) -> float:
    """The figure the page shows, e.g. '1234' or '12.34 k'."""
    number, _, unit = text.partition(" ")
    return float(number) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[unit]


async def drive(page: Page, base: str, token: str, shot: Path) -> None:
    await page.call("Page.navigate", url=base + "/")
    await until(page, "document.readyState === 'complete'", 30, "the page to load")
    first = await until(
        page,
        "(() => { const t = document.getElementById('pages-done').textContent;"
        " return t !== '–' && t !== '0' ? t : null })()",
        30,
        "a page count",
    )
    assert isinstance(first, str)
    later = await until(
        page,
        f"(() => {{ const t = document.getElementById('pages-done').textContent;"
        f" return t !== {json.dumps(first)} ? t : null }})()",
        30,
        "the page count to change",
    )
    assert isinstance(later, str) and shown_pages(later) > shown_pages(first)
    assert await page.evaluate("document.getElementById('state').textContent") == "running"
    # The tables fill from the snapshots: queues, the DRUMs' cost model, hosts.
    assert await page.evaluate("document.querySelectorAll('#queues tr').length") >= 6
    drums = await page.evaluate(
        "[...document.querySelectorAll('#drums tr')].map(r => r.cells[0].textContent)"
    )
    assert "urlseen" in drums
    await until(
        page,
        "(() => { const r = document.querySelectorAll('#top-hosts tr');"
        " return r.length > 1 && r[1].cells.length > 1 })()",
        15,
        "top hosts",
    )
    # The history behind the charts fills as the manager's loop samples its counters.
    await until(
        page,
        "fetch('/api/history?span=hour').then(r => r.json())"
        ".then(d => d.series.pages.reduce((a, b) => a + b, 0) > 0)",
        15,
        "pages in the history",
    )

    # simweb's robots.txt files disallow some pages: their drops are listed by URL.
    await until(
        page,
        "[...document.querySelectorAll('#recent-errors td')]"
        ".some(td => td.textContent.startsWith('http://'))",
        15,
        "a recent drop's URL",
    )

    # The host search answers "why (not) fetching" for a host of the top list.
    host = await page.evaluate("document.querySelector('#top-hosts tr + tr td').textContent")
    await page.evaluate(
        f"document.getElementById('host-name').value = {json.dumps(host)};"
        " document.querySelector('#host-form button').click()"
    )
    answer = await until(
        page,
        "(() => { const r = [...document.querySelectorAll('#host-answer tr')];"
        " const s = r.find(x => x.cells[0].textContent === 'state');"
        " return s ? s.cells[1].textContent : null })()",
        10,
        "the host's answer",
    )
    # A host of the (up to 5 s old) list may have left RAM since: any state is an answer.
    assert answer in STATES

    # Pause and resume from the page, with the token.
    await page.evaluate(
        f"document.getElementById('token').value = {json.dumps(token)};"
        " document.getElementById('token-save').click();"
        " document.getElementById('pause').click()"
    )
    await until(page, "document.getElementById('state').textContent === 'paused'", 10, "paused")
    await page.evaluate("document.getElementById('resume').click()")
    await until(page, "document.getElementById('state').textContent === 'running'", 10, "running")
    if os.environ.get("DRUMBEAT_DASHBOARD_PNG"):
        await asyncio.sleep(20)  # the README's picture: some history in the charts
    await page.screenshot(shot)


@pytest.mark.alone
def test_dashboard_in_headless_chromium(tmp_path: Path) -> None:
    config = SimWebConfig(seed=5, hosts=12, ips=4, pages_per_host=400)
    state = tmp_path / "state"
    shot = tmp_path / "dashboard.png"
    with run_in_thread(config) as web:
        proc = subprocess.Popen(
            crawl_cmd(web, state, "--web", "127.0.0.1:0", "--max-time", "90"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            doc = wait_for(
                lambda: (
                    (state / "web.json").exists() and json.loads((state / "web.json").read_text())
                ),
                30,
                "web.json",
            )
            token = (state / "web.token").read_text().strip()

            async def main() -> tuple[list[dict[str, object]], list[str]]:
                async with chromium(tmp_path / "profile") as page:
                    await drive(page, doc["url"], token, shot)
                    return page.errors(), page.requested()

            errors, requested = asyncio.run(main())
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    assert errors == []
    # Nothing but this server (and the page's own data: URLs).
    assert requested and all(
        u.startswith((doc["url"] + "/", "data:", "about:")) for u in requested
    ), requested
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    copy_to = os.environ.get("DRUMBEAT_DASHBOARD_PNG")
    if copy_to:
        shutil.copyfile(shot, copy_to)
