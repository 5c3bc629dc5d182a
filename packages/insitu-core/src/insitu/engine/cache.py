"""Disk-backed pool arenas and the persisted decoded-chunk cache.

With ``cache_dir`` set, each array's arena is a memory-mapped file there, so
residency lives in the page cache rather than the heap. With ``persist=True``
the decoded slabs also outlive the process: ``close()`` writes an index
(per array: its fingerprint, and slab -> slot with a crc32 of the slot
bytes) next to the arenas, and the next run adopts those slabs as cached.
The index also records each array's slot layout (arena file, slot bytes,
slot shape and dtype, slot count) and a digest of its Zarr metadata, so that
a cache can be checked from outside a dataset (``insitu cache show|verify|
clear``, through the functions at the end of this module); a reader ignores
what it does not use, so indexes written without them still load.

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

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import stat
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from zarr.abc.store import Store

from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.transforms import SlabSpec, transform_fingerprint
from insitu.engine.diskspace import disk_full, is_no_space, reserve, write_all
from insitu.engine.pool import ChunkPool
from insitu.errors import CacheDiskFullError, CacheInUseError, ConfigError, StaleCacheError
from insitu.options import CacheOptions
from insitu.plan.memory_model import arena_bytes
from insitu.store.capabilities import store_identity

FORMAT = "insitu.cache/3"
LOCK = ".lock"
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


def store_digest(store: Store) -> str:
    """The ``"store"`` part of :func:`array_fingerprint` for ``store``."""
    return _digest(store_identity(store))


def metadata_digest(metadata: Mapping[str, Any]) -> str:
    """A short hash of an array's Zarr metadata (``zarr.Array.metadata.to_dict()``), as the index records it."""
    return _digest(metadata)


def arena_name(path: str, fingerprint: str) -> str:
    """The arena file of array ``path`` persisted under ``fingerprint`` (its ``"all"`` part)."""
    return f"arena-{fingerprint[:16]}-{hashlib.sha1(path.encode()).hexdigest()[:12]}.bin"


class PersistentCache:
    """Owns the arena files under ``cache_dir`` and, with ``persist``, their index and the write lock.

    Files are opened without following symbolic links and must be regular
    files. With ``persist`` one process at a time holds the directory (an
    exclusive ``flock`` on ``.lock``); another gets :class:`CacheInUseError`.
    """

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
        # The directory is resolved once, so ``~/cache -> /scratch/cache`` works; the files inside
        # are still opened without following links (a planted link must not redirect writes).
        self.dir = _cache_directory(options.cache_dir)
        self.persist = options.persist
        self.rebuild = options.rebuild
        self.index_path = self.dir / INDEX
        self.specs = dict(specs)
        self.counts = {"verified": 0, "stale": 0, "corrupt": 0}  # slabs checked on reuse, by outcome
        self._lock_fd: int | None = None
        self.files: dict[str, Path] = {}
        self.arenas: dict[str, np.ndarray] = {}
        try:
            self._open(store, arrays, specs, slots, transforms)
        except BaseException as exc:
            # Nothing half-built keeps the lock (a retry with persist="rebuild" in the ``except``
            # block must find the directory free) or this run's scratch arenas.
            self._abandon()
            if isinstance(exc, OSError) and is_no_space(exc) and not isinstance(exc, CacheDiskFullError):
                needed = sum(arena_bytes(specs[p], slots[p]) for p in arrays)
                raise disk_full(self.dir, "opening the cache (lock and arena files)", needed, exc) from exc
            raise

    def _open(
        self,
        store: Store,
        arrays: Mapping[str, ArrayGeometry],
        specs: Mapping[str, SlabSpec],
        slots: Mapping[str, int],
        transforms: Mapping[str, Sequence[Any]],
    ) -> None:
        self._lock_fd = self._lock() if self.persist else None
        self.fingerprints: dict[str, dict[str, str]] = {}
        self.metadata: dict[str, str] = {}  # digest of each array's Zarr metadata, for offline checks
        if self.persist:
            store_id = store_identity(store)
            self.fingerprints = {
                p: array_fingerprint(store_id, g, transforms.get(g.path, ()), specs[p])
                for p, g in arrays.items()
            }
            self.metadata = {p: metadata_digest(g.metadata) for p, g in arrays.items()}
        self._others: dict[str, Any] = {}  # index entries of arrays this dataset does not read: kept
        self._adopt: dict[str, dict[int, dict[str, Any]]] = {}
        if self.persist:
            self._adopt = self._read_index()
        self.files = {p: self.dir / self._file_name(p) for p in arrays}
        for p, g in arrays.items():
            self.arenas[p] = self._map(self.files[p], g, specs[p], slots[p])

    def _abandon(self) -> None:
        """Undo a failed construction: drop the lock, and this run's scratch arena files."""
        self.release()
        self.arenas.clear()
        if not self.persist:
            for f in self.files.values():
                f.unlink(missing_ok=True)

    # -- the directory lock ------------------------------------------------------------------------
    def _lock(self) -> int:
        return hold_lock(
            self.dir,
            f"process {os.getpid()}",
            advice="give each process its own cache_dir, or wait for that process to close its dataset",
        )

    def release(self) -> None:
        """Drop the directory lock (after :meth:`save`, or when the dataset is abandoned)."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the flock

    def __del__(self) -> None:
        fd = getattr(self, "_lock_fd", None)
        if fd is not None:
            os.close(fd)

    # -- the index ---------------------------------------------------------------------------------
    def _file_name(self, path: str) -> str:
        if not self.persist:
            where = hashlib.sha1(path.encode()).hexdigest()[:12]
            return f"arena-tmp-{os.getpid()}-{id(self):x}-{where}.bin"
        return arena_name(path, self.fingerprints[path]["all"])

    def _read_index(self) -> dict[str, dict[int, dict[str, Any]]]:
        try:
            fd = _open_nofollow(self.index_path, os.O_RDONLY)
        except FileNotFoundError:
            return {}
        except OSError as exc:  # a link where the index should be
            return self._unreadable(exc)
        try:
            with os.fdopen(fd, "rb") as f:
                doc = json.loads(f.read())
            if doc.get("format") != FORMAT:
                raise ValueError(f"format {doc.get('format')!r}, expected {FORMAT!r}")
            entries = dict(doc["arrays"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return self._unreadable(exc)
        adopt: dict[str, dict[int, dict[str, Any]]] = {}
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
            adopt[path] = {int(s): v for s, v in entry["slabs"].items()}
        return adopt

    def _unreadable(self, exc: BaseException) -> dict[str, dict[int, dict[str, Any]]]:
        if not self.rebuild:
            raise StaleCacheError(
                f"cache index {self.index_path} is unreadable ({exc}); pass persist='rebuild' to start afresh"
            ) from exc
        self._wipe(None)
        return {}

    def _wipe(self, path: str | None) -> None:
        """Remove the arena files of one array (every array: ``None``)."""
        where = "*" if path is None else hashlib.sha1(path.encode()).hexdigest()[:12]
        for f in self.dir.glob(f"arena-*-{where}.bin" if path is not None else "arena-*.bin"):
            f.unlink()
        if path is None:
            self.index_path.unlink(missing_ok=True)

    def _map(self, path: Path, g: ArrayGeometry, spec: SlabSpec, n_slots: int) -> np.ndarray:
        shape = (n_slots * g.chunk_len, *spec.sample_shape)
        nbytes = arena_bytes(spec, n_slots)
        fd = _open_nofollow(path, os.O_RDWR | os.O_CREAT)
        with os.fdopen(fd, "r+b") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise StaleCacheError(f"cache file {path} is not a regular file")
            os.ftruncate(fd, nbytes)  # keeps existing slots when the budget is unchanged or grew
            try:
                reserve(fd, nbytes)  # blocks allocated now: no SIGBUS for want of space later
            except OSError as exc:
                if not is_no_space(exc):
                    raise
                os.ftruncate(fd, min(st.st_size, nbytes))  # give the space back, keep earlier slots
                if st.st_size == 0:
                    path.unlink(missing_ok=True)  # made just now: nothing of an earlier run in it
                needed = nbytes - st.st_blocks * 512
                what = f"the arena of array {g.path or g.name!r} ({nbytes:,} bytes) does not fit"
                raise disk_full(self.dir, what, max(needed, 0), exc) from exc
            return np.memmap(f, dtype=spec.dtype, mode="r+", shape=shape)

    # -- reuse -------------------------------------------------------------------------------------
    async def restore(self, pool: ChunkPool, engine: Any) -> None:
        """Adopt the slabs of a previous run that are intact and whose stored bytes are unchanged.

        Each entry is checked three ways: its index record (slab, slot, checksum and sources,
        under one checksum), the slot's bytes (crc32 seeded with the array and slab, so bytes of
        another slab never pass), and the sources it was read from (object versions, or the
        stored bytes' crc32 re-read where the store has no versions). A damaged entry is a
        StaleCacheError (dropped with ``persist="rebuild"``); a changed source just drops the slab.
        """
        import asyncio

        loop = asyncio.get_running_loop()
        for path, entries in self._adopt.items():
            apool = pool.arrays.get(path)
            if apool is None:
                continue
            usable = {
                s: v
                for s, v in entries.items()
                if isinstance(v, dict) and int(v.get("slot", -1)) < apool.n_slots and s < apool.geom.n_slabs
            }
            intact = await loop.run_in_executor(engine.executor, _verify, path, apool, usable)
            bad = sorted(s for s, ok in intact.items() if not ok)
            if bad and not self.rebuild:
                raise StaleCacheError(
                    f"cached chunk row(s) {bad[:5]} of array {path!r} in {self.dir} are corrupted; "
                    "pass persist='rebuild' to drop them"
                )
            self.counts["corrupt"] += len(bad)
            good = {s: v for s, v in usable.items() if intact[s]}
            fresh = await _unchanged_sources(engine.fetcher, good)
            self.counts["stale"] += len(good) - len(fresh)
            self.counts["verified"] += len(fresh)
            apool.adopt({s: int(good[s]["slot"]) for s in fresh})
        # From here this run owns the arenas: until close() rewrites the index, a crash
        # leaves an empty cache rather than an index pointing at overwritten slots.
        self.index_path.unlink(missing_ok=True)
        _fsync_dir(self.dir)

    def save(self, pool: ChunkPool) -> None:
        """Flush arenas; with ``persist``, write the index of every ready slab, atomically."""
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
            adopted = self._adopt.get(path, {})
            for slab, slot, e in apool.ready_slabs():
                if apool.bad[slab]:
                    continue
                if (e is None or e.sources is None) and slab not in adopted:
                    continue  # loaded without source tracking: cannot be checked on reuse
                sources = _sources_of(e, adopted.get(slab))
                slabs[str(slab)] = _entry(path, slab, slot, _crc(path, slab, apool.view(slot)), sources)
            spec = self.specs[path]
            arrays[path] = {
                "fingerprint": self.fingerprints[path],
                "slabs": slabs,
                # The slot layout and the metadata digest, for checks made without a dataset.
                "file": self.files[path].name,
                "slot_nbytes": apool.slot_nbytes,
                "slot_shape": list(spec.shape),
                "dtype": spec.dtype.str,
                "n_slots": apool.n_slots,
                "metadata": self.metadata[path],
            }
        data = json.dumps({"format": FORMAT, "arrays": arrays}).encode()
        self._write_index(data)

    def _write_index(self, data: bytes) -> None:
        """Replace the index with ``data`` whole, or leave the directory's index as it was."""
        tmp = self.dir / f"{INDEX}.{os.getpid()}.tmp"
        try:
            fd = _open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.index_path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            if not is_no_space(exc):
                raise
            kept = (
                "the previous index is kept"
                if self.index_path.exists()
                else "this run had taken the previous one over, so the next run starts with an empty cache"
            )
            what = f"the cache index was not saved ({kept})"
            raise disk_full(self.dir, what, len(data), exc) from exc
        _fsync_dir(self.dir)


def _cache_directory(given: Path) -> Path:
    """``cache_dir`` made (when missing) and resolved to the directory it names, links included."""
    try:
        given.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        pass  # a file there: said below
    except OSError as exc:
        if is_no_space(exc):
            raise disk_full(given, "creating the directory", None, exc) from exc
        raise
    resolved = given.resolve()
    if not resolved.is_dir():
        raise ConfigError(
            f"cache_dir {given} is not a directory" + (f" ({resolved})" if resolved != given else "")
        )
    return resolved


def _open_nofollow(path: Path, flags: int) -> int:
    """``os.open`` that refuses a symbolic link at ``path`` (a planted link must not redirect writes)."""
    try:
        return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StaleCacheError(
                f"cache file {path} is a symbolic link; insitu does not follow links in a cache "
                "directory (remove it, or use another cache_dir)"
            ) from None
        raise


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _sources_of(entry: Any, adopted: Mapping[str, Any] | None) -> list[list[Any]]:
    """The distinct (key, range, source) of a slab: tracked while loading, or carried over from
    the entry it was adopted from (``entry`` None: a ready slab the pool keeps without one)."""
    if entry is not None and entry.sources is not None:
        seen = {(k, tuple(r) if r is not None else None, src) for k, r, src in entry.sources}
        return [[k, list(r) if r is not None else None, src] for k, r, src in sorted(seen, key=str)]
    return list(adopted["sources"]) if adopted is not None else []


def _entry(path: str, slab: int, slot: int, crc: int, sources: list[list[Any]]) -> dict[str, Any]:
    entry: dict[str, Any] = {"slot": slot, "crc": crc, "sources": sources}
    entry["check"] = _entry_check(path, slab, entry)
    return entry


def _entry_check(path: str, slab: int, entry: Mapping[str, Any]) -> int:
    """A checksum over everything an index entry says, and which array and slab it is for."""
    body = json.dumps([path, slab, entry.get("slot"), entry.get("crc"), entry.get("sources")], sort_keys=True)
    return zlib.crc32(body.encode())


def _verify(path: str, apool: Any, entries: Mapping[int, Mapping[str, Any]]) -> dict[int, bool]:
    out = {}
    for slab, e in entries.items():
        try:
            ok = (
                e.get("check") == _entry_check(path, slab, e)
                and _crc(path, slab, apool.view(int(e["slot"]))) == e["crc"]
            )
        except (KeyError, TypeError, ValueError):
            ok = False
        out[slab] = ok
    return out


async def _unchanged_sources(fetcher: Any, entries: Mapping[int, Mapping[str, Any]]) -> list[int]:
    """The slabs whose every source still holds the bytes they were read from."""
    results = await source_states(fetcher, entries)
    fresh = []
    for slab, e in entries.items():
        if all(results[(k, json.dumps(r), src)] is True for k, r, src in e["sources"]):
            fresh.append(slab)
    return fresh


async def source_states(
    fetcher: Any, entries: Mapping[Any, Mapping[str, Any]]
) -> dict[tuple[str, str, str], bool | BaseException]:
    """Each distinct source of ``entries``, as ``(key, json of its byte range, recorded source)``:
    True when the store still holds what was recorded, False when not, or the error asking raised.
    One version request (for ``crc:`` sources, one read) per distinct source."""
    import asyncio

    async def current(key: str, byte_range: Any, source: str) -> bool:
        if source.startswith("crc:"):
            raw = await fetcher.get(key, tuple(byte_range) if byte_range is not None else None)
            return raw is not None and f"crc:{zlib.crc32(raw)}" == source
        version = await fetcher.version(key)
        return source == ("absent" if version is None else f"v:{version}")

    checks: dict[tuple[str, str, str], asyncio.Future[bool]] = {}
    for e in entries.values():
        for key, byte_range, source in e["sources"]:
            ident = (key, json.dumps(byte_range), source)
            if ident not in checks:
                checks[ident] = asyncio.ensure_future(current(key, byte_range, source))
    return dict(zip(checks, await asyncio.gather(*checks.values(), return_exceptions=True), strict=True))


def _crc(path: str, slab: int, arr: np.ndarray) -> int:
    """crc32 of a slot's bytes, seeded with the array and slab it holds."""
    seed = zlib.crc32(f"{path}#{slab}".encode())
    return zlib.crc32(arr.reshape(-1).view(np.uint8).data, seed)


# -- a cache directory seen from outside a dataset (``insitu cache show|verify|clear``) ------------
def is_cache_file(name: str) -> bool:
    """True for the names insitu writes in a cache directory: the index (and its temporary
    file), the lock and the arenas. ``insitu cache clear`` removes nothing else."""
    return (
        name in (INDEX, LOCK)
        or (name.startswith("arena-") and name.endswith(".bin"))
        or (name.startswith(f"{INDEX}.") and name.endswith(".tmp"))
    )


def read_index(directory: Path) -> dict[str, Any] | None:
    """The index of a cache directory (``None`` when it has none: no run closed a dataset on it,
    or one is live, or it crashed). :class:`StaleCacheError` when a dataset would refuse it as
    unreadable: a link, not JSON, or another format."""
    try:
        fd = _open_nofollow(directory / INDEX, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            doc = json.loads(f.read())
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            found = doc.get("format") if isinstance(doc, dict) else None
            raise ValueError(f"format {found!r}, expected {FORMAT!r}")
        if not isinstance(doc.get("arrays"), dict):
            raise ValueError("no 'arrays' mapping")
    except (OSError, ValueError) as exc:
        raise StaleCacheError(f"cache index {directory / INDEX} is unreadable ({exc})") from exc
    return doc


def lock_holder(directory: Path) -> str | None:
    """Who holds the directory's lock (``"process 1234"``), or ``None`` when nobody does.

    Probes with a shared, non-blocking ``flock`` released at once; never creates the lock file.
    """
    try:
        fd = _open_nofollow(directory / LOCK, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return os.pread(fd, 256, 0).decode(errors="replace").strip() or "another process"
        return None
    finally:
        os.close(fd)  # releases the probe's lock too


def hold_lock(directory: Path, holder: str, *, advice: str = "") -> int:
    """Take the directory's lock as a dataset does (exclusive, non-blocking) and record ``holder``
    in it; :class:`CacheInUseError` naming the current holder otherwise. Close the returned
    descriptor to release it."""
    fd = _open_nofollow(directory / LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        current = os.pread(fd, 256, 0).decode(errors="replace").strip() or "another process"
        os.close(fd)
        raise CacheInUseError(
            f"the persisted cache in {directory} is in use by {current}" + (f"; {advice}" if advice else "")
        ) from None
    try:
        os.ftruncate(fd, 0)
        # Who holds it, for the next process's message; a disk too full for these few bytes is
        # not worth opening a cache on (the arenas need far more), so the error goes up.
        if os.pwrite(fd, holder.encode(), 0) != len(holder.encode()):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_array(directory: Path, path: str, entry: Mapping[str, Any]) -> dict[str, str | None]:
    """Check every cached slab of one array's index entry against its arena, as a dataset does
    when it adopts them: ``{slab: None}`` (keyed as in the index) when intact, else what is wrong.

    Needs the slot size the index records (``slot_nbytes``); for an index written without it,
    every slab is reported as unchecked.
    """
    slabs = entry.get("slabs")
    if not isinstance(slabs, dict):
        return {"*": "the index entry has no slab table"}
    out: dict[str, str | None] = {}
    nbytes = entry.get("slot_nbytes")
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes <= 0:
        why = (
            "unchecked: the index does not record the slot size (written by an older insitu; "
            "the next run that closes its dataset on this cache rewrites it)"
        )
        return dict.fromkeys(slabs, why)
    fingerprint = entry.get("fingerprint", {})
    name = entry.get("file") or arena_name(path, str(fingerprint.get("all", "")))
    if not isinstance(name, str) or "/" in name or not is_cache_file(name):
        return dict.fromkeys(slabs, f"the index names an arena file {name!r} that is not insitu's")
    try:
        fd = _open_nofollow(directory / name, os.O_RDONLY)
    except (FileNotFoundError, StaleCacheError) as exc:
        why = "missing" if isinstance(exc, FileNotFoundError) else "a symbolic link"
        return dict.fromkeys(slabs, f"arena file {name} is {why}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return dict.fromkeys(slabs, f"arena file {name} is not a regular file")
        n_slots = st.st_size // nbytes
        for key, e in slabs.items():
            try:
                slab, slot = int(key), int(e["slot"])
                if e.get("check") != _entry_check(path, slab, e):
                    out[key] = "its index entry does not match its own checksum (edited or damaged)"
                elif not 0 <= slot < n_slots:
                    out[key] = f"slot {slot} lies beyond the {n_slots} slot(s) of {name}"
                else:
                    data = os.pread(fd, nbytes, slot * nbytes)
                    crc = _crc(path, slab, np.frombuffer(data, dtype=np.uint8))
                    out[key] = (
                        None
                        if crc == e["crc"]
                        else f"crc32 of slot {slot} in {name} is {crc}, the index recorded {e['crc']}"
                    )
            except (KeyError, TypeError, ValueError):
                out[key] = "its index entry is malformed"
    finally:
        os.close(fd)
    return out
