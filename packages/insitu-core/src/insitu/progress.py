"""Opt-in progress for long passes: a tqdm bar when tqdm is installed, plain lines otherwise.

Library code never shows progress unless asked (``progress=True``, or a
callable to receive updates); with tqdm (an optional dependency) the bar
goes to stderr, without it a line per 10% goes there.
"""

from __future__ import annotations

import importlib
import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
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
    # While the bar is drawn, log records to the console go through tqdm.write: the pass's own
    # summary is logged as the last batch is taken, before the bar closes, and would otherwise be
    # glued onto the half-drawn bar, which then redraws under it.
    with _logging_through(tqdm):
        try:
            yield from bar
        finally:
            bar.close()


def _logging_through(tqdm: Any) -> AbstractContextManager[Any]:
    """Console log handlers of the root and ``insitu`` loggers redirected to ``tqdm.write``."""
    try:
        redirect = importlib.import_module("tqdm.contrib.logging").logging_redirect_tqdm
    except ImportError:  # a tqdm older than 4.38
        return nullcontext()
    # Only loggers with handlers of their own: tqdm gives each listed logger a handler, so listing
    # one that merely propagates to the root would print its records twice.
    loggers = [lg for lg in (logging.root, logging.getLogger("insitu")) if lg.handlers]
    return redirect(loggers=loggers, tqdm_class=tqdm)


def _lines(items: Iterable[T], *, total: int | None, desc: str, unit: str) -> Iterator[T]:
    """Progress as plain lines on stderr, at most one per 10% (or per 10 s without a total)."""
    started = last = time.monotonic()
    shown_tenth = 0
    for done, item in enumerate(items, start=1):
        yield item
        now = time.monotonic()
        # A line each time the pass enters a new tenth: at most 10 per pass, whatever the total.
        tenth = min(10, done * 10 // total) if total else 0
        if (total and tenth > shown_tenth) or (not total and now - last >= 10):
            last, shown_tenth = now, tenth
            of = f"/{total}" if total else ""
            units = unit + ("es" if unit.endswith(("s", "sh", "ch", "x")) else "s")
            print(f"{desc}: {done}{of} {units}, {now - started:.1f} s", file=sys.stderr, flush=True)


__all__ = ["Progress", "track"]
