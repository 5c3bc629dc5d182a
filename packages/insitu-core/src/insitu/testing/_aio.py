"""One event loop on a daemon thread for the kit's direct async store calls.

A persistent loop, not ``asyncio.run`` per call: the engine also keeps one
loop alive, and a store that binds a client session to the loop it first ran
on should pass or fail here exactly as it would under the engine.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()

#: Generous: a conformance call that takes this long is hung, not slow.
TIMEOUT_S = 120.0


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the kit's loop and return its result."""
    global _loop
    with _lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="insitu-testing-loop", daemon=True).start()
        loop = _loop
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=TIMEOUT_S)
