"""The back-off rules (frontier.backoff) on a host's state."""

from __future__ import annotations

from drumbeat.frontier.backoff import Backoff, retryable
from drumbeat.frontier.politeness import HostState


def test_what_is_retryable():
    assert retryable(429, None) and retryable(503, None)
    assert not retryable(200, None) and not retryable(404, None) and not retryable(500, None)
    assert retryable(None, "connect") and retryable(None, "timeout")
    assert retryable(None, "http:disconnected")
    assert not retryable(None, "dns:nxdomain") and not retryable(None, "url:invalid")


class FakeClock:
    """Time that moves only when told (the back-off takes ``now`` from its caller)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self, step: float = 1.0) -> float:
        self.now += step
        return self.now


def test_doubles_while_failing_caps_and_forgives():
    b = Backoff(max_s=100.0, forgive_s=50.0, max_attempts=3)
    clock = FakeClock()
    host = HostState("h.test", delay_s=1.0)
    assert [b.failed(host, clock(), None) for _ in range(3)] == [2.0, 4.0, 8.0]
    assert [b.failed(host, clock(), None) for _ in range(4)] == [16.0, 32.0, 64.0, 100.0]
    # A quiet period forgives: the next failure starts over.
    assert b.failed(host, clock(50.0), None) == 2.0 and host.failures == 1


def test_retry_after_is_honoured_as_given_and_the_count_goes_on():
    b = Backoff(max_s=100.0, forgive_s=50.0, max_attempts=3)
    clock = FakeClock()
    host = HostState("h.test", delay_s=0.05)
    assert b.failed(host, clock(), None) == 1.0  # twice τh, at least a second
    # The server's word, neither the doubling (4 s by now) nor more.
    assert b.failed(host, clock(), 5.0) == 5.0 and b.failed(host, clock(), 5.0) == 5.0
    assert b.failed(host, clock(), 1.0) == 1.0
    assert b.failed(host, clock(), None) == 16.0  # the fifth failure in a row
    assert b.failed(host, clock(), 10_000.0) == 100.0  # capped
    assert b.failed(host, clock(), 0.0) == 0.05  # never closer than τh
    slow = HostState("slow.test", delay_s=3.0)
    assert b.failed(slow, clock(), 1.0) == 3.0


def test_a_success_resets_the_doubling():
    b = Backoff(max_s=100.0, forgive_s=1000.0, max_attempts=3)
    clock = FakeClock()
    host = HostState("h.test", delay_s=1.0)
    assert [b.failed(host, clock(), None) for _ in range(3)] == [2.0, 4.0, 8.0]
    b.succeeded(host)
    assert host.failures == 0
    assert b.failed(host, clock(), None) == 2.0


def test_attempts_are_bounded():
    b = Backoff(max_s=10.0, forgive_s=10.0, max_attempts=3)
    assert b.may_retry(1) and b.may_retry(2) and not b.may_retry(3)
