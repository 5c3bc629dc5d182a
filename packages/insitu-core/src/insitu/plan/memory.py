"""Fresh memory: committing pages in bulk before a decode writes them, and large temporaries
allocated without numpy's huge-page hint.

A cold epoch writes every decoded byte into pool memory that was never touched,
and each 4 KiB page then costs a separate page fault. ``MADV_POPULATE_WRITE``
(Linux >= 5.14) commits a whole slot's pages in one system call instead; on the
2-core reference machine that took a third less kernel time than faulting the
same pages one at a time, and the decode that follows writes at warm-memory
speed. Where the call is unavailable (older kernels, other systems) nothing is
done and pages fault in as they are written, as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import importlib
import mmap
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import numpy as np

F = TypeVar("F", bound=Callable[..., Any])

_MADV_POPULATE_WRITE = 23  # linux/mman.h; not exported by Python's mmap module
_PAGE = mmap.PAGESIZE


def _load_madvise() -> object | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_madvise = _load_madvise()


def can_populate() -> bool:
    """Whether :func:`populate_for_write` commits pages here (False once the kernel refused it)."""
    return _madvise is not None


def populate_for_write(view: np.ndarray) -> None:
    """Commit the pages under ``view`` (a contiguous array) ahead of writing them; never raises."""
    global _madvise
    fn = _madvise
    if fn is None or view.nbytes < _PAGE:
        return
    addr = view.ctypes.data
    start = addr - addr % _PAGE
    if fn(start, addr + view.nbytes - start, _MADV_POPULATE_WRITE) != 0:  # type: ignore[operator]
        _madvise = None  # unsupported here (EINVAL before 5.14): stop asking


# -- large temporaries -----------------------------------------------------------------------------
# numpy asks for transparent huge pages (madvise) on every large allocation. Where the kernel's
# THP defrag setting compacts memory synchronously for such requests, a process that has
# allocated and freed a lot pays that compaction on first touch: on the 2-core reference machine
# (THP "madvise", no huge page ever granted) filling a fresh 64 MB array took 0.14 s with the hint
# and 0.025 s without. Planning an epoch of ten million chunks makes a dozen such arrays, so it
# runs with the hint off; numpy's own setting is restored afterwards.
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
