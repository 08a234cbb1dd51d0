"""A flag that ends a wait at once when it is set: what :class:`asyncio.Event` gives, for a
loop that waits on it every turn beside another future.

``Event.wait()`` beside a future takes a Task of its own (through ``asyncio.wait`` or
``asyncio.wait_for``), their futures and callbacks, and a cancellation to end the one
that lost. :meth:`Wake.wait` takes one future and one timer handle: the manager's loop
waits once a turn or so, and a turn is a page's worth of work on one site.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["Wake"]


class Wake:
    """A flag; :meth:`wait` returns once it is set, another future is done, or a timeout
    has passed. Not thread-safe: from another thread, ``loop.call_soon_threadsafe(wake.set)``."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None]] = []

    def set(self) -> None:
        """Set the flag and end every wait under way."""
        self._set = True
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)

    def is_set(self) -> bool:
        return self._set

    def clear(self) -> None:
        self._set = False

    async def wait(self, timeout_s: float, also: asyncio.Future[Any] | None = None) -> bool:
        """Wait until the flag is set, ``also`` (if given) is done, or ``timeout_s`` has
        passed; whether the flag is set. Cancelling the wait leaves ``also`` alone."""
        if self._set or (also is not None and also.done()):
            return self._set
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()

        def release(_: object = None) -> None:
            if not waiter.done():
                waiter.set_result(None)

        timer = loop.call_later(max(0.0, timeout_s), release)
        if also is not None:
            also.add_done_callback(release)
        self._waiters.append(waiter)
        try:
            await waiter
        finally:
            self._waiters.remove(waiter)
            timer.cancel()
            if also is not None:
                also.remove_done_callback(release)
        return self._set
