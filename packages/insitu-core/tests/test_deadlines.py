"""Time limits of store requests, checked by one sweep per loop: a request past its limit ends in
TimeoutError, anything else (a result, an error, a cancellation from elsewhere) as it came."""

from __future__ import annotations

import asyncio
import time

import pytest

from insitu.store import deadlines
from insitu.store.deadlines import within


def _sweeper() -> deadlines._Sweeper:
    return deadlines._SWEEPERS[asyncio.get_running_loop()]


def test_a_request_past_its_limit_ends_in_timeout_error_within_an_eighth_more() -> None:
    async def main() -> float:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await within(0.2, asyncio.Event().wait)  # never set
        return time.monotonic() - started

    took = asyncio.run(main())
    assert took >= 0.2
    assert took < 0.2 * (1 + deadlines.SWEEP_SHARE) + 2.0  # generous: a loaded machine delays timers


def test_a_request_in_time_returns_its_result_and_leaves_nothing_behind() -> None:
    async def answer() -> int:
        await asyncio.sleep(0.001)
        return 42

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        results = await asyncio.gather(*(within(5.0, answer) for _ in range(200)))
        assert results == [42] * 200
        assert not _sweeper().attempts
        assert task.cancelling() == 0
        await asyncio.sleep(5.0 * deadlines.SWEEP_SHARE + 0.1)  # one sweep, which finds nothing
        assert _sweeper().timer is None  # idle: no timer left running

    asyncio.run(main())


def test_only_the_requests_past_their_limit_time_out() -> None:
    async def request(seconds: float) -> float:
        await asyncio.sleep(seconds)
        return seconds

    async def main() -> list[object]:
        return await asyncio.gather(
            *(within(0.3, lambda s=s: request(s)) for s in (0.01, 5.0, 0.02, 5.0, 0.03)),
            return_exceptions=True,
        )

    out = asyncio.run(main())
    assert [out[0], out[2], out[4]] == [0.01, 0.02, 0.03]
    assert [type(out[1]), type(out[3])] == [TimeoutError, TimeoutError]


def test_a_cancellation_from_elsewhere_passes_through_as_a_cancellation() -> None:
    async def main() -> None:
        inner = asyncio.create_task(within(10.0, asyncio.Event().wait))
        await asyncio.sleep(0.01)
        inner.cancel()
        with pytest.raises(asyncio.CancelledError):
            await inner
        assert not _sweeper().attempts

    asyncio.run(main())


def test_a_cancellation_from_elsewhere_after_the_limit_is_not_turned_into_a_timeout() -> None:
    # Both the sweep and the caller asked the task to stop: the caller's request wins, as with
    # asyncio.timeout, so a cancelled pass is never reported as a slow store.
    async def main() -> None:
        inner = asyncio.create_task(within(0.05, asyncio.Event().wait))
        await asyncio.sleep(0)  # the attempt is registered

        sweeper = _sweeper()
        (attempt,) = sweeper.attempts
        sweeper.attempts.discard(attempt)
        attempt.expired = True
        inner.cancel()  # the sweep's cancellation...
        inner.cancel()  # ...and the caller's
        with pytest.raises(asyncio.CancelledError):
            await inner

    asyncio.run(main())


def test_a_request_that_swallows_the_cancellation_keeps_its_result_and_the_count_is_restored() -> None:
    async def stubborn() -> str:
        try:
            await asyncio.sleep(10.0)
        except asyncio.CancelledError:
            return "finished anyway"
        return "slept"

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        assert await within(0.05, stubborn) == "finished anyway"
        assert task.cancelling() == 0  # no cancellation left pending for the caller's next await
        await asyncio.sleep(0.01)

    asyncio.run(main())


def test_a_shorter_limit_makes_the_sweep_look_sooner() -> None:
    async def main() -> float:
        slow = asyncio.create_task(within(60.0, asyncio.Event().wait))
        await asyncio.sleep(0)
        assert _sweeper().every_s == pytest.approx(60.0 * deadlines.SWEEP_SHARE)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await within(0.2, asyncio.Event().wait)
        took = time.monotonic() - started
        assert _sweeper().every_s == pytest.approx(0.2 * deadlines.SWEEP_SHARE)
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        return took

    assert asyncio.run(main()) < 5.0  # not the 60 s request's pace


def test_an_error_of_the_request_passes_through() -> None:
    async def broken() -> None:
        raise ConnectionError("reset")

    async def main() -> None:
        with pytest.raises(ConnectionError, match="reset"):
            await within(1.0, broken)
        assert not _sweeper().attempts

    asyncio.run(main())


def test_every_loop_has_its_own_sweep_and_a_closed_loop_is_forgotten() -> None:
    import gc

    async def once() -> int:
        return await within(1.0, lambda: asyncio.sleep(0, 7))

    before = len(deadlines._SWEEPERS)
    for _ in range(3):
        assert asyncio.run(once()) == 7
    gc.collect()
    assert len(deadlines._SWEEPERS) <= before  # each run's loop is gone, and its sweep with it
