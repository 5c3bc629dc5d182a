"""Reads from local files (the persisted cache tier) straight into device memory with kvikio.

kvikio uses GPUDirect Storage where the system has it and its own
compatibility mode (a bounce buffer, POSIX reads) otherwise; either way the
bytes skip a pageable host copy. Without kvikio (or on the numpy backend) the
file is read into host memory and copied: the same values, and
:class:`DirectReader` counts which path each read took.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

import numpy as np

from insitu_gpu.backend import Backend


def kvikio_support() -> tuple[bool, str]:
    """``(available, description)``: kvikio importable here, and in which mode it runs."""
    try:
        kvikio = importlib.import_module("kvikio")
    except ImportError:
        return False, "not available (pip install kvikio-cu12 for direct reads)"
    except Exception as exc:  # installed but unusable (no driver)
        return False, f"not available ({exc})"
    try:
        compat = bool(importlib.import_module("kvikio.defaults").compat_mode())
    except Exception:  # older kvikio: the setting has another name; the reads work either way
        compat = False
    return True, f"kvikio {getattr(kvikio, '__version__', '?')} ({'compatibility mode' if compat else 'GDS'})"


class DirectReader:
    """Reads ``(shape, dtype)`` arrays at byte offsets of files into device arrays of ``backend``."""

    def __init__(self, backend: Backend, *, use_kvikio: bool | None = None) -> None:
        self._backend = backend
        available, self.kvikio = kvikio_support()
        wanted = available if use_kvikio is None else use_kvikio
        if wanted and not available:
            raise ImportError(f"kvikio is {self.kvikio}")
        # kvikio reads into CUDA memory: on the numpy backend there is none to read into.
        self._use_kvikio = bool(wanted) and backend.name == "cupy"
        self.reads = {"kvikio": 0, "host": 0}

    @property
    def path(self) -> str:
        """Which path reads take: ``kvikio`` or ``host`` (read, then copied)."""
        return "kvikio" if self._use_kvikio else "host"

    def read(
        self, path: str | os.PathLike[str], shape: tuple[int, ...], dtype: Any, *, offset: int = 0
    ) -> Any:
        """The array stored raw (C order) at ``offset`` of ``path``, on the device."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        out = self._backend.device_empty(tuple(shape), dtype)
        if self._use_kvikio:
            kvikio = importlib.import_module("kvikio")
            with kvikio.CuFile(os.fspath(path), "r") as f:
                got = f.pread(out, nbytes, file_offset=offset).get()
            if got != nbytes:
                raise OSError(f"{path}: read {got} of {nbytes} bytes at offset {offset}")
            self.reads["kvikio"] += 1
            return out
        host = np.fromfile(os.fspath(path), dtype=dtype, count=nbytes // dtype.itemsize, offset=offset)
        if host.size * dtype.itemsize != nbytes:
            raise OSError(f"{path}: read {host.size * dtype.itemsize} of {nbytes} bytes at offset {offset}")
        out[...] = self._backend.xp.asarray(host.reshape(shape))
        self.reads["host"] += 1
        return out


__all__ = ["DirectReader", "kvikio_support"]
