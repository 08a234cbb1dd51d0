"""Back-off for hosts that ask for it (429, 503) or keep failing (connect, timeout, reset).

Each failure in a row doubles the wait before the host's next request, starting from
twice its delay τh (at least a second), so a host that keeps failing is asked ever more
slowly. A ``Retry-After`` is honoured as given instead (never below τh): the server said
when to come back, and a doubling over the failures of other URLs would only make the
host's ordinary pages wait longer. Both are capped at ``max_s``. A success ends the run
of failures (:meth:`Backoff.succeeded`), and so does ``forgive_s`` without one, so a site
that had a bad minute is not slowed for the rest of the crawl.

The URL that failed is retried up to ``max_attempts`` fetches in all, then dropped with a
reason; the manager queues its retry behind the host's other URLs, so one bad URL (slow,
rate-limited) does not hold the host's ordinary pages behind its own retries.
"""

from __future__ import annotations

from drumbeat.frontier.politeness import HostState

# Answers that mean "not now" rather than "no": the server is overloaded or rate-limits us.
RETRY_STATUSES = frozenset({429, 503})
# Fetch errors that say nothing about the URL, only about the host at that moment; and
# a fetcher process that died with the fetch unreported (it may even be the page that
# killed it: the attempt limit then gives it up; queue.process.WORKER_DIED).
RETRY_ERRORS = frozenset({"connect", "timeout", "http:disconnected", "fetcher_died"})


def retryable(status: int | None, error: str | None) -> bool:
    """True for an outcome worth a retry after a back-off."""
    if status is not None:
        return status in RETRY_STATUSES
    return error in RETRY_ERRORS


class Backoff:
    def __init__(self, *, max_s: float, forgive_s: float, max_attempts: int) -> None:
        self.max_s = max_s
        self.forgive_s = forgive_s
        self.max_attempts = max_attempts

    def failed(self, host: HostState, now: float, retry_after_s: float | None) -> float:
        """Record a failure of ``host`` at ``now``; return the delay before its next request."""
        if now - host.failed_at >= self.forgive_s:
            host.failures = 0
        host.failures += 1
        host.failed_at = now
        if retry_after_s is not None:
            delay = max(host.delay_s, retry_after_s)
        else:
            delay = max(host.delay_s, 0.5) * 2.0 ** min(host.failures, 30)
        return min(delay, self.max_s)

    def succeeded(self, host: HostState) -> None:
        """A fetch from ``host`` ended without a failure that backs off (an answer, or an
        error a retry would not mend): its next failure starts the doubling over."""
        host.failures = 0

    def may_retry(self, attempts_made: int) -> bool:
        """Whether a URL fetched ``attempts_made`` times without success gets another."""
        return attempts_made < self.max_attempts
