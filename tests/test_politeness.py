from drumbeat.frontier.politeness import PolitenessScheduler, QueuedURL


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
    s = PolitenessScheduler(host_delay_s=2.0, ip_delay_s=1.0, host_delay_min_s=0.5,
                            ip_delay_min_s=0.25, default_budget=10)
    big, small = s.host("big.test", budget=40), s.host("small.test", budget=10)
    assert (big.delay_s, small.delay_s) == (0.5, 2.0)
    s.set_ip(big, "127.0.0.9")
    assert s.ip_delay("127.0.0.9") == 0.25  # only a big host on it: average budget 40
    s.set_ip(small, "127.0.0.9")
    assert s.ip_delay("127.0.0.9") == 0.4  # average budget 25
    s.forget(big)
    assert s.ip_delay("127.0.0.9") == 1.0
