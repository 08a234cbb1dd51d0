from drumbeat.frontier.robots import ALLOW_ALL, GIVEN_UP, RULES, UNAVAILABLE, RobotsCache

UA = "drumbeat/0.1 (+http://example.test/bot)"


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def _cache(clock):
    return RobotsCache(user_agent=UA, expiry_s=100, retry_s=10, max_attempts=3, clock=clock)


def test_statuses_follow_rfc9309():
    clock = Clock()
    c = _cache(clock)
    e = c.record("http://a.test", 200, "User-agent: *\nDisallow: /private/\nCrawl-delay: 3\n")
    assert e.state == RULES
    assert not e.allows("http://a.test/private/x", UA) and e.allows("http://a.test/p", UA)
    assert e.crawl_delay(UA) == 3.0
    assert c.record("http://b.test", 404, None).state == ALLOW_ALL
    e = c.record("http://c.test", 503, None)
    assert e.state == UNAVAILABLE and not e.allows("http://c.test/", UA)
    assert c.record("http://d.test", 200, "\x00\xff<html>garbage").allows("http://d.test/x", UA)


def test_expiry_retry_and_give_up():
    clock = Clock()
    c = _cache(clock)
    c.record("http://a.test", 200, "")
    assert c.get("http://a.test") is not None
    clock.t += 100
    assert c.get("http://a.test") is None  # expired: re-request
    for _ in range(2):
        assert c.record("http://x.test", None, None).state == UNAVAILABLE
        assert c.get("http://x.test") is not None
        clock.t += 10
        assert c.get("http://x.test") is None
    assert c.record("http://x.test", 500, None).state == GIVEN_UP


def test_save_load_round_trip(tmp_path):
    clock = Clock()
    c = _cache(clock)
    c.record("http://a.test", 200, "User-agent: *\nDisallow: /no\n")
    c.record("http://b.test", 500, None)
    c.save(tmp_path)
    d = _cache(clock)
    d.load(tmp_path)
    assert not d.get("http://a.test").allows("http://a.test/no", UA)
    assert d.get("http://b.test").state == UNAVAILABLE and d.previous_attempts("http://b.test") == 1
