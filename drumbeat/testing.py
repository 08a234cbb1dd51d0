"""Helpers for testing drumbeat's parts, as ``trio.testing`` is for trio's.

* :class:`FakeClock`: the one clock tests drive by hand; every part that keeps time takes a
  ``clock`` callable, so a test jumps time instead of sleeping, exactly and fast.
* :func:`offline_manager`: a real Manager driven by hand, for tests and ``bench frontier``'s
  RSS runs: its state and crawl log under a work dir, a loopback SimDNS that answers
  127.1.0.1 for every name, a LocalTaskQueue. Nothing is fetched; robots answers are
  recorded by the caller.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from drumbeat.manager import Manager
from drumbeat.queue.local import LocalTaskQueue
from drumbeat.settings import Settings, build
from drumbeat.simweb.dns import SimDNS
from drumbeat.store.crawllog import CrawlLog

ANSWER = "127.1.0.1"  # what the responder answers for any name (loopback only)


class FakeClock:
    """A monotonic clock that moves only when a test moves it: call it for the time,
    :meth:`advance` it, or set :attr:`now` (never backwards: the parts it drives assume a
    monotonic clock)."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start

    def __call__(self) -> float:
        return self._now

    @property
    def now(self) -> float:
        return self._now

    @now.setter
    def now(self, value: float) -> None:
        if value < self._now:
            raise ValueError(f"a monotonic clock does not go back ({value} < {self._now})")
        self._now = value

    def advance(self, seconds: float) -> float:
        """Move the clock ``seconds`` forward; returns the new time."""
        self.now = self._now + seconds
        return self._now


@asynccontextmanager
async def offline_manager(
    work: Path, *, clock: Callable[[], float] = time.monotonic, **changes: object
) -> AsyncIterator[Manager]:
    """A restored Manager on ``work``/state with ``changes`` to the default Settings;
    everything it opened (DNS lookups under way, resolver, responder, crawl log) is
    closed on exit."""
    dns = SimDNS({}, fallback=lambda name: ANSWER)
    await dns.start("127.0.0.1", 0)
    settings = build(
        Settings(),
        {
            "state_dir": str(work / "state"),
            "dns_server": dns.address,
            "allow_loopback": True,
            **changes,
        },
    )
    crawl_log = CrawlLog(work / "crawl.log")
    manager = Manager(settings, LocalTaskQueue(), crawl_log, clock=clock)
    try:
        manager.restore()
        yield manager
    finally:
        for task in list(manager.gate.resolving.values()):
            task.cancel()
        await asyncio.gather(*manager.gate.resolving.values(), return_exceptions=True)
        await manager.dns.close()
        dns.close()
        crawl_log.close()
