"""Live progress for a running crawl: a rich panel on a terminal, periodic lines otherwise."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

if TYPE_CHECKING:
    from drumbeat.manager import Manager
    from drumbeat.settings import Settings

RATE_WINDOW_S = 5.0


class Progress:
    def __init__(self, settings: Settings, manager: Manager, stream: TextIO) -> None:
        self.manager = manager
        self.console = Console(file=stream)
        self.live_mode = settings.progress if settings.progress is not None else stream.isatty()
        self.interval_s = 0.5 if self.live_mode else settings.progress_interval_s
        # The start is the first sample: the first line's rate counts from it (a rate
        # needs two samples, and a line is printed only every interval_s).
        self._samples: deque[tuple[float, int]] = deque([(time.monotonic(), manager.pages_done)])

    def _rate(self) -> float:
        now, done = time.monotonic(), self.manager.pages_done
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[0][0] > RATE_WINDOW_S:
            self._samples.popleft()
        t0, d0 = self._samples[0]
        return (done - d0) / (now - t0) if now > t0 else 0.0

    def _top_errors(self) -> list[tuple[str, int]]:
        c = self.manager.counters
        kinds = {
            k: v for k, v in c.items() if k.startswith(("error.", "dropped.", "hosts_failed."))
        }
        return sorted(kinds.items(), key=lambda kv: -kv[1])[:6]

    def _errors(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self._top_errors()) or "none"

    def render(self) -> Table:
        s = self.manager.stats()
        table = Table(title="drumbeat crawl", show_header=False, expand=False)
        table.add_column(style="bold")
        table.add_column(justify="right")
        table.add_row("elapsed", f"{s.elapsed_s:,.0f} s")
        if self.manager.controls.paused:
            table.add_row("state", "PAUSED (drumbeat ctl resume)")
        table.add_row("pages/s (last 5 s)", f"{self._rate():,.1f}")
        table.add_row("pages fetched", f"{s.pages_done:,}")
        table.add_row("queued (in RAM)", f"{s.queued:,} ({s.queued_ram:,})")
        table.add_row("in flight", f"{s.in_flight:,}")
        table.add_row("hosts (active)", f"{s.hosts:,}")
        table.add_row("URLs seen", f"{s.seen:,}")
        table.add_row("robots fetched", f"{s.counters.get('robots_fetches', 0):,}")
        errors = self._top_errors()
        table.add_row("errors by kind", "none" if not errors else "")
        for kind, n in errors:
            table.add_row(f"  {kind}", f"{n:,}")
        return table

    def line(self) -> str:
        s = self.manager.stats()
        return (
            f"[{s.elapsed_s:,.0f}s] pages={s.pages_done:,} rate={self._rate():,.1f}/s "
            f"queued={s.queued:,} ram={s.queued_ram:,} in_flight={s.in_flight} "
            f"hosts={s.hosts:,} seen={s.seen:,} errors: {self._errors()}"
            + (" PAUSED" if self.manager.controls.paused else "")
        )

    async def run(self) -> None:
        if not self.live_mode:
            while True:
                await asyncio.sleep(self.interval_s)
                self.console.print(self.line(), highlight=False, soft_wrap=True)
        with Live(
            self.render(), console=self.console, refresh_per_second=4, transient=True
        ) as live:
            while True:
                await asyncio.sleep(self.interval_s)
                live.update(self.render())

    def final(self) -> None:
        if self.live_mode:
            self.console.print(self.render())
