"""simweb's ``spammed_hosts`` scenario: comment spam on popular ordinary hosts."""

from __future__ import annotations

import dataclasses
from urllib.parse import urlsplit

import pytest

from drumbeat.simweb import SimWebConfig, SimWebModel, scenarios

SCENARIOS = SimWebConfig(
    seed=7,
    hosts=12,
    ips=4,
    pages_per_host=5,
    page_bytes=4_000,
    links_per_page=15,
    crawl_delay_s=0.05,
    spam_farms=2,
    calendar_traps=1,
    big_site_pages=60,
)


def _split(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.path


def test_spammed_hosts_append_comment_spam_into_the_farms() -> None:
    spammed = dataclasses.replace(SCENARIOS, port=8080, spammed_hosts=2, spammed_links_per_page=7)
    model = SimWebModel(spammed)
    plain = SimWebModel(dataclasses.replace(SCENARIOS, port=8080))
    assert scenarios.spammed_host_indices(spammed) == [5, 10]
    for index, farm in ((5, "spamfarm0.test"), (10, "spamfarm1.test")):
        host = model.hosts[index]
        assert host.name == host.pld  # one host per PLD: each adds 1 to the farm's in-degree
        for path in model.paths(host.name):
            page = model.page(host.name, path)
            if page.kind != "html":
                continue
            before = plain.page(host.name, path).links
            assert page.links[: len(before)] == before  # the page's own links are unchanged
            extra = page.links[len(before) :]
            assert len(extra) == 7
            names = {_split(link.url)[0] for link in extra if link.url}
            assert len(names) == 7 and all(model.host(n).pld == farm for n in names)
    for index in (0, 1, 11):  # other hosts: as without spammed hosts
        name = model.hosts[index].name
        assert all(model.page(name, p) == plain.page(name, p) for p in model.paths(name))
    with pytest.raises(ValueError):
        SimWebConfig(spammed_hosts=1)  # no farm to point into
    with pytest.raises(ValueError):
        SimWebConfig(hosts=20, spam_farms=1, spammed_hosts=4)  # only 5, 10, 15 qualify
