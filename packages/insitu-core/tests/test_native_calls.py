"""native_call: a request a native runtime serves runs to its end even when its caller is cancelled,
and is counted until then, so the interpreter's exit can wait for it."""

from __future__ import annotations

import asyncio
import threading

import pytest

from insitu.store import loop as engine_loop


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
        caller = asyncio.ensure_future(engine_loop.native_call(request))
        await asyncio.sleep(0)
        caller.cancel()
        await asyncio.gather(caller, return_exceptions=True)
        return caller.cancelled(), request.cancelled()

    before = engine_loop.in_flight()
    caller_cancelled, request_cancelled = engine_loop.run_sync(scenario())
    assert caller_cancelled
    assert not request_cancelled
    assert engine_loop.in_flight() == before + 1
    assert not engine_loop.wait_until_idle(0.05)  # still out there

    release.set()
    assert engine_loop.wait_until_idle(30)
    assert engine_loop.in_flight() == before
    assert answered == ["answer"]


def test_a_failed_request_is_counted_out_and_its_error_raised() -> None:
    async def scenario() -> None:
        request: asyncio.Future[str] = engine_loop.get_loop().create_future()
        request.set_exception(ConnectionResetError("peer went away"))
        await engine_loop.native_call(request)

    with pytest.raises(ConnectionResetError, match="peer went away"):
        engine_loop.run_sync(scenario())
    assert engine_loop.wait_until_idle(5)
