"""simweb's planted duplicates (SimWebConfig.duplicate_articles)."""

from __future__ import annotations

import pytest

from drumbeat.simweb import SimWebConfig, SimWebModel
from drumbeat.simweb.__main__ import build_parser, config_from_args
from drumbeat.simweb.render import Renderer


def test_each_article_is_served_as_original_exact_copy_and_near_copy() -> None:
    model = SimWebModel(SimWebConfig(hosts=4, duplicate_articles=3))
    render = Renderer(model)
    bodies = set()
    for host in model.hosts:
        home = {link.url for link in model.page(host.name, "/").links}
        for g in range(3):
            original, copy, near = (
                model.page(host.name, f"/article/{g}{suffix}.html")
                for suffix in ("", "-copy", "-print")
            )
            assert {original.url, copy.url, near.url} <= home
            assert original.article == copy.article == near.article == original.url
            assert (original.article_variant, copy.article_variant, near.article_variant) == (
                "original",
                "copy",
                "near",
            )
            assert render.body(original) == render.body(copy)
            assert render.body(near) != render.body(original)
            assert original.links == () and original.status == 200
            bodies.add(render.body(original))
    assert len(bodies) == 4 * 3  # every article its own text
    truth = model.crawl(model.seeds())
    assert any("/article/" in url for url in truth.fetched)


def test_the_command_line_and_bad_values() -> None:
    args = build_parser().parse_args(["--duplicate-articles", "2"])
    assert config_from_args(args).duplicate_articles == 2
    with pytest.raises(ValueError, match="duplicate_articles"):
        SimWebConfig(duplicate_articles=-1)
