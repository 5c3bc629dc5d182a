"""Opt-in progress for long passes: a tqdm bar when tqdm is installed, plain lines otherwise.

Library code never shows progress unless asked (``progress=True``, or a
callable to receive updates); with tqdm (an optional dependency) the bar
goes to stderr, without it a line per 10% goes there.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

#: ``progress=`` accepts True (a bar or lines on stderr), False/None, or ``callback(done, total)``.
Progress = bool | Callable[[int, int | None], Any] | None


def track(
    items: Iterable[T], *, total: int | None, desc: str, unit: str = "batch", progress: Progress
) -> Iterator[T]:
    """``items``, reporting progress as they are consumed when ``progress`` asks for it."""
    if not progress:
        yield from items
        return
    if callable(progress):
        for done, item in enumerate(items, start=1):
            yield item
            progress(done, total)
        return
    try:  # optional, and untyped: imported as a plain module
        tqdm: Any = importlib.import_module("tqdm.auto").tqdm
    except ImportError:
        yield from _lines(items, total=total, desc=desc, unit=unit)
        return
    bar = tqdm(items, total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True, leave=True)
    try:
        yield from bar
    finally:
        bar.close()


def _lines(items: Iterable[T], *, total: int | None, desc: str, unit: str) -> Iterator[T]:
    """Progress as plain lines on stderr, at most one per 10% (or per 10 s without a total)."""
    started = last = time.monotonic()
    step = max(1, (total or 0) // 10)
    for done, item in enumerate(items, start=1):
        yield item
        now = time.monotonic()
        if (total and (done % step == 0 or done == total)) or (not total and now - last >= 10):
            last = now
            of = f"/{total}" if total else ""
            units = unit + ("es" if unit.endswith(("s", "sh", "ch", "x")) else "s")
            print(f"{desc}: {done}{of} {units}, {now - started:.1f} s", file=sys.stderr, flush=True)


__all__ = ["Progress", "track"]
