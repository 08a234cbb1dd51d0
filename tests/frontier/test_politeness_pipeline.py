"""Piped hosts (PolitenessScheduler's ``pipeline``): a host whose delays are 0 is offered
``pipeline`` more requests per connection than it has connections, one lane each, and a
fetcher runs a lane's requests one after another; anything else keeps the plain rules."""

import random

from drumbeat.frontier.politeness import HostState, PolitenessScheduler, QueuedURL


def _sched(connections: int = 1, pipeline: int = 2, host_delay: float = 0.0, ip_delay: float = 0.0):
    return PolitenessScheduler(
        host_delay_s=host_delay,
        ip_delay_s=ip_delay,
        host_connections=connections,
        pipeline=pipeline,
    )


def _add(s: PolitenessScheduler, name: str = "a.test", n: int = 20) -> HostState:
    h = s.host(name)
    for i in range(n):
        s.push(h, QueuedURL(f"http://{name}/{i}", 0, None))
    s.set_ip(h, "127.1.0.1")
    return h


def _offer(s: PolitenessScheduler, now: float = 0.0) -> list[int]:
    """The lanes of every request the scheduler offers now, taken as a dispatcher does."""
    lanes = []
    while (h := s.next_ready(now)) is not None:
        s.pop_url(h)
        lanes.append(h.lane)
    return lanes


def test_a_piped_host_fills_each_lane_with_its_queue():
    s = _sched(connections=2, pipeline=2)
    h = _add(s)
    assert sorted(_offer(s)) == [0, 0, 0, 1, 1, 1]  # 2 connections x (1 + 2)
    assert h.lanes == [3, 3] and h.in_flight == 6
    s.done(h, 0.1, lane=1)
    assert _offer(s, 0.1) == []  # refilled once a place a lane is free, in one go
    s.done(h, 0.2, lane=1)
    assert _offer(s, 0.2) == [1, 1]  # the lane that has room


def test_one_connection_is_one_lane():
    s = _sched(connections=1, pipeline=3)
    h = _add(s)
    assert _offer(s) == [0, 0, 0, 0]
    for t in (0.1, 0.2, 0.3, 0.4):
        s.done(h, t, lane=0)
    assert h.lanes is None and h.in_flight == 0  # decided again at the next start


def test_no_pipeline_keeps_the_plain_rules():
    s = _sched(connections=1, pipeline=0)
    h = _add(s)
    assert len(_offer(s)) == 1 and h.lanes is None
    s.done(h, 0.1)
    assert len(_offer(s, 0.1)) == 1


def test_a_delay_or_an_ip_delay_or_a_failure_or_no_piping_is_not_piped():
    for s in (_sched(host_delay=0.001), _sched(ip_delay=0.001)):
        h = _add(s)
        assert len(_offer(s, 1.0)) == 1 and h.lanes is None
    s = _sched()
    h = _add(s)
    h.failures = 1
    assert len(_offer(s)) == 1 and h.lanes is None
    s = _sched()
    s.piping = False  # the crawl's fetch slots are its limit now
    h = _add(s)
    assert len(_offer(s)) == 1 and h.lanes is None


def test_a_host_that_stops_qualifying_waits_for_its_lanes_then_keeps_its_delay():
    s = _sched(connections=1, pipeline=2)
    h = _add(s)
    assert _offer(s) == [0, 0, 0]
    h.delay_s = 1.0  # robots.txt gave it a Crawl-delay meanwhile
    s.done(h, 0.1, lane=0)
    assert _offer(s, 0.1) == []  # nothing more while piped requests are out
    s.done(h, 0.2, lane=0)
    s.done(h, 0.3, lane=0)
    assert h.lanes is None
    assert _offer(s, 1.29) == []  # its delay runs from the last one's end
    assert len(_offer(s, 1.3)) == 1 and h.lanes is None


def test_a_back_off_holds_a_piped_host():
    s = _sched(connections=2, pipeline=1)
    h = _add(s)
    assert len(_offer(s)) == 4
    h.failures = 1
    s.done(h, 0.1, delay_s=5.0, lane=0)  # 503: the host backs off
    assert _offer(s, 0.1) == [] and _offer(s, 6.0) == []  # its lanes are still out
    for lane in (0, 1, 1):
        s.done(h, 0.2, lane=lane)
    assert _offer(s, 5.09) == []
    assert len(_offer(s, 5.1)) == 2 and h.lanes is None  # its two connections, unpiped


def test_without_piping_a_piped_host_queues_nothing_more_but_keeps_its_connections():
    s = _sched(connections=2, pipeline=2)
    h = _add(s)
    assert len(_offer(s)) == 6
    s.piping = False  # the crawl's fetch slots became its limit
    for t, lane in ((0.1, 0), (0.2, 1), (0.3, 0)):
        s.done(h, t, lane=lane)
        assert _offer(s, t) == []  # 5, 4, 3 still out: at least its 2 connections
    s.done(h, 0.4, lane=1)
    assert len(_offer(s, 0.4)) == 0  # 2 out: its connections, nothing behind them
    s.done(h, 0.5, lane=0)
    assert _offer(s, 0.5) == [0]  # a lane freed: one request on it, none queued
    assert h.lanes == [1, 1]
    s.piping = True
    s.done(h, 0.6, lane=1)
    assert sorted(_offer(s, 0.6)) == [0, 0, 1, 1, 1]  # queued behind both lanes again


def test_release_gives_the_lane_back():
    s = _sched(connections=2, pipeline=1)
    h = _add(s)
    assert s.next_ready(0.0) is h
    s.pop_url(h)
    lane = h.lane
    s.release(h)  # nothing was sent
    assert h.lanes is None and h.in_flight == 0
    assert sorted(_offer(s)) == [0, 0, 1, 1]
    assert lane in (0, 1)


def test_hold_sends_nothing_until_unhold_and_its_request_is_done():
    s = _sched(connections=2, pipeline=2)
    h = _add(s)
    assert s.next_ready(0.0) is h
    s.pop_url(h)
    s.hold(h)  # its robots.txt request goes alone
    assert _offer(s) == []
    s.unhold(h)
    s.done(h, 0.1, lane=h.lane)
    assert len(_offer(s, 0.1)) == 6


def test_a_hold_outlasts_the_ends_of_the_requests_under_way():
    s = _sched(connections=2, pipeline=1)
    h = _add(s)
    out = []
    for _ in range(4):  # three pages, then its robots.txt again (expired)
        assert s.next_ready(0.0) is h
        s.pop_url(h)
        out.append(h.lane)
    s.hold(h)
    for t, lane in zip((0.1, 0.2, 0.3), out[:3], strict=True):
        s.done(h, t, lane=lane)
        assert _offer(s, t) == []  # held: its rules may give it a delay
    s.unhold(h)
    s.done(h, 0.4, lane=out[3])
    assert len(_offer(s, 0.4)) == 4


def test_random_operations_never_run_more_than_the_connections():
    """Hosts get URLs at random, requests take 0-20 ms, a fetcher model runs each lane's
    requests one after another in their order; some hosts get a Crawl-delay or a failure
    at random, and piping goes off and on. At no time do more requests of a host run
    than its connections, a host with a delay and one connection keeps it from one
    request's end to the next start the manager sends, and every URL queued is
    fetched."""
    for seed in range(20):
        _random_operations(seed)


def _random_operations(seed: int) -> None:
    rng = random.Random(seed)
    connections = rng.choice((1, 2, 4))
    s = _sched(connections=connections, pipeline=rng.choice((1, 2, 3)))
    hosts = [s.host(f"h{i}.test") for i in range(4)]
    for h in hosts:
        s.set_ip(h, "127.1.0.1")
    # Per host and lane: the requests queued at the fetcher, and the one running
    # (its end time); requests of hosts that are not piped run at once.
    lanes: dict[tuple[str, int], list[float]] = {}
    running: list[tuple[float, HostState, int]] = []
    last_end: dict[str, float] = {}
    raised = {h.name: 0.0 for h in hosts}  # when each host's delay last changed
    pushed = fetched = 0

    def step(now: float) -> None:
        for end, h, lane in sorted((r for r in running if r[0] <= now), key=lambda r: r[0]):
            running.remove((end, h, lane))
            last_end[h.name] = end
            s.done(h, end, lane=lane)
            queue = lanes.get((h.name, lane))
            if queue:  # the next of its lane starts at once, at the fetcher
                start(h, lane, end, queue.pop(0))

    def start(h: HostState, lane: int, at: float, takes: float) -> None:
        nonlocal fetched
        fetched += 1
        assert sum(1 for _, o, _ in running if o is h) < connections
        end = last_end.get(h.name)
        if connections == 1 and lane < 0 and end is not None and raised[h.name] <= end:
            assert at - end >= h.delay_s - 1e-9  # from the last end
        running.append((round(at + takes, 3), h, lane))

    def send(h: HostState, now: float) -> None:
        s.pop_url(h)
        takes = rng.choice((0.0, 0.005, 0.02))
        lane = h.lane if h.lanes is not None else -1
        if lane < 0:
            start(h, lane, now, takes)
        elif any(o is h and ln == lane for _, o, ln in running):
            lanes.setdefault((h.name, lane), []).append(takes)
        else:
            start(h, lane, now, takes)

    now = 0.0
    for i in range(1500):
        now = round(now + rng.choice((0.0, 0.001, 0.01)), 3)
        h = rng.choice(hosts)
        op = rng.random()
        if op < 0.4:
            s.push(h, QueuedURL(f"http://{h.name}/{i}", 0, None))
            pushed += 1
        elif op < 0.42:
            h.delay_s = rng.choice((0.0, 0.0, 0.05))
            raised[h.name] = now
        elif op < 0.44:
            h.failures = rng.choice((0, 0, 1))
        elif op < 0.46:
            s.piping = rng.random() < 0.7  # the crawl's fetch slots are its limit, or not
        step(now)
        while (ready := s.next_ready(now)) is not None:
            send(ready, now)
    for h in hosts:
        h.failures = 0
    s.piping = True
    while running or s.queued_urls:
        assert now < 1000, f"seed {seed}: {s.queued_urls} URLs never served"
        now = round(now + 0.01, 3)
        step(now)
        while (ready := s.next_ready(now)) is not None:
            send(ready, now)
    assert fetched == pushed
    assert all(not h.in_flight and h.lanes is None for h in hosts)
