"""Large planning temporaries, allocated without numpy's huge-page hint.

numpy asks for transparent huge pages (madvise) on every large allocation. Where the kernel's
THP defrag setting compacts memory synchronously for such requests, a process that has
allocated and freed a lot pays that compaction on first touch: on the 2-core reference machine
(THP "madvise", no huge page ever granted) filling a fresh 64 MB array took 0.14 s with the hint
and 0.025 s without. Planning an epoch of ten million chunks makes a dozen such arrays, so it
runs with the hint off; numpy's own setting is restored afterwards.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])

# Nested and concurrent planners share one switch: the first to enter turns the hint off.
_hint_lock = threading.Lock()
_hint_depth = 0
_hint_saved = True


def _hugepage_setter() -> Callable[[bool], bool] | None:
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            found = getattr(importlib.import_module(module), "_set_madvise_hugepage", None)
        except ImportError:
            continue
        if found is not None:
            return cast(Callable[[bool], bool], found)
    return None


_set_hugepage = _hugepage_setter()


@contextlib.contextmanager
def without_hugepage_hint() -> Iterator[None]:
    """numpy allocations inside the block are not marked for huge pages (nestable, thread-safe:
    the first to enter turns the hint off, the last to leave restores numpy's setting)."""
    global _hint_depth, _hint_saved
    setter = _set_hugepage
    if setter is None:
        yield
        return
    with _hint_lock:
        if _hint_depth == 0:
            _hint_saved = setter(False)
        _hint_depth += 1
    try:
        yield
    finally:
        with _hint_lock:
            _hint_depth -= 1
            if _hint_depth == 0:
                setter(_hint_saved)


def large_temporaries(fn: F) -> F:
    """Run ``fn`` under :func:`without_hugepage_hint` (planning functions that allocate arrays the
    size of the dataset's chunk count)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with without_hugepage_hint():
            return fn(*args, **kwargs)

    return cast(F, wrapper)
