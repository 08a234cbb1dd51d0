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


def test_doubles_honours_retry_after_caps_and_forgives():
    b = Backoff(max_s=100.0, forgive_s=50.0, max_attempts=3)
    host = HostState("h.test", delay_s=1.0)
    assert [b.failed(host, t, None) for t in (0.0, 1.0, 2.0)] == [2.0, 4.0, 8.0]
    assert b.failed(host, 3.0, 30.0) == 30.0  # Retry-After longer than the doubling
    assert b.failed(host, 4.0, 1.0) == 32.0  # shorter: the doubling wins
    assert b.failed(host, 5.0, 10_000.0) == 100.0  # capped
    assert b.failed(host, 6.0, None) == 100.0
    # A quiet period forgives: the next failure starts over.
    assert b.failed(host, 6.0 + 50.0, None) == 2.0 and host.failures == 1


def test_attempts_are_bounded():
    b = Backoff(max_s=10.0, forgive_s=10.0, max_attempts=3)
    assert b.may_retry(1) and b.may_retry(2) and not b.may_retry(3)
