"""Room in a pass's batch queue: the emitter waits at ``prefetch`` batches out, a consumer on any
thread gives room back, and the loop is woken only when the emitter is waiting for it."""

from __future__ import annotations

import asyncio
import sys
import threading

import pytest

from insitu.engine.credits import BatchCredits


def test_credits_run_out_at_n_and_come_back_from_another_thread() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        credits = BatchCredits(loop, 2)
        await credits.acquire()
        await credits.acquire()
        assert credits.outstanding == 2
        third = asyncio.ensure_future(credits.acquire())
        await asyncio.sleep(0.01)
        assert not third.done()  # waits for room
        threading.Thread(target=credits.give_back).start()
        await asyncio.wait_for(third, 5)
        assert credits.outstanding == 2

    asyncio.run(run())


def test_a_consumer_that_keeps_up_never_wakes_the_loop() -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        wakes = []
        real = loop.call_soon_threadsafe

        def spy(*args):
            wakes.append(args)
            return real(*args)

        loop.call_soon_threadsafe = spy  # type: ignore[method-assign]
        credits = BatchCredits(loop, 3)
        for _ in range(100):
            await credits.acquire()
            credits.give_back()
        assert wakes == []
        assert credits.outstanding == 0

    asyncio.run(run())


def test_every_batch_flows_when_both_sides_race() -> None:
    # A consumer thread giving back as fast as it can against an emitter taking as fast as it can:
    # a give-back that lands between the emitter's look and its wait must still wake it. The
    # interpreter switches threads every microsecond here, so that window is hit.
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        credits = BatchCredits(loop, 1)
        n = 3000
        handed = asyncio.Queue()  # type: asyncio.Queue[int]
        taken = threading.Semaphore(0)

        def consumer() -> None:
            for _ in range(n):
                taken.acquire()
                credits.give_back()

        t = threading.Thread(target=consumer)
        t.start()
        for i in range(n):
            await asyncio.wait_for(credits.acquire(), 10)
            handed.put_nowait(i)
            taken.release()
        await asyncio.to_thread(t.join, 10)
        assert handed.qsize() == n
        assert credits.outstanding == 0

    try:
        asyncio.run(run())
    finally:
        sys.setswitchinterval(old_interval)


def test_a_cancelled_wait_leaves_no_waiter_behind() -> None:
    async def run() -> None:
        credits = BatchCredits(asyncio.get_running_loop(), 1)
        await credits.acquire()
        waiting = asyncio.ensure_future(credits.acquire())
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        credits.give_back()  # nothing waits: no wake-up to schedule
        assert credits.outstanding == 0
        await asyncio.wait_for(credits.acquire(), 5)

    asyncio.run(run())


def test_no_room_at_all_is_refused() -> None:
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(ValueError, match="at least one batch, got 0"):
            BatchCredits(loop, 0)
    finally:
        loop.close()


def test_a_credit_given_back_just_before_the_wait_is_not_missed() -> None:
    # The consumer's give-back lands after the emitter found no room but before it published its
    # waiter: the give-back then sees no waiter to wake, so the emitter must see the credit itself.
    async def run() -> None:
        loop = asyncio.get_running_loop()
        credits = BatchCredits(loop, 1)
        await credits.acquire()

        class GiveBackFirst:
            """The loop, as the credits see it, with a give-back just as the emitter makes its waiter."""

            def create_future(self) -> asyncio.Future[None]:
                credits.give_back()  # as if from the consumer's thread, at the worst moment
                return loop.create_future()

            def call_soon_threadsafe(self, *args):
                return loop.call_soon_threadsafe(*args)

        credits._loop = GiveBackFirst()  # type: ignore[assignment]
        await asyncio.wait_for(credits.acquire(), 2)
        assert credits.outstanding == 1

    asyncio.run(run())
