"""Disk-backed pool arenas and the persisted decoded-chunk cache.

With ``cache_dir`` set, each array's arena is a memory-mapped file there, so
residency lives in the page cache rather than the heap. With ``persist=True``
the decoded slabs also outlive the process: ``close()`` writes an index
(per array: its fingerprint, and slab -> slot with a crc32 of the slot
bytes) next to the arenas, and the next run adopts those slabs as cached.

Identity is per array: a fingerprint of the store's identity, that array's
metadata, its chunk-transform chain and its pooled slab spec. Editing one
array's transforms, or adding an array, leaves every other array's cached
slabs usable. An array cached from other data is refused
(``StaleCacheError``, naming the array and what differs) unless
``persist="rebuild"``, which rebuilds that array alone. Every adopted slab is
checked against its crc32 at open; a mismatch is refused the same way (or
dropped and re-read with ``"rebuild"``). The index is removed while a run is
live, so a crash leaves an empty cache, never a wrong one.
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

from insitu.capabilities import store_identity
from insitu.errors import StaleCacheError
from insitu.geometry import ArrayGeometry
from insitu.options import CacheOptions
from insitu.pool import READY, ChunkPool
from insitu.transforms import SlabSpec, transform_fingerprint

FORMAT = "insitu.cache/2"
INDEX = "index.json"


def array_fingerprint(
    store_id: str, geom: ArrayGeometry, transforms: Sequence[Any], spec: SlabSpec
) -> dict[str, str]:
    """The parts of one array's cache identity, each a short hash, plus their combination as ``"all"``."""
    parts = {
        "store": _digest(store_id),
        "array": _digest(geom.describe()),
        "transforms": _digest([transform_fingerprint(t) for t in transforms]),
        "spec": _digest([list(spec.shape), spec.dtype.str]),
    }
    parts["all"] = _digest([FORMAT, parts])
    return parts


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:32]


class PersistentCache:
    """Owns the arena files under ``cache_dir`` and, with ``persist``, their index."""

    def __init__(
        self,
        options: CacheOptions,
        store: Store,
        arrays: Mapping[str, ArrayGeometry],
        specs: Mapping[str, SlabSpec],
        slots: Mapping[str, int],
        transforms: Mapping[str, Sequence[Any]],
    ) -> None:
        assert options.cache_dir is not None
        self.dir = options.cache_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.persist = options.persist
        self.rebuild = options.rebuild
        self.index_path = self.dir / INDEX
        self.specs = dict(specs)
        self.fingerprints: dict[str, dict[str, str]] = {}
        if self.persist:
            store_id = store_identity(store)
            self.fingerprints = {
                p: array_fingerprint(store_id, g, transforms.get(g.name, ()), specs[p])
                for p, g in arrays.items()
            }
        self._others: dict[str, Any] = {}  # index entries of arrays this dataset does not read: kept
        self._adopt: dict[str, dict[int, tuple[int, int]]] = {}
        if self.persist:
            self._adopt = self._read_index()
        self.files = {p: self.dir / self._file_name(p) for p in arrays}
        self.arenas = {p: self._map(self.files[p], g, specs[p], slots[p]) for p, g in arrays.items()}

    def _file_name(self, path: str) -> str:
        where = hashlib.sha1(path.encode()).hexdigest()[:12]
        if not self.persist:
            return f"arena-tmp-{os.getpid()}-{id(self):x}-{where}.bin"
        return f"arena-{self.fingerprints[path]['all'][:16]}-{where}.bin"

    def _read_index(self) -> dict[str, dict[int, tuple[int, int]]]:
        if not self.index_path.exists():
            return {}
        try:
            doc = json.loads(self.index_path.read_text())
            if doc.get("format") != FORMAT:
                raise ValueError(f"format {doc.get('format')!r}, expected {FORMAT!r}")
            entries = dict(doc["arrays"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if not self.rebuild:
                raise StaleCacheError(
                    f"cache index {self.index_path} is unreadable ({exc}); pass persist='rebuild' to start afresh"
                ) from exc
            self._wipe(None)
            return {}
        adopt: dict[str, dict[int, tuple[int, int]]] = {}
        for path, entry in entries.items():
            mine = self.fingerprints.get(path)
            if mine is None:
                self._others[path] = entry
                continue
            theirs = entry.get("fingerprint", {}) if isinstance(entry, dict) else {}
            if theirs.get("all") != mine["all"]:
                if not self.rebuild:
                    differ = [k for k in ("store", "array", "transforms", "spec") if theirs.get(k) != mine[k]]
                    raise StaleCacheError(
                        f"the cache in {self.dir} holds array {path!r} built from other data "
                        f"({', '.join(differ) or 'format'} differ); pass persist='rebuild' to rebuild "
                        "that array (other arrays' cached chunks are kept)"
                    )
                self._wipe(path)
                continue
            adopt[path] = {int(s): (int(v[0]), int(v[1])) for s, v in entry["slabs"].items()}
        return adopt

    def _wipe(self, path: str | None) -> None:
        """Remove the arena files of one array (every array: ``None``)."""
        pattern = (
            "arena-*.bin" if path is None else f"arena-*-{hashlib.sha1(path.encode()).hexdigest()[:12]}.bin"
        )
        for f in self.dir.glob(pattern):
            f.unlink()
        if path is None:
            self.index_path.unlink(missing_ok=True)

    @staticmethod
    def _map(path: Path, g: ArrayGeometry, spec: SlabSpec, n_slots: int) -> np.ndarray:
        shape = (n_slots * g.chunk_len, *spec.sample_shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * spec.dtype.itemsize
        with open(path, "a+b") as f:
            f.truncate(nbytes)  # keeps existing slots when the budget is unchanged or grew
        return np.memmap(path, dtype=spec.dtype, mode="r+", shape=shape)

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
        arrays: dict[str, Any] = dict(self._others)
        for path, apool in pool.arrays.items():
            slabs = {}
            for slab, e in apool.entries.items():
                if e.state == READY and not e.bad:
                    slabs[str(slab)] = [e.slot, _crc(apool.view(e.slot))]
            arrays[path] = {"fingerprint": self.fingerprints[path], "slabs": slabs}
        tmp = self.index_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"format": FORMAT, "arrays": arrays}))
        os.replace(tmp, self.index_path)


def _verify(apool: Any, entries: Mapping[int, tuple[int, int]]) -> dict[int, bool]:
    return {slab: _crc(apool.view(slot)) == crc for slab, (slot, crc) in entries.items()}


def _crc(arr: np.ndarray) -> int:
    return zlib.crc32(arr.reshape(-1).view(np.uint8).data)
