"""``/metrics``: the manager's counters and gauges in Prometheus text format.

Labels take bounded sets only (status classes, error and drop reasons, robots states,
queue places, host states, the crawl's five DRUMs): no URL or host is ever a label.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from drumbeat.web.dashboard import Dashboard, drum_costs
from drumbeat.web.status import queued_by_place

if TYPE_CHECKING:
    from drumbeat.manager import Manager

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# drumbeat_hosts_by_state's label values (drumbeat.manager.hostinfo's states of a host in
# RAM), every one always present so that a dashboard's series do not come and go.
HOST_STATES = (
    "ready",
    "in_flight",
    "waiting",
    "waiting_for_ip",
    "backed_off",
    "robots",
    "resolving",
    "paused",
    "idle",
)


class ManagerCollector(Collector):
    """Reads the manager at each scrape (nothing is kept between scrapes)."""

    def __init__(self, manager: Manager, dashboard: Dashboard) -> None:
        self.manager = manager
        self.dashboard = dashboard

    def collect(self) -> Iterator[Metric]:
        m = self.manager
        c = dict(m.counters)
        pages = CounterMetricFamily(
            "drumbeat_pages", "Pages fetched, by HTTP status class", labels=["class"]
        )
        by_class: dict[str, int] = {}
        for k, v in c.items():
            if k.startswith("status."):
                cls = k[7:8] + "xx"
                by_class[cls] = by_class.get(cls, 0) + v
        for cls, v in sorted(by_class.items()):
            pages.add_metric([cls], v)
        yield pages
        yield _by_prefix(c, "error.", "drumbeat_fetch_errors", "Fetches without an answer")
        yield _by_prefix(c, "dropped.", "drumbeat_dropped_urls", "URLs given up on")
        yield _by_prefix(c, "robots.", "drumbeat_robots", "robots.txt answers, by state")
        yield CounterMetricFamily(
            "drumbeat_fetched_bytes", "Body bytes fetched", value=c.get("bytes_fetched", 0)
        )
        yield CounterMetricFamily("drumbeat_fetches", "Page fetches", value=c.get("fetches", 0))
        s = m.stats()
        queued = GaugeMetricFamily("drumbeat_queued_urls", "URLs waiting", labels=["place"])
        for place, n in queued_by_place(m).items():
            queued.add_metric([place], n)
        yield queued
        yield GaugeMetricFamily("drumbeat_in_flight", "Fetches under way", value=s.in_flight)
        yield GaugeMetricFamily("drumbeat_hosts", "Hosts in RAM", value=s.hosts)
        yield GaugeMetricFamily("drumbeat_urls_seen", "URLs in URL-seen", value=s.seen)
        yield GaugeMetricFamily(
            "drumbeat_paused", "1 while the crawl is paused", value=int(m.controls.paused)
        )
        yield from _host_gauges(self.dashboard)
        yield from _drum_gauges(m)


def _host_gauges(dashboard: Dashboard) -> Iterator[Metric]:
    """Hosts in RAM by state (the dashboard's counts: a sample past HOSTS_SCANNED hosts,
    at most HOSTS_EVERY_S old)."""
    by_state = dashboard.host_part()["hosts"]["by_state"]
    family = GaugeMetricFamily(
        "drumbeat_hosts_by_state", "Hosts in RAM, by politeness state", labels=["state"]
    )
    for state in HOST_STATES:
        family.add_metric([state], by_state.get(state, 0))
    yield family


def _drum_gauges(m: Manager) -> Iterator[Metric]:
    """Each DRUM's size and measured cost (IRLbot Theorems 2 and 3), labelled by DRUM."""
    costs = drum_costs(m)
    families = {
        "keys": GaugeMetricFamily("drumbeat_drum_keys", "Keys stored", labels=["drum"]),
        "pending": GaugeMetricFamily(
            "drumbeat_drum_pending", "Tuples submitted, not yet merged", labels=["drum"]
        ),
        "alpha": GaugeMetricFamily(
            "drumbeat_drum_alpha",
            "Measured alpha(n,R): disk bytes moved per byte checked",
            labels=["drum"],
        ),
        "sustainable_pages_per_s": GaugeMetricFamily(
            "drumbeat_drum_sustainable_pages_per_second",
            "Pages/s at which the DRUM's merges keep its disk busy (IRLbot Theorem 3)",
            labels=["drum"],
        ),
    }
    for d in costs:
        for key, family in families.items():
            if d[key] is not None:
                family.add_metric([d["name"]], d[key])
    yield from families.values()


def _by_prefix(c: dict[str, int], prefix: str, name: str, doc: str) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=["reason"])
    for k, v in sorted(c.items()):
        if k.startswith(prefix):
            family.add_metric([k[len(prefix) :]], v)
    return family


def registry_for(manager: Manager, dashboard: Dashboard) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ManagerCollector(manager, dashboard))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
