"""``/api/status``: what the crawl is doing, in one JSON document."""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drumbeat.manager import Manager

RATE_WINDOWS_S = (5.0, 60.0)


def queued_by_place(m: Manager) -> dict[str, int]:
    """URLs waiting, by where they wait (the RAM scheduler, BEAST's disk queues, QR...)."""
    st, gate = m.stores, m.gate
    return {
        "ram": m.scheduler.queued_urls,
        "to_route": len(gate.to_route),
        "robots_check": gate.checking,
        "beast": len(st.beast),
        "qr": len(st.qr),
        "qr_retry": len(st.qr_retry),
        "robots_todo": len(st.robots_todo),
    }


class Rates:
    """Pages/s and bytes/s over the last few seconds and the last minute, from samples
    taken when asked (at most one a second kept, so RAM stays bounded)."""

    def __init__(self, manager: Manager) -> None:
        self.manager = manager
        self._samples: deque[tuple[float, int, int]] = deque()

    def rates(self) -> dict[str, float]:
        now = time.monotonic()
        m = self.manager
        sample = (now, m.pages_done, m.counters.get("bytes_fetched", 0))
        if not self._samples or now - self._samples[-1][0] >= 1.0:
            self._samples.append(sample)
        while len(self._samples) > 2 and now - self._samples[0][0] > max(RATE_WINDOWS_S):
            self._samples.popleft()
        out: dict[str, float] = {}
        for window in RATE_WINDOWS_S:
            old = next((s for s in self._samples if now - s[0] <= window), self._samples[0])
            dt = now - old[0]
            tag = f"{window:.0f}s"
            out[f"pages_per_s_{tag}"] = round((sample[1] - old[1]) / dt, 2) if dt > 0 else 0.0
            out[f"bytes_per_s_{tag}"] = round((sample[2] - old[2]) / dt, 1) if dt > 0 else 0.0
        return out


def status_report(m: Manager, rates: Rates) -> dict[str, Any]:
    s = m.stats()
    c = m.controls.stats()
    return {
        "pages_done": s.pages_done,
        "elapsed_s": round(s.elapsed_s, 3),
        "rates": rates.rates(),
        "queued": s.queued,
        "queued_by_place": queued_by_place(m),
        "in_flight": s.in_flight,
        "hosts": s.hosts,
        "seen": s.seen,
        "resolving": s.resolving,
        "paused": c.paused,
        "speed": {"pages_per_s": c.pages_per_s},
        "blocks": c.blocks,
        "checkpoint_requested": c.checkpoint_requested,
        "stopping": m.stop_reason,
        "counters": dict(sorted(s.counters.items())),
    }
