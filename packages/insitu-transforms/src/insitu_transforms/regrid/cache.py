"""Weights kept once per process and once per machine.

In memory: a small table by key, shared by every Regrid of the process (two
arrays on one grid build their weights once). On disk: one ``.npz`` per key
in the cache directory, written to a temporary file and renamed into place
(a reader never sees half a file), carrying a checksum and the key it was
made for. A file that cannot be read, fails its checksum or belongs to
another key is rebuilt and rewritten, never trusted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp  # type: ignore[import-untyped]  # scipy ships no type information

log = logging.getLogger("insitu.regrid")

#: Weight matrices kept in memory per process (each is a few MB to a few hundred MB).
MEMORY_ENTRIES = 8

_memory: OrderedDict[str, sp.csr_matrix] = OrderedDict()
# One lock for lookups and builds: two threads wanting the same weights build them once.
_lock = threading.RLock()


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/insitu/regrid``, else ``~/.cache/insitu/regrid``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "insitu" / "regrid"


def clear_memory() -> None:
    """Forget the weights held in memory (the files stay)."""
    with _lock:
        _memory.clear()


def cache_path(cache_dir: Path, key: str) -> Path:
    """The file holding the weights of ``key``."""
    return cache_dir / f"weights-{key[:40]}.npz"


def load_or_build(
    key: str, shape: tuple[int, int], build: Callable[[], sp.csr_matrix], cache_dir: Path | None
) -> sp.csr_matrix:
    """The weights of ``key``: from memory, else from ``cache_dir`` (None: no files), else built
    with ``build()`` and stored in both."""
    with _lock:
        if key in _memory:
            _memory.move_to_end(key)
            return _memory[key]
        weights = None
        if cache_dir is not None:
            weights = _read(cache_path(cache_dir, key), key, shape)
        if weights is None:
            weights = build()
            if cache_dir is not None:
                _write(cache_dir, key, weights)
        _memory[key] = weights
        while len(_memory) > MEMORY_ENTRIES:
            _memory.popitem(last=False)
        return weights


def _checksum(data: np.ndarray, indices: np.ndarray, indptr: np.ndarray) -> str:
    # Over fixed dtypes: scipy may hold indices as int32 or int64, the file may too.
    h = hashlib.sha256()
    for a, dtype in ((data, "<f8"), (indices, "<i8"), (indptr, "<i8")):
        h.update(np.ascontiguousarray(a, dtype=dtype).tobytes())
    return h.hexdigest()


def _read(path: Path, key: str, shape: tuple[int, int]) -> sp.csr_matrix | None:
    if not path.exists():
        return None
    try:
        with np.load(path, allow_pickle=False) as f:
            meta = json.loads(str(f["meta"]))
            data = np.asarray(f["data"], dtype=np.float64)
            indices = np.asarray(f["indices"], dtype=np.int64)
            indptr = np.asarray(f["indptr"], dtype=np.int64)
        problem = None
        if meta.get("key") != key:
            problem = "it was written for other grids"
        elif tuple(meta.get("shape", ())) != shape:
            problem = f"its shape {meta.get('shape')} is not {list(shape)}"
        elif meta.get("checksum") != _checksum(data, indices, indptr):
            problem = "its checksum does not match"
        elif (
            indptr.size != shape[0] + 1
            or indptr[0] != 0
            or indptr[-1] != data.size
            or indices.size != data.size
            or (np.diff(indptr) < 0).any()
            or (indices.size and (indices.min() < 0 or indices.max() >= shape[1]))
        ):
            problem = "its sparse structure is malformed"
        if problem is not None:
            log.warning("regrid weights %s are rebuilt: %s", path, problem)
            return None
        return sp.csr_matrix((data, indices, indptr), shape=shape)
    except Exception as exc:  # a truncated or garbled file: rebuilt, whatever numpy raised
        log.warning("regrid weights %s are rebuilt: the file cannot be read (%r)", path, exc)
        return None


def _write(cache_dir: Path, key: str, weights: sp.csr_matrix) -> None:
    path = cache_path(cache_dir, key)
    meta = {
        "key": key,
        "shape": list(weights.shape),
        "checksum": _checksum(weights.data, weights.indices, weights.indptr),
    }
    tmp = None
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=path.stem + ".", suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            np.savez(
                out,
                meta=np.array(json.dumps(meta)),
                data=weights.data,
                indices=weights.indices,
                indptr=weights.indptr,
            )
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:  # a read-only or full disk costs a rebuild next time, not a failure now
        log.warning("regrid weights could not be written to %s: %s", cache_dir, exc)
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
