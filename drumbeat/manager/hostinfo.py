"""Why a host is or is not fetching now: the operator's question, answered from the
politeness scheduler's HostState, the robots gate and the operator's blocks.

The answer's ``state`` is one of:

- ``blocked``: the operator blocked the host or its PLD (drumbeat.manager.controls);
- ``out_of_scope``: the blocklist names it or it reached a cap (``reason``:
  drumbeat.frontier.scope);
- ``unknown``: not in RAM: nothing of it queued there (it may still have URLs on disk,
  in BEAST or QR; it is done, or never seen);
- ``resolving``: its DNS lookup is under way;
- ``robots``: its robots.txt is to be fetched before its pages (``waiting_for_robots``);
- ``in_flight``: a request to it is under way;
- ``backed_off``: a failure (``reason``) holds it back until ``until`` (wall clock);
- ``waiting``: its politeness delay runs until ``until``;
- ``waiting_for_ip``: due, but its server IP's delay or another host of the IP holds it;
- ``paused``: the crawl is paused;
- ``idle``: in RAM, with nothing queued;
- ``ready``: due now; it is sent a request at the next dispatch.
"""

from __future__ import annotations

import heapq
import time
from typing import TYPE_CHECKING, Any

from drumbeat import urls

if TYPE_CHECKING:
    from drumbeat.frontier.politeness import HostState
    from drumbeat.manager.core import Manager


def host_report(
    manager: Manager, name: str, robots_origins: dict[str, list[str]] | None = None
) -> dict[str, Any]:
    """The host's state, with the figures behind it (a JSON-ready dict).
    ``robots_origins``: :func:`robots_origins`, when many hosts are reported at once."""
    name = name.strip().lower().rstrip(".")
    now, wall = manager.clock(), time.time()
    gate, controls = manager.gate, manager.controls
    h = manager.scheduler.hosts.get(name)
    if robots_origins is None:
        origins = [o for o in gate.qr.working_origins() if urls.host_of(o) == name]
    else:
        origins = robots_origins.get(name, [])
    doc: dict[str, Any] = {"host": name, "pld": urls.pld(name) if name else ""}
    if h is not None:
        doc.update(
            ip=h.ip,
            queued=len(h.queue),
            in_flight=h.in_flight,
            delay_s=round(h.delay_s, 3),
            budget=h.budget,
            failures=h.failures,
            last_failure=h.failure or None,
        )
    if origins:
        doc["waiting_for_robots"] = origins

    def until(t: float) -> dict[str, Any]:
        return {"until": round(wall + (t - now), 3), "in_s": round(t - now, 3)}

    if controls.blocks.host_blocked(name):
        return {**doc, "state": "blocked"}
    if (reason := manager.scope.host_reason(name)) is not None:
        return {**doc, "state": "out_of_scope", "reason": reason}
    if h is None:
        return {**doc, "state": "resolving" if name in gate.resolving else "unknown"}
    if h.blocked or h.ip is None:
        return {**doc, "state": "resolving" if name in gate.resolving else "unknown"}
    state = host_state(h, now, paused=controls.paused)
    if state == "backed_off":
        return {**doc, "state": state, "reason": h.failure, **until(h.due)}
    if state in ("waiting", "robots") and h.due > now:
        return {**doc, "state": state, **until(h.due)}
    return {**doc, "state": state}


def host_state(h: HostState, now: float, *, paused: bool) -> str:
    """The state (module docstring) of a host in RAM with its address known and no
    operator's block: cheap enough to count the states of many hosts a second."""
    if h.busy or h.in_flight:
        return "in_flight"
    if not h.queue:
        return "idle"
    if h.queue[0].robots:
        return "robots"
    if h.due > now:
        return "backed_off" if h.failures else "waiting"
    if paused:
        return "paused"
    return "waiting_for_ip" if h.parked else "ready"


def top_hosts(manager: Manager, n: int) -> list[dict[str, Any]]:
    """The ``n`` hosts in RAM with the most URLs queued, each with its host report."""
    hosts = heapq.nlargest(n, manager.scheduler.hosts.values(), key=lambda h: len(h.queue))
    origins = robots_origins(manager) if hosts else {}
    return [host_report(manager, h.name, origins) for h in hosts]


def robots_origins(manager: Manager) -> dict[str, list[str]]:
    """The origins whose robots.txt QR waits for, by host (one pass over them)."""
    by_host: dict[str, list[str]] = {}
    for o in manager.gate.qr.working_origins():
        by_host.setdefault(urls.host_of(o), []).append(o)
    return by_host
