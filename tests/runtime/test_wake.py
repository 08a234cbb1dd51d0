import asyncio
import time

import pytest

from drumbeat.runtime.wake import Wake


def test_a_set_flag_returns_at_once_and_stays_set_until_cleared() -> None:
    async def main() -> None:
        wake = Wake()
        wake.set()
        assert await wake.wait(30) is True
        assert wake.is_set()
        wake.clear()
        assert not wake.is_set()
        assert await wake.wait(0.01) is False

    asyncio.run(main())


def test_set_from_a_callback_ends_the_wait() -> None:
    async def main() -> None:
        wake = Wake()
        asyncio.get_running_loop().call_later(0.01, wake.set)
        started = time.monotonic()
        assert await wake.wait(30) is True
        assert time.monotonic() - started < 10

    asyncio.run(main())


def test_the_other_future_ends_the_wait_and_keeps_its_result() -> None:
    async def main() -> None:
        wake = Wake()
        other = asyncio.ensure_future(asyncio.sleep(0.01, result="done"))
        assert await wake.wait(30, other) is False
        assert other.done() and other.result() == "done"
        # A future that is done already: no wait at all.
        assert await wake.wait(30, other) is False

    asyncio.run(main())


def test_the_timeout_ends_the_wait_and_leaves_the_other_future_alone() -> None:
    async def main() -> None:
        wake = Wake()
        other: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        assert await wake.wait(0.01, other) is False
        assert not other.done()
        # The finished wait left nothing on it: its end does not end a later wait.
        later = asyncio.ensure_future(wake.wait(30))
        other.set_result(None)
        await asyncio.sleep(0.05)
        assert not later.done()
        wake.set()
        assert await later is True

    asyncio.run(main())


def test_every_waiter_is_woken_and_a_cancelled_one_leaves_nothing_behind() -> None:
    async def main() -> None:
        wake = Wake()
        waits = [asyncio.ensure_future(wake.wait(30)) for _ in range(3)]
        await asyncio.sleep(0)
        waits[0].cancel()
        with pytest.raises(asyncio.CancelledError):
            await waits[0]
        wake.set()
        assert await asyncio.gather(*waits[1:]) == [True, True]
        # Cleared, it makes a new wait wait again.
        wake.clear()
        assert await wake.wait(0.01) is False

    asyncio.run(main())
