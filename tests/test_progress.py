"""drumbeat.progress: what a crawl shows of itself, here its log lines (stderr not a
terminal), on a real offline Manager."""

from __future__ import annotations

import asyncio
import io
import re

from drumbeat.progress import Progress
from drumbeat.testing import offline_manager


def _rate(line: str) -> float:
    m = re.search(r"rate=([\d,.]+)/s", line)
    assert m, line
    return float(m[1].replace(",", ""))


def test_the_first_line_counts_the_pages_since_the_start(tmp_path) -> None:
    """The first line comes interval_s after the start: its rate is the pages since
    then, not 0 for want of an earlier sample."""

    async def go() -> tuple[str, str]:
        async with offline_manager(tmp_path) as manager:
            progress = Progress(manager.settings, manager, io.StringIO())
            assert not progress.live_mode
            manager.dispatch.pages_done += 300  # as 300 fetched pages would
            await asyncio.sleep(0.05)
            first = progress.line()
            await asyncio.sleep(0.05)
            return first, progress.line()  # nothing fetched since: the same pages, later

    first, second = asyncio.run(go())
    assert "pages=300" in first and _rate(first) > 0
    assert 0 < _rate(second) < _rate(first)
