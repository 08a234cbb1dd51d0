import itertools

from drumbeat.frontier.politeness import HostState, PolitenessScheduler, QueuedURL
from drumbeat.testing import FakeClock


def _sched(host_delay=2.0, ip_delay=0.5):
    return PolitenessScheduler(host_delay_s=host_delay, ip_delay_s=ip_delay)


def _add(s, name, ip, n=3):
    h = s.host(name)
    for i in range(n):
        s.push(h, QueuedURL(f"http://{name}/{i}", 0, None))
    s.set_ip(h, ip)
    return h


def test_host_delay_runs_from_completion():
    s = _sched()
    h = _add(s, "a.test", "127.1.0.1")
    assert s.next_ready(0.0) is h
    s.pop_url(h)
    assert s.next_ready(0.1) is None  # busy
    s.done(h, now=1.0)
    assert s.next_ready(2.9) is None
    assert s.next_ready(3.0) is h


def test_ip_delay_couples_hosts_on_one_ip():
    s = _sched(host_delay=2.0, ip_delay=0.5)
    a = _add(s, "a.test", "127.1.0.1")
    b = _add(s, "b.test", "127.1.0.1")
    c = _add(s, "c.test", "127.1.0.2")
    first = s.next_ready(0.0)
    second = s.next_ready(0.0)
    assert {first, second} == {a, c} or {first, second} == {b, c}
    assert s.next_ready(0.0) is None  # the other host of 127.1.0.1 is parked on the busy IP
    s.pop_url(first)
    s.done(first, now=0.2)
    other = b if first is a else a
    assert s.next_ready(0.6) is None
    assert s.next_ready(0.7) is other


def test_zero_ip_delay_does_not_serialize():
    s = _sched(host_delay=1.0, ip_delay=0.0)
    a = _add(s, "a.test", "127.1.0.1")
    b = _add(s, "b.test", "127.1.0.1")
    assert {s.next_ready(0.0), s.next_ready(0.0)} == {a, b}


def test_release_and_delay_until():
    s = _sched()
    h = _add(s, "a.test", "127.1.0.1")
    assert s.next_ready(0.0) is h
    s.delay_until(h, 10.0)
    assert s.next_ready(9.9) is None
    assert s.next_ready(10.0) is h
    s.release(h)
    assert s.next_ready(10.0) is h


def test_restart_floor_and_blocked_hosts():
    s = _sched()
    s.start_no_earlier_than(5.0)
    h = s.host("a.test")
    s.push(h, QueuedURL("http://a.test/", 0, None))
    assert s.next_ready(100.0) is None  # no IP yet: blocked
    s.set_ip(h, "127.1.0.1")
    assert s.next_ready(4.9) is None
    assert s.next_ready(5.0) is h


def test_sweep_forgets_idle_hosts_only():
    s = _sched()
    a = _add(s, "a.test", "127.1.0.1", n=1)
    _add(s, "b.test", "127.1.0.2", n=1)
    assert s.next_ready(0.0) is not None
    h = a if a.busy else s.hosts["b.test"]
    s.pop_url(h)
    s.done(h, now=1.0)
    assert s.sweep(2.0) == 0  # still within its delay
    assert s.sweep(3.0) == 1
    assert h.name not in s.hosts and s.queued_urls == 1


def test_delays_scale_down_with_budget_to_the_floors():
    from drumbeat.frontier.politeness import scaled_delay

    assert scaled_delay(2.0, 0.5, 10, 10) == 2.0  # the long tail keeps the full delay
    assert scaled_delay(2.0, 0.5, 20, 10) == 1.0
    assert scaled_delay(2.0, 0.5, 10_000, 10) == 0.5  # never below the floor
    assert scaled_delay(0.2, 0.5, 10_000, 10) == 0.2  # a floor above the delay never raises it
    s = PolitenessScheduler(
        host_delay_s=2.0,
        ip_delay_s=1.0,
        host_delay_min_s=0.5,
        ip_delay_min_s=0.25,
        default_budget=10,
    )
    big, small = s.host("big.test", budget=40), s.host("small.test", budget=10)
    assert (big.delay_s, small.delay_s) == (0.5, 2.0)
    s.set_ip(big, "127.0.0.9")
    assert s.ip_delay("127.0.0.9") == 0.25  # only a big host on it: average budget 40
    s.set_ip(small, "127.0.0.9")
    assert s.ip_delay("127.0.0.9") == 0.4  # average budget 25
    s.forget(big)
    assert s.ip_delay("127.0.0.9") == 1.0


def test_hosts_sharing_an_ip_are_served_in_line_one_per_ip_delay():
    s = _sched(host_delay=1.0, ip_delay=0.1)
    hosts = [_add(s, f"h{i}.test", "127.1.0.1", n=2) for i in range(10)]
    served = []
    now = 0.0
    while now < 3.0:
        h = s.next_ready(now)
        if h is None:
            now = round(now + 0.01, 2)
            continue
        s.pop_url(h)
        served.append((now, h))
        s.done(h, now=now)  # the request took no time
    times = [t for t, _ in served]
    assert all(b - a >= 0.1 - 1e-9 for a, b in itertools.pairwise(times))  # τs between requests
    assert {h for _, h in served[:10]} == set(hosts)  # everyone once before anyone twice
    assert len(served) == 20 and s.queued_urls == 0


def test_hosts_that_leave_the_line_do_not_hold_it_up():
    s = _sched(host_delay=1.0, ip_delay=0.5)
    a, b, c, d = (_add(s, f"{x}.test", "127.1.0.1") for x in "abcd")
    first = s.next_ready(0.0)
    assert s.next_ready(0.0) is None  # the three others are in the IP's line
    waiting = [h for h in (a, b, c, d) if h is not first]
    s.block(waiting[0])  # being re-resolved: out of the line
    s.drain(waiting[1])  # nothing left to fetch: out of the line
    s.pop_url(first)
    s.done(first, now=0.1)
    assert s.next_ready(0.59) is None
    assert s.next_ready(0.6) is waiting[2]  # the line goes on past them
    s.set_ip(waiting[0], "127.1.0.2")  # its new IP is idle: served at once
    assert s.next_ready(0.6) is waiting[0]
    s.push(waiting[1], QueuedURL("http://again.test/", 0, None))  # back in the heap, then line
    assert s.next_ready(0.6) is None
    s.pop_url(waiting[2])
    s.done(waiting[2], now=0.7)
    assert s.next_ready(1.2) is waiting[1]


def test_random_operations_keep_both_delays_and_serve_everyone():
    for seed in range(20):
        _random_operations(seed)


def test_random_operations_with_early_offers_keep_both_delays():
    for seed in range(20):
        _random_operations(seed, early_s=0.5)


def _random_operations(seed: int, early_s: float = 0.0) -> None:
    """Hosts on 3 IPs get URLs, are re-resolved, drained and released at random while
    requests take 0-30 ms; every request must keep both delays, and every URL queued
    must be fetched once the operations stop. With ``early_s`` a request starts when
    its wait (``wait_s``) is over, as a fetcher starts it."""
    import random

    rng = random.Random(seed)
    host_delay, ip_delay = 0.3, 0.05
    s = PolitenessScheduler(host_delay_s=host_delay, ip_delay_s=ip_delay, early_s=early_s)
    ips = [f"127.1.0.{i}" for i in range(1, 4)]
    hosts = [s.host(f"h{i}.test") for i in range(12)]
    for h in hosts:
        s.set_ip(h, rng.choice(ips))
    last_host: dict[str, float] = {}
    last_ip: dict[str, float] = {}
    in_flight: list[tuple[float, HostState]] = []
    pushed = fetched = 0

    def finish(now: float) -> None:
        """Complete the requests due by ``now``: both delays run from here."""
        for finished in [f for f in in_flight if f[0] <= now]:
            in_flight.remove(finished)
            s.done(finished[1], now=now)
            last_host[finished[1].name] = last_ip[finished[1].ip] = now

    def start(h: HostState, now: float, takes_s: float) -> None:
        nonlocal fetched
        s.pop_url(h)
        fetched += 1
        wait = s.wait_s(h, now)
        assert 0 <= wait <= (host_delay if early_s else 0.0) + 1e-9
        at = now + wait
        assert at - last_host.get(h.name, -9) >= host_delay - 1e-9
        assert at - last_ip.get(h.ip, -9) >= ip_delay - 1e-9
        assert not any(other.ip == h.ip for _, other in in_flight)
        in_flight.append((round(at + takes_s, 3), h))

    now = 0.0
    for step in range(2000):
        now = round(now + rng.choice((0.0, 0.001, 0.01, 0.02)), 3)
        op, h = rng.random(), rng.choice(hosts)
        if op < 0.3:
            s.push(h, QueuedURL(f"http://{h.name}/{step}", 0, None))
            pushed += 1
        elif op < 0.33 and not h.busy:
            s.block(h)
            s.set_ip(h, rng.choice(ips))
        elif op < 0.35 and not h.busy:
            pushed -= len(s.drain(h))
        finish(now)
        ready = s.next_ready(now)
        if ready is not None and rng.random() < 0.1:
            s.release(ready)  # decided to send nothing
        elif ready is not None:
            start(ready, now, rng.choice((0.0, 0.005, 0.03)))
    # No new work now: everything queued is served within a bounded time.
    while in_flight or s.queued_urls:
        assert now < 2000, f"seed {seed}: {s.queued_urls} URLs never served"
        now = round(now + 0.01, 3)
        finish(now)
        while (ready := s.next_ready(now)) is not None:
            start(ready, now, 0.0)
    assert fetched == pushed


# -- host_connections > 1: up to N requests to a host at once, starts spaced by τh -----


def test_several_connections_overlap_up_to_the_limit():
    clock = FakeClock(0.0)
    s = PolitenessScheduler(host_delay_s=0.0, ip_delay_s=0.0, host_connections=3)
    h = _add(s, "a.test", "127.1.0.1", n=5)
    for _ in range(3):
        assert s.next_ready(clock()) is h
        s.pop_url(h)
    assert s.next_ready(clock()) is None  # three in flight
    clock.advance(0.1)
    s.done(h, clock())
    assert s.next_ready(clock()) is h  # a connection is free again


def test_several_connections_space_starts_by_the_delay():
    clock = FakeClock(0.0)
    s = PolitenessScheduler(host_delay_s=1.0, ip_delay_s=0.0, host_connections=2)
    h = _add(s, "a.test", "127.1.0.1", n=5)
    assert s.next_ready(clock()) is h
    s.pop_url(h)
    clock.advance(0.5)
    assert s.next_ready(clock()) is None  # 1 s after the last start, not before
    clock.now = 1.0
    assert s.next_ready(clock()) is h
    s.pop_url(h)
    clock.now = 1.5
    s.done(h, clock())  # a completion frees a connection; the start spacing holds
    assert s.next_ready(1.99) is None
    assert s.next_ready(2.0) is h


def test_several_connections_keep_a_back_off():
    s = PolitenessScheduler(host_delay_s=0.0, ip_delay_s=0.0, host_connections=2)
    h = _add(s, "a.test", "127.1.0.1", n=5)
    assert s.next_ready(0.0) is h
    s.pop_url(h)
    s.done(h, 0.1, delay_s=5.0)  # the host answered 503: back off from now
    assert s.next_ready(5.0) is None
    assert s.next_ready(5.1) is h


def test_several_connections_keep_the_ip_rule():
    s = PolitenessScheduler(host_delay_s=0.0, ip_delay_s=0.5, host_connections=4)
    h = _add(s, "a.test", "127.1.0.1", n=5)
    assert s.next_ready(0.0) is h
    s.pop_url(h)
    assert s.next_ready(0.0) is None  # one request per IP at a time
    s.done(h, 1.0)
    assert s.next_ready(1.4) is None
    assert s.next_ready(1.5) is h


def test_a_host_with_requests_in_flight_is_not_swept():
    s = PolitenessScheduler(host_delay_s=0.0, ip_delay_s=0.0, host_connections=2)
    h = _add(s, "a.test", "127.1.0.1", n=1)
    assert s.next_ready(0.0) is h
    s.pop_url(h)
    s.sweep(10.0)
    s.forget(h)
    assert s.hosts["a.test"] is h  # its completion must find it
    s.done(h, 11.0)
    s.sweep(11.0)
    assert "a.test" not in s.hosts


def test_one_connection_is_the_default():
    s = _sched(host_delay=1.0, ip_delay=0.0)
    h = _add(s, "a.test", "127.1.0.1")
    assert s.next_ready(0.0) is h
    s.pop_url(h)
    assert s.next_ready(5.0) is None  # busy until done, however long
    assert h.in_flight == 1
    s.done(h, 5.0)
    assert h.in_flight == 0
    assert s.next_ready(5.9) is None
    assert s.next_ready(6.0) is h


# -- early_s: a host with a short delay is offered as its request completes ------------


def test_a_short_delay_is_offered_at_once_with_its_wait():
    s = PolitenessScheduler(host_delay_s=0.005, ip_delay_s=0.0, early_s=0.05)
    h = _add(s, "a.test", "127.1.0.1")
    assert s.next_ready(0.0) is h and s.wait_s(h, 0.0) == 0.0
    s.pop_url(h)
    s.done(h, now=1.0)
    assert abs((s.next_due_time() or 0) - 1.0) < 1e-9
    assert s.next_ready(1.001) is h
    assert abs(s.wait_s(h, 1.001) - 0.004) < 1e-9
    s.pop_url(h)
    s.done(h, now=2.0)
    assert s.next_ready(2.01) is h and s.wait_s(h, 2.01) == 0.0  # the delay is over


def test_a_long_delay_or_several_connections_are_not_offered_early():
    s = PolitenessScheduler(host_delay_s=1.0, ip_delay_s=0.0, early_s=0.05)
    h = _add(s, "a.test", "127.1.0.1")
    assert s.next_ready(0.0) is h
    s.pop_url(h)
    s.done(h, now=1.0)
    assert s.next_ready(1.5) is None
    assert s.next_ready(2.0) is h and s.wait_s(h, 2.0) == 0.0
    # Starts on several fetchers could not be spaced by waits counted at each.
    s = PolitenessScheduler(host_delay_s=0.005, ip_delay_s=0.0, early_s=0.05, host_connections=2)
    assert s.early_s == 0.0
    h = _add(s, "a.test", "127.1.0.1")
    assert s.next_ready(0.0) is h and s.wait_s(h, 0.0) == 0.0


def test_a_delay_raised_while_queued_is_not_offered_early():
    """A Crawl-delay or back-off that makes the host's delay longer than ``early_s``
    after it was pushed: the heap's early entry is put back at its due time."""
    s = PolitenessScheduler(host_delay_s=0.005, ip_delay_s=0.0, early_s=0.05)
    h = _add(s, "a.test", "127.1.0.1")
    assert s.next_ready(0.0) is h
    s.pop_url(h)
    s.done(h, now=1.0, delay_s=0.02)  # a back-off of 20 ms: offered its delay early
    assert s.next_ready(1.01) is None
    assert s.next_ready(1.016) is h and abs(s.wait_s(h, 1.016) - 0.004) < 1e-9
    s.pop_url(h)
    s.done(h, now=2.0)
    h.delay_s, h.due = 3.0, 5.0  # robots' Crawl-delay, after the push
    assert s.next_ready(2.0) is None
    assert s.next_ready(5.0) is h
