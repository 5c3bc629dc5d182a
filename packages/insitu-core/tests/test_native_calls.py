"""native_call: a request a native runtime serves runs to its end even when its caller is cancelled,
and is counted until then, so the interpreter's exit can wait for it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from insitu.store import native_calls
from insitu.store.loop import get_loop, run_sync


def test_a_cancelled_caller_leaves_the_request_running_and_counted() -> None:
    release = threading.Event()
    answered: list[str] = []

    async def scenario() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        request: asyncio.Future[str] = loop.create_future()

        def native_thread() -> None:  # stands in for a runtime's thread answering later
            release.wait(30)
            loop.call_soon_threadsafe(request.set_result, "answer")
            answered.append("answer")

        threading.Thread(target=native_thread, daemon=True).start()
        caller = asyncio.ensure_future(native_calls.native_call(request))
        await asyncio.sleep(0)
        caller.cancel()
        await asyncio.gather(caller, return_exceptions=True)
        return caller.cancelled(), request.cancelled()

    before = native_calls.in_flight()
    caller_cancelled, request_cancelled = run_sync(scenario())
    assert caller_cancelled
    assert not request_cancelled
    assert native_calls.in_flight() == before + 1
    assert not native_calls.wait_until_idle(0.05)  # still out there

    release.set()
    assert native_calls.wait_until_idle(30)
    assert native_calls.in_flight() == before
    assert answered == ["answer"]


def test_a_failed_request_is_counted_out_and_its_error_raised() -> None:
    async def scenario() -> None:
        request: asyncio.Future[str] = get_loop().create_future()
        request.set_exception(ConnectionResetError("peer went away"))
        await native_calls.native_call(request)

    with pytest.raises(ConnectionResetError, match="peer went away"):
        run_sync(scenario())
    assert native_calls.wait_until_idle(5)
