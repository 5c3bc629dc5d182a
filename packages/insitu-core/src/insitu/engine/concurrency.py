"""Choosing how many requests are in flight to one store: a congestion controller and its limiter.

The right concurrency differs per store, region, chunk size and hour: at 20 ms
per GET one-sample chunks need ~60 requests in flight to keep two decode
threads busy, at 100 ms ~300, and an object store that throttles (HTTP 503
SlowDown, 429) wants fewer. :class:`ConcurrencyController` finds it the way a
TCP sender finds its window, from what the engine observes, never from the
wall clock itself (every observation carries its own time, so the logic is
deterministic and tested with synthetic stores):

* it measures delivered bytes per second over *windows* of at least ``limit``
  completed requests (about one round trip each);
* while demand exceeds the limit (requests wait for a slot) and the decode
  threads have slack, it doubles the limit as long as each raise paid for
  itself (throughput up by ``min_gain``), then holds: a plateau means the
  store, the link or the decoders set the pace, not the concurrency;
* holding, it raises again when throughput falls with demand still waiting
  and decoders idle (latency rose: more must be in flight to deliver the
  same), and probes one step up every ``probe_every`` windows;
* a raise that bought less than ``min_gain`` is undone (a store or link
  that is saturated gains nothing from more requests, and they would only
  hold memory);
* a throttled response, a timeout or a retried error halves the limit, at most
  once per window (a burst of 503s from one round trip is one signal); it
  then climbs back one request per window to just below where congestion
  struck (additive increase), and probes from there;
* it never exceeds ``cap`` (the user's ``max_inflight``) nor goes below 1.

:class:`AdaptiveLimiter` is the asyncio side: a semaphore whose size is the
controller's current limit. :class:`FetchGovernor` ties the two to what the
engine observes, and is what the rest of the engine asks about the limit.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from insitu.stats import InflightGauges

#: HTTP statuses object stores answer when a client asks too fast (S3 SlowDown is a 503).
THROTTLING_STATUSES = frozenset({429, 503})
#: Exception class names backends use for throttling (botocore, Azure, GCS clients): matched by type name.
THROTTLING_TYPE_NAMES = frozenset({"SlowDown", "ThrottlingException", "TooManyRequests", "Throttled"})


def is_throttled(error: BaseException) -> bool:
    """True when ``error`` (or an error it was raised from) is the store asking the client to slow
    down: an HTTP 429/503 status on the exception (``status``, ``status_code`` or ``code``), or a
    throttling exception type. Classified by type and status, never by message text."""
    seen: set[int] = set()
    err: BaseException | None = error
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if type(err).__name__ in THROTTLING_TYPE_NAMES:
            return True
        for attr in ("status", "status_code", "code"):
            if getattr(err, attr, None) in THROTTLING_STATUSES:
                return True
        err = err.__cause__ or err.__context__
    return False


@dataclass(frozen=True)
class LimitChange:
    """One point of the controller's trajectory: from ``at_s`` on, ``limit`` requests in flight."""

    at_s: float  #: seconds since the first observation
    limit: int
    reason: str  #: "start", "rising", "latency", "probe", "throttled", "timeout", "error", "retried"
    seq: int = 0  #: the change's number over the controller's life (0: its start)


class ConcurrencyController:
    """Chooses the number of requests in flight from observed completions (see the module doc)."""

    MIN_WINDOW = 4  # completions: fewer make the throughput of one window mostly noise
    MAX_TRAJECTORY = 512  # changes kept (the first ones and the latest): bounded memory over long runs

    def __init__(
        self,
        cap: int,
        *,
        start: int | None = None,
        min_gain: float = 0.1,
        probe_every: int = 8,
        busy_above: float = 0.85,
    ) -> None:
        if cap < 1:
            raise ValueError(f"cap must be >= 1, got {cap}")
        self.cap = cap
        self.limit = max(1, min(cap, start if start is not None else cap))
        self.min_gain = min_gain
        self.probe_every = probe_every
        self.busy_above = busy_above  # decode utilisation above which the decoders set the pace
        self.congestion_events = (
            0  # throttles, timeouts and errors seen (each halving at most once per window)
        )
        self.trajectory: list[LimitChange] = []
        self.changes = 0  # limit changes over the controller's life, its start included
        self._origin: float | None = None
        self._slow_start = True
        self._recover_to = 0  # after congestion: the limit to climb back to one request at a time
        self._raised = False
        self._before_raise = self.limit  # the last window ended with a raise: the next one judges it
        self._ref_rate: float | None = None  # throughput of the last window that judged the limit
        self._plateau_rate: float | None = None
        self._holds = 0
        self._start: float | None = None
        self._n = self._bytes = self._waiting = 0
        self._busy_s = 0.0
        self._busy_at_start = 0.0
        self._decreased = False
        self._new_window(None)
        self._changed(0.0, "start")

    # -- observations ----------------------------------------------------------------------------
    def completed(self, now: float, nbytes: int, *, waiting: bool, decode_busy_s: float) -> None:
        """A request finished at ``now`` (seconds, any monotonic origin) with ``nbytes``.

        ``waiting``: other requests were queued for a slot (demand exceeds the limit);
        ``decode_busy_s``: seconds the decode threads have worked so far, per thread (their
        utilisation over a window is its growth over the window's length: sampled at bursty
        completions, a queue length would read busy whenever a round trip lands at once)."""
        if self._origin is None:
            self._origin = now
        if self._start is None:
            self._start = now
            self._busy_at_start = decode_busy_s
        self._n += 1
        self._bytes += nbytes
        self._waiting += waiting
        self._busy_s = decode_busy_s
        if self._n >= max(self.limit, self.MIN_WINDOW) and now > self._start:
            self._end_window(now)

    def congested(self, now: float, reason: str) -> None:
        """The store throttled, a request timed out or failed (``reason``): back off."""
        if self._origin is None:
            self._origin = now
        self.congestion_events += 1
        if self._decreased:
            return  # one decrease per window: the rest of this round trip saw the same congestion
        self._slow_start = self._raised = False
        self._ref_rate = self._plateau_rate = None
        self._holds = 0
        # Climb back one request per window to just below where it struck, then probe as usual.
        self._recover_to = self.limit - 1
        self._new_window(now, decreased=True)
        self._set(now, self.limit // 2, reason)

    # -- reading back ----------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """The current limit and cap, the lowest and highest limits chosen, the number of changes and the
        congestion events seen: a JSON-able dict for statistics and reports."""
        limits = [c.limit for c in self.trajectory]
        return {
            "limit": self.limit,
            "cap": self.cap,
            "min": min(limits),
            "max": max(limits),
            "changes": len(self.trajectory) - 1,
            "congestion_events": self.congestion_events,
        }

    def describe(self) -> str:
        """The trajectory in a few words for a log line: ``8 -> 16 -> 32 (cap 256)``."""
        limits = [c.limit for c in self.trajectory]
        if len(limits) > 8:
            limits_s = " -> ".join(map(str, limits[:3])) + " -> ... -> " + " -> ".join(map(str, limits[-3:]))
        else:
            limits_s = " -> ".join(map(str, limits))
        return f"{limits_s} (cap {self.cap})"

    # -- the decision ----------------------------------------------------------------------------
    def _end_window(self, now: float) -> None:
        assert self._start is not None
        rate = self._bytes / (now - self._start)
        binding = 2 * self._waiting >= self._n  # requests waited for a slot in most of the window
        slack = (self._busy_s - self._busy_at_start) / (now - self._start) < self.busy_above
        decreased = self._decreased
        self._new_window(now)
        if decreased or not (binding and slack):
            # Congestion just halved the limit, or the limit did not set the pace (too little
            # demand, or decoders behind): nothing to learn about concurrency from this window.
            self._raised = False
            self._ref_rate = None
            return
        ref, raised = self._ref_rate, self._raised
        self._ref_rate = rate
        self._raised = False
        if raised and ref is not None:
            if rate >= ref * (1 + self.min_gain):
                self._raise(now, "rising")
            else:  # the raise bought nothing: back to the limit that delivered as much
                self._slow_start = False
                self._plateau_rate = rate
                self._holds = 0
                self._set(now, self._before_raise, "plateau")
            return
        if self.limit < self._recover_to:
            # Back towards where congestion struck, one request per window (not judged: each
            # step is too small to measure, and the congestion signal bounds it).
            self._set(now, self.limit + 1, "recover")
            return
        if self._slow_start:
            self._raise(now, "rising")
            return
        self._holds += 1
        if self._plateau_rate is not None and rate < self._plateau_rate * (1 - 2 * self.min_gain):
            # Same demand, idle decoders, less delivered: each request takes longer now.
            self._slow_start = True
            self._plateau_rate = None
            self._raise(now, "latency")
        elif self._holds >= self.probe_every:
            self._raise(now, "probe")

    def _raise(self, now: float, reason: str) -> None:
        """A step up that the next window judges (kept if throughput follows, else undone)."""
        self._holds = 0
        if self.limit >= self.cap:
            return
        new = self.limit * 2 if self._slow_start else self.limit + max(1, self.limit // 4)
        self._before_raise = self.limit
        self._raised = True
        self._set(now, new, reason)

    def _set(self, now: float, limit: int, reason: str) -> None:
        limit = max(1, min(self.cap, limit))
        if limit != self.limit:
            self.limit = limit
            self._changed(now, reason)

    def _new_window(self, now: float | None, *, decreased: bool = False) -> None:
        self._start = now
        self._n = self._bytes = self._waiting = 0
        # Decoder time is cumulative: the new window starts from the latest reading.
        self._busy_at_start = self._busy_s
        self._decreased = decreased

    def _changed(self, now: float, reason: str) -> None:
        at = now - self._origin if self._origin is not None else 0.0
        if len(self.trajectory) >= self.MAX_TRAJECTORY:
            del self.trajectory[self.MAX_TRAJECTORY // 2]  # keep the start and the latest
        self.trajectory.append(LimitChange(at, self.limit, reason, self.changes))
        self.changes += 1

    def limits_since(self, seq: int) -> list[int]:
        """The limit in force at change ``seq`` and every limit chosen after it (a pass's trajectory)."""
        kept = [c for c in self.trajectory if c.seq >= seq]
        earlier = [c for c in self.trajectory if c.seq < seq]
        return ([earlier[-1].limit] if earlier else []) + [c.limit for c in kept]


class AdaptiveLimiter:
    """An asyncio semaphore whose size follows ``controller.limit`` (on the loop thread only).

    ``waiting`` says whether requests are queued for a slot, which the controller reads as
    demand above the limit."""

    def __init__(self, controller: ConcurrencyController) -> None:
        self.controller = controller
        self.in_use = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def waiting(self) -> bool:
        """Whether requests are queued for a slot (demand above the limit)."""
        return bool(self._waiters)

    async def acquire(self) -> None:
        """Wait for a slot under the controller's current limit (first come, first served)."""
        if self.in_use < self.controller.limit and not self._waiters:
            self.in_use += 1
            return
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except BaseException:
            if fut.done() and not fut.cancelled():
                self.release()  # granted, then cancelled before using it: hand the slot on
            elif fut in self._waiters:  # wake() drops futures it finds cancelled: maybe gone
                self._waiters.remove(fut)
            raise

    def release(self) -> None:
        """Give a slot back and hand free slots to waiters."""
        self.in_use -= 1
        self.wake()

    def wake(self) -> None:
        """Grant slots to waiters while the (maybe just raised) limit allows."""
        while self._waiters and self.in_use < self.controller.limit:
            fut = self._waiters.popleft()
            if not fut.done():
                self.in_use += 1
                fut.set_result(None)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()


class FetchGovernor:
    """One store's request budget: the limiter every remote read holds, fed by what each read saw.

    ``demand()`` says whether reads are queued beyond those waiting on the limiter (the fetch
    queue); ``decode_busy_s()`` the seconds each decode thread has worked on average; ``retries()`` the
    transient errors retried so far by whichever layer retries (each new one is congestion).
    The limit, its trajectory and its gauges are read here, not off the controller.
    """

    def __init__(
        self,
        limiter: AdaptiveLimiter,
        *,
        demand: Callable[[], bool],
        decode_busy_s: Callable[[], float],
        retries: Callable[[], int],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.controller = limiter.controller
        self.limiter = limiter
        self._demand = demand
        self._decode_busy_s = decode_busy_s
        self._retries = retries
        self._clock = clock
        self._seen_retries = 0

    def succeeded(self, raw: Any) -> None:
        """A read returned ``raw`` (bytes-like, or None for a missing object); call before releasing its slot."""
        now = self._clock()
        self._note_retries(now)
        ctl = self.controller
        before = ctl.limit
        ctl.completed(
            now,
            0 if raw is None else len(raw),
            waiting=self.limiter.waiting or self._demand(),
            decode_busy_s=self._decode_busy_s(),
        )
        if ctl.limit > before:
            self.limiter.wake()

    def failed(self, error: BaseException) -> None:
        """A read failed (after the retry layer gave up)."""
        now = self._clock()
        self._note_retries(now)
        reason = (
            "throttled" if is_throttled(error) else "timeout" if isinstance(error, TimeoutError) else "error"
        )
        self.controller.congested(now, reason)

    # -- reading back ----------------------------------------------------------------------------
    @property
    def limit(self) -> int:
        """The number of requests allowed in flight now."""
        return self.controller.limit

    def trajectory(self) -> tuple[LimitChange, ...]:
        """Every change of the limit kept so far (see :attr:`ConcurrencyController.trajectory`)."""
        return tuple(self.controller.trajectory)

    def limits_since(self, seq: int) -> tuple[int, ...]:
        """The limit in force at change ``seq`` and every limit chosen after it."""
        return tuple(self.controller.limits_since(seq))

    def gauges(self) -> InflightGauges:
        """The limit now, the most it allowed, its changes and the congestion events, for statistics."""
        summary = self.controller.summary()
        return InflightGauges(
            inflight_limit=summary["limit"],
            inflight_limit_max=summary["max"],
            inflight_changes=summary["changes"],
            congestion_events=summary["congestion_events"],
        )

    def _note_retries(self, now: float) -> None:
        retries = self._retries()
        if retries > self._seen_retries:
            self._seen_retries = retries
            self.controller.congested(now, "retried")
