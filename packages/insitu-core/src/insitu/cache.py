"""Disk-backed pool arenas and the persisted decoded-chunk cache.

With ``cache_dir`` set, each array's arena is a memory-mapped file there, so
residency lives in the page cache rather than the heap. With ``persist=True``
the decoded slabs also outlive the process: ``close()`` writes an index
(slab -> slot, crc32 of the slot bytes) next to the arenas, and the next run
adopts those slabs as cached. The index is keyed by a fingerprint of the
store's identity, every array's metadata and the chunk-transform pipeline:
a cache built from other data is refused (``StaleCacheError``) unless
``persist="rebuild"``, which wipes it. Every adopted slab is checked against
its crc32 at open; a mismatch is refused the same way (or dropped and re-read
with ``"rebuild"``). The index is removed while a run is live, so a crash
leaves an empty cache, never a wrong one.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from zarr.abc.store import Store
from zarr.storage import LocalStore, MemoryStore

from insitu.errors import StaleCacheError
from insitu.geometry import ArrayGeometry
from insitu.pool import READY, ChunkPool

FORMAT = "insitu.cache/1"
INDEX = "index.json"


def store_identity(store: Store) -> str:
    """A string naming where the data lives (and which version of it, when known).

    A store (or wrapper) may define ``insitu_identity`` (a string or a
    zero-argument method), e.g. to include an Icechunk snapshot id.
    """
    ident = getattr(store, "insitu_identity", None)
    if ident is not None:
        return str(ident() if callable(ident) else ident)
    if isinstance(store, LocalStore):
        return f"file://{Path(store.root).resolve()}"
    if isinstance(store, MemoryStore):
        return f"memory:{id(store._store_dict)}"
    inner = getattr(store, "_store", None) or getattr(store, "store", None)
    if isinstance(inner, (LocalStore, MemoryStore)) or (
        inner is not None and hasattr(inner, "insitu_identity")
    ):
        return store_identity(inner)
    return f"{type(store).__module__}.{type(store).__qualname__}:{store}"


def transform_fingerprint(t: Any) -> str:
    """``t.fingerprint()`` when defined, else the transform's qualified name and repr."""
    fp = getattr(t, "fingerprint", None)
    if callable(fp):
        return str(fp())
    kind = type(t)
    return f"{kind.__module__}.{getattr(t, '__qualname__', kind.__qualname__)}:{t!r}"


def fingerprint(
    store: Store, arrays: Mapping[str, ArrayGeometry], transforms: Mapping[str, Sequence[Any]]
) -> str:
    doc = {
        "format": FORMAT,
        "store": store_identity(store),
        "arrays": {p: g.describe() for p, g in sorted(arrays.items())},
        "transforms": {k: [transform_fingerprint(t) for t in v] for k, v in sorted(transforms.items())},
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


class PersistentCache:
    """Owns the arena files under ``cache_dir`` and, with ``persist``, their index."""

    def __init__(
        self,
        cache_dir: str | os.PathLike[str],
        store: Store,
        arrays: Mapping[str, ArrayGeometry],
        slots: Mapping[str, int],
        transforms: Mapping[str, Sequence[Any]],
        *,
        persist: bool | str,
        budget: int,
    ) -> None:
        self.dir = Path(cache_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.persist = bool(persist)
        self.fingerprint = fingerprint(store, arrays, transforms)
        self.index_path = self.dir / INDEX
        self._adopt: dict[str, dict[int, tuple[int, int]]] = {}
        if self.persist:
            self._adopt = self._read_index(rebuild=persist == "rebuild")
        tag = self.fingerprint[:16] if self.persist else f"tmp-{os.getpid()}-{id(self):x}"
        self.files = {
            p: self.dir / f"arena-{tag}-{hashlib.sha1(p.encode()).hexdigest()[:12]}.bin" for p in arrays
        }
        self.arenas = {p: self._map(self.files[p], g, slots[p]) for p, g in arrays.items()}
        self.rebuild = persist == "rebuild"

    def _read_index(self, rebuild: bool) -> dict[str, dict[int, tuple[int, int]]]:
        if not self.index_path.exists():
            return {}
        try:
            doc = json.loads(self.index_path.read_text())
            ok = doc.get("format") == FORMAT
        except (OSError, ValueError) as exc:
            doc, ok = {}, False
            if not rebuild:
                raise StaleCacheError(
                    f"cache index {self.index_path} is unreadable ({exc}); "
                    "pass persist='rebuild' to start afresh"
                ) from exc
        if not ok or doc.get("fingerprint") != self.fingerprint:
            if not rebuild:
                raise StaleCacheError(
                    f"the cache in {self.dir} was built from other data (store, array metadata or "
                    "chunk transforms differ); pass persist='rebuild' to replace it"
                )
            self._wipe()
            return {}
        return {
            p: {int(s): (int(v[0]), int(v[1])) for s, v in ent.items()} for p, ent in doc["arrays"].items()
        }

    def _wipe(self) -> None:
        for f in self.dir.glob("arena-*.bin"):
            f.unlink()
        self.index_path.unlink(missing_ok=True)

    @staticmethod
    def _map(path: Path, g: ArrayGeometry, n_slots: int) -> np.ndarray:
        shape = (n_slots * g.chunk_len, *g.sample_shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * g.dtype.itemsize
        with open(path, "a+b") as f:
            f.truncate(nbytes)  # keeps existing slots when the budget is unchanged or grew
        return np.memmap(path, dtype=g.dtype, mode="r+", shape=shape)

    async def restore(self, pool: ChunkPool, engine: Any) -> None:
        """Adopt the slabs of a previous run, verified against their checksums."""
        import asyncio

        loop = asyncio.get_running_loop()
        for path, entries in self._adopt.items():
            apool = pool.arrays.get(path)
            if apool is None:
                continue
            usable = {s: v for s, v in entries.items() if v[0] < apool.n_slots and s < apool.geom.n_slabs}
            checks = await loop.run_in_executor(engine.executor, _verify, apool, usable)
            bad = sorted(s for s, ok in checks.items() if not ok)
            if bad and not self.rebuild:
                raise StaleCacheError(
                    f"cached chunk row(s) {bad[:5]} of array {path!r} in {self.dir} are corrupted; "
                    "pass persist='rebuild' to drop them"
                )
            apool.adopt({s: v[0] for s, v in usable.items() if checks[s]})
        pool.note_resident()
        # From here this run owns the arenas: until close() rewrites the index, a crash
        # leaves an empty cache rather than an index pointing at overwritten slots.
        self.index_path.unlink(missing_ok=True)

    def save(self, pool: ChunkPool) -> None:
        """Flush arenas; with ``persist``, write the index of every ready slab."""
        for arena in self.arenas.values():
            if isinstance(arena, np.memmap):
                arena.flush()
        if not self.persist:
            for f in self.files.values():
                f.unlink(missing_ok=True)
            return
        arrays: dict[str, dict[str, list[int]]] = {}
        for path, apool in pool.arrays.items():
            ent = {}
            for slab, e in apool.entries.items():
                if e.state == READY and not e.bad:
                    ent[str(slab)] = [e.slot, _crc(apool.view(e.slot))]
            arrays[path] = ent
        tmp = self.index_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"format": FORMAT, "fingerprint": self.fingerprint, "arrays": arrays}))
        os.replace(tmp, self.index_path)


def _verify(apool: Any, entries: Mapping[int, tuple[int, int]]) -> dict[int, bool]:
    return {slab: _crc(apool.view(slot)) == crc for slab, (slot, crc) in entries.items()}


def _crc(arr: np.ndarray) -> int:
    return zlib.crc32(arr.reshape(-1).view(np.uint8).data)
