"""The concurrency controller against simulated stores: synthetic completions with their own
clock, so every trajectory is exact and nothing depends on how loaded the machine is."""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from insitu.engine.concurrency import AdaptiveLimiter, ConcurrencyController, is_throttled

CHUNK = 100_000  # bytes per request


@dataclass
class SimStore:
    """Requests that take ``latency(t)`` seconds, served at most ``capacity`` per second (more in
    flight queue at the server, Little's law), throttled (HTTP 503) when more than ``throttle_above``
    are in flight; decoders that keep up with ``decode_per_s`` requests per second."""

    latency: Callable[[float], float]
    capacity: float = float("inf")
    throttle_above: int | None = None
    decode_per_s: float = float("inf")
    throttles: int = 0
    limits: list[tuple[float, int]] = field(default_factory=list)

    def run(self, ctl: ConcurrencyController, seconds: float) -> ConcurrencyController:
        """Keep ``ctl.limit`` requests in flight (demand always exceeds it) for ``seconds``."""
        t = 0.0
        inflight: list[tuple[float, int, bool]] = []  # (done at, seq, throttled)
        seq = 0
        decode_busy_s = 0.0
        while t < seconds:
            while len(inflight) < ctl.limit:
                n = len(inflight) + 1
                throttled = self.throttle_above is not None and n > self.throttle_above
                took = max(self.latency(t), n / self.capacity)
                heapq.heappush(inflight, (t + took, seq, throttled))
                seq += 1
            t, _, throttled = heapq.heappop(inflight)
            if throttled:
                self.throttles += 1
                ctl.congested(t, "throttled")
            else:
                # Each chunk costs the decoders 1/decode_per_s of their time.
                decode_busy_s += 1 / self.decode_per_s
                ctl.completed(t, CHUNK, waiting=True, decode_busy_s=decode_busy_s)
            self.limits.append((t, ctl.limit))
        return ctl

    def limits_after(self, t0: float) -> list[int]:
        return [limit for t, limit in self.limits if t >= t0]


def test_latency_bound_store_doubles_until_the_decoders_are_busy() -> None:
    # 20 ms per GET, decoders good for 3,000 chunks/s: ~60 in flight keep them busy.
    store = SimStore(latency=lambda t: 0.020, decode_per_s=3000)
    ctl = store.run(ConcurrencyController(256, start=8), seconds=2.0)
    assert [c.limit for c in ctl.trajectory] == [8, 16, 32, 64]
    assert [c.reason for c in ctl.trajectory] == ["start", "rising", "rising", "rising"]
    assert set(store.limits_after(0.5)) == {64}
    assert ctl.summary() == {
        "limit": 64,
        "cap": 256,
        "min": 8,
        "max": 64,
        "changes": 3,
        "congestion_events": 0,
    }


def test_never_above_the_users_cap() -> None:
    store = SimStore(latency=lambda t: 0.100)  # far more wanted than allowed
    ctl = store.run(ConcurrencyController(48, start=8), seconds=3.0)
    assert max(limit for _, limit in store.limits) == 48
    assert ctl.limit == 48
    assert [c.limit for c in ctl.trajectory] == [8, 16, 32, 48]


def test_latency_rising_mid_epoch_raises_the_limit_to_deliver_as_much() -> None:
    # 5 ms per GET for 2 s, then 50 ms: decoders good for 3,000/s need ~15, then ~150 in flight.
    # Settled where the decoders are busy again (85%: 128 x 20/s = 2,560 of 3,000/s), far from the cap.
    store = SimStore(latency=lambda t: 0.005 if t < 2.0 else 0.050, decode_per_s=3000)
    ctl = store.run(ConcurrencyController(512, start=8), seconds=6.0)
    before = store.limits_after(1.0)[: len([t for t, _ in store.limits if 1.0 <= t < 2.0])]
    assert set(before) == {16}  # 16 x 200/s = 3,200/s: the decoders are the bound
    assert min(store.limits_after(4.0)) == 128
    assert [c.limit for c in ctl.trajectory] == [8, 16, 32, 64, 128]
    assert all(c.at_s > 2.0 for c in ctl.trajectory[2:])  # each raise came after the latency rose
    assert ctl.congestion_events == 0


def test_saturated_store_gains_nothing_from_more_and_the_raise_is_undone() -> None:
    # The server answers at most 1,000 requests/s whatever is in flight (10 ms base latency).
    store = SimStore(latency=lambda t: 0.010, capacity=1000)
    ctl = store.run(ConcurrencyController(256, start=4), seconds=5.0)
    limits = store.limits_after(1.0)
    assert max(limits) <= 20  # probes go up a quarter and come back: never a creep to the cap
    assert ctl.limit in (8, 10, 16)
    assert "plateau" in [c.reason for c in ctl.trajectory]


def test_throttling_store_backs_off_and_stays_near_the_point_it_throttles() -> None:
    store = SimStore(latency=lambda t: 0.020, throttle_above=40)
    ctl = store.run(ConcurrencyController(256, start=8), seconds=10.0)
    later = store.limits_after(2.0)
    assert max(later) <= 50  # a probe may overshoot by a quarter, then it is halved
    assert min(later) >= 20  # halved from at most 50: never collapses below
    reasons = {c.reason for c in ctl.trajectory}
    assert {"throttled", "recover"} <= reasons
    # Congestion halves at most once per window: far fewer backoffs than throttled responses.
    backoffs = sum(c.reason == "throttled" for c in ctl.trajectory)
    assert 1 <= backoffs < store.throttles


def test_congestion_halves_once_per_window_and_floor_is_one() -> None:
    ctl = ConcurrencyController(64, start=64)
    for i in range(20):
        ctl.congested(0.001 * i, "timeout")  # one burst: one window
    assert ctl.limit == 32
    assert ctl.congestion_events == 20
    for k in range(12):  # a window of completions between each signal
        t = 1.0 + k
        for j in range(ctl.limit):
            ctl.completed(t + 0.001 * (j + 1), CHUNK, waiting=False, decode_busy_s=0.0)
        ctl.congested(t + 0.5, "error")
    assert ctl.limit == 1
    assert [c.limit for c in ctl.trajectory][:4] == [64, 32, 16, 8]


def test_no_raise_without_demand_or_with_busy_decoders() -> None:
    for waiting, utilisation in ((False, 0.0), (True, 0.95)):
        ctl = ConcurrencyController(256, start=8)
        for i in range(1000):
            now = 0.001 * (i + 1)
            ctl.completed(now, CHUNK, waiting=waiting, decode_busy_s=utilisation * now)
        assert ctl.limit == 8
        assert len(ctl.trajectory) == 1


def test_limits_since_gives_a_pass_its_part_of_the_trajectory() -> None:
    store = SimStore(latency=lambda t: 0.020)
    ctl = store.run(ConcurrencyController(64, start=8), seconds=0.2)
    assert ctl.limits_since(0) == [c.limit for c in ctl.trajectory]
    assert ctl.limits_since(ctl.changes) == [ctl.limit]
    assert ctl.limits_since(2) == [c.limit for c in ctl.trajectory][1:]


def test_bad_cap_is_named() -> None:
    with pytest.raises(ValueError, match="cap must be >= 1, got 0"):
        ConcurrencyController(0)


class _SlowDown(Exception):
    pass


class _HTTPError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__("x")
        self.status = status


def test_throttling_is_classified_by_type_and_status_not_message() -> None:
    _SlowDown.__name__ = "SlowDown"
    assert is_throttled(_SlowDown())
    assert is_throttled(_HTTPError(503))
    assert is_throttled(_HTTPError(429))
    assert not is_throttled(_HTTPError(404))
    assert not is_throttled(ConnectionError("503 SlowDown please"))  # message text is not a type
    wrapped = OSError("wrapped")
    wrapped.__cause__ = _HTTPError(503)
    assert is_throttled(wrapped)


def test_limiter_follows_the_limit_and_hands_slots_on() -> None:
    async def main() -> list[int]:
        ctl = ConcurrencyController(8, start=2)
        limiter = AdaptiveLimiter(ctl)
        running, peak = [0], []
        gate = asyncio.Event()

        async def one() -> None:
            async with limiter:
                running[0] += 1
                peak.append(running[0])
                await gate.wait()
                running[0] -= 1

        tasks = [asyncio.create_task(one()) for _ in range(6)]
        await asyncio.sleep(0)
        assert running[0] == 2
        assert limiter.waiting
        ctl.limit = 5
        limiter.wake()
        await asyncio.sleep(0)
        assert running[0] == 5
        tasks[-1].cancel()  # a cancelled waiter gives up its place without leaking a slot
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert limiter.in_use == 0
        return peak

    assert max(asyncio.run(main())) == 5


def test_waiters_cancelled_together_while_slots_free_up_leave_cleanly() -> None:
    # What stopping a pass mid-epoch does (the exit handler cancels every task of the engine in
    # one sweep): the task holding a slot is cancelled first and gives its slot back before the
    # cancelled waiters resume, and wake() then drops their cancelled futures from the queue. Each
    # waiter must still end with its CancelledError, not a ValueError from looking for its future
    # in the queue (hundreds of "Task exception was never retrieved" at exit).
    async def main() -> tuple[list[BaseException | None], int]:
        limiter = AdaptiveLimiter(ConcurrencyController(8, start=1))

        async def one() -> None:
            async with limiter:
                await asyncio.Event().wait()  # a request that never returns

        tasks = [asyncio.create_task(one()) for _ in range(4)]
        await asyncio.sleep(0)
        assert limiter.in_use == 1
        assert limiter.waiting
        for task in tasks:  # the slot's holder first, as the tasks were made
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        return [r if isinstance(r, BaseException) else None for r in results], limiter.in_use

    errors, in_use = asyncio.run(main())
    assert all(isinstance(e, asyncio.CancelledError) for e in errors), errors
    assert in_use == 0
