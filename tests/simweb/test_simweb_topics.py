"""simweb's topics (SimWebConfig.topics): off by default with no byte changed; on, each
ring host's pages carry its topic's words and link mostly within the topic."""

from __future__ import annotations

import re
from dataclasses import replace
from urllib.parse import urlsplit

from drumbeat.simweb.model import TOPIC_WORDS, SimWebConfig, SimWebModel
from drumbeat.simweb.render import Renderer

CONFIG = SimWebConfig(seed=5, hosts=40, port=8080)


def test_topics_off_change_nothing() -> None:
    plain, topical = SimWebModel(CONFIG), SimWebModel(replace(CONFIG, topics=0))
    for h in plain.hosts[:10]:
        for path in plain.paths(h.name):
            assert plain.page(h.name, path) == topical.page(h.name, path)
            assert plain.page(h.name, path).topic is None
    assert plain.topic(plain.url(plain.hosts[3].name, "/")) is None


def test_topic_pages_carry_their_words_and_link_within_the_topic() -> None:
    model = SimWebModel(replace(CONFIG, topics=4))
    render = Renderer(model)
    same = other = 0
    for h in model.hosts:
        topic = h.index % 4
        for path in model.paths(h.name):
            page = model.page(h.name, path)
            if page.kind != "html":
                continue
            assert page.topic == topic == model.topic(page.url)
            text = render.body(page).decode()
            if "<frameset>" in text:
                continue  # a frameset has no body, so no text
            words = set(re.findall(r"\w+", text))
            assert set(TOPIC_WORDS[topic]) <= words
            assert not any(w in words for t, ws in enumerate(TOPIC_WORDS) if t != topic for w in ws)
            for link in page.links:
                target = model.host(urlsplit(link.url or "").hostname or "")
                if target is not None and target.index >= 0 and target.index != h.index:
                    same += target.index % 4 == topic
                    other += target.index % 4 != topic
    # Cross-host links: most stay on the topic (the ring's home-page links do not).
    assert same > 2 * other
