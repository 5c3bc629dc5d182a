"""``insitu cache show|verify|clear DIR``: a persisted cache directory, looked at from a shell.

``show`` reads the index and lists the files without taking the lock (it
probes it for an instant). ``verify`` takes the lock as a dataset does, so no
run starts while it reads, and checks every cached slab as a dataset checks it
on reuse: the index entry's own checksum, then the slot's crc32 in its arena;
with ``--store`` also whether the store still holds what each slab was read
from (object versions, or the stored bytes' crc32), whether the array's
metadata is unchanged, and whether the cache was built from that store at all.
``clear`` removes insitu's files only (the index, the arenas, the lock),
never following a link, and refuses while another process holds the lock.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from insitu.cli.common import print_table


class CacheCommand:
    """insitu cache show|verify|clear DIR: the persisted tier (a cache_dir used with persist=True).

    show    what the cache holds: its format, each array's cached slabs, slot size and
            fingerprint, the size on disk, and whether a process holds it now
    verify  every cached slab against its crc32, and with --store URL whether the store still
            holds what each slab was read from; exit status 1 naming anything corrupt or stale
    clear   remove the cache's files (only insitu's; never through a link); refused while a
            process holds the cache; asks first unless --yes
    """

    description = inspect.cleandoc(__doc__ or "")
    help = "show, verify or clear a persisted cache directory (cache_dir with persist=True)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the ``show``, ``verify`` and ``clear`` actions, each taking the cache directory."""
        actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        show = actions.add_parser("show", help="what the cache holds, its size, who holds it")
        verify = actions.add_parser(
            "verify", help="check every cached slab (and, with --store, its sources); exit 1 on a problem"
        )
        clear = actions.add_parser("clear", help="remove the cache's files (insitu's only)")
        for sub in (show, verify, clear):
            sub.add_argument("dir", metavar="DIR", help="the cache directory (cache_dir)")
            sub.add_argument("--json", action="store_true", help="print JSON instead of text")
        verify.add_argument(
            "--store",
            default=None,
            metavar="URL",
            help="also check staleness against this store (the one the cache was built from)",
        )
        verify.add_argument(
            "--storage-options", default=None, metavar="JSON", help="options for --store, as JSON"
        )
        clear.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")

    def run(self, args: argparse.Namespace) -> int:
        """Run the chosen action; exit status 1 when ``verify`` finds a problem or ``clear`` cannot
        clear (the cache is in use)."""
        directory = _cache_dir(args.dir)
        if args.action == "show":
            report = show_cache(directory)
            _emit(report, args.json, render_show)
            return 0
        if args.action == "verify":
            store = None
            if args.store is not None:
                from insitu.cli.common import open_store_from_args

                store = open_store_from_args(
                    argparse.Namespace(url=args.store, storage_options=args.storage_options)
                )
            report = verify_cache(directory, store)
            _emit(report, args.json, render_verify)
            return 0 if report["ok"] else 1
        return _clear(directory, args)


def _cache_dir(text: str) -> Path:
    """The directory named, resolved as a dataset resolves its ``cache_dir`` (a link to a directory
    is that directory; the files inside are still never followed)."""
    path = Path(text)
    if not path.exists() and not path.is_symlink():
        raise FileNotFoundError(f"no cache directory at {path}")
    resolved = path.resolve()
    if not resolved.is_dir():
        raise ValueError(f"{path} is not a directory")
    return resolved


def _emit(report: Mapping[str, Any], as_json: bool, render: Any) -> None:
    print(json.dumps(report, indent=1, default=str) if as_json else render(report))


# -- show -------------------------------------------------------------------------------------------
def _files(directory: Path) -> list[dict[str, Any]]:
    """insitu's files in ``directory`` (not following links), with their sizes."""
    from insitu.engine.cache import INDEX, LOCK, is_cache_file

    out = []
    with os.scandir(directory) as entries:
        for e in entries:
            if not is_cache_file(e.name):
                continue
            st = e.stat(follow_symlinks=False)
            kind = (
                "index"
                if e.name == INDEX
                else "lock"
                if e.name == LOCK
                else "temporary index"
                if e.name.endswith(".tmp")
                else "arena"
            )
            if stat.S_ISLNK(st.st_mode):
                kind = "symbolic link (never followed)"
            elif stat.S_ISDIR(st.st_mode):
                kind = "directory (not insitu's)"
            out.append(
                {
                    "name": e.name,
                    "kind": kind,
                    "bytes": st.st_size,
                    "disk_bytes": getattr(st, "st_blocks", 0) * 512 or st.st_size,
                }
            )
    return sorted(out, key=lambda f: f["name"])


def _table(entry: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``entry[key]`` when it is a JSON object, else an empty one (a damaged index)."""
    value = entry.get(key)
    return value if isinstance(value, dict) else {}


def _index_or_error(directory: Path) -> tuple[dict[str, Any] | None, str | None]:
    from insitu.engine.cache import read_index
    from insitu.errors import StaleCacheError

    try:
        return read_index(directory), None
    except StaleCacheError as exc:
        return None, str(exc)


def show_cache(directory: Path) -> dict[str, Any]:
    """What ``insitu cache show`` prints, as a JSON-able dict."""
    from insitu.engine.cache import FORMAT, arena_name, lock_holder

    holder = lock_holder(directory)
    files = _files(directory)
    doc, error = _index_or_error(directory)
    arrays: dict[str, Any] = {}
    for path, entry in sorted((doc or {}).get("arrays", {}).items()):
        entry = entry if isinstance(entry, dict) else {}
        fingerprint, slabs = _table(entry, "fingerprint"), _table(entry, "slabs")
        nbytes = entry.get("slot_nbytes")
        arrays[path] = {
            "slabs": len(slabs),
            "slot_nbytes": nbytes,
            "cached_bytes": nbytes * len(slabs) if isinstance(nbytes, int) else None,
            "slot_shape": entry.get("slot_shape"),
            "dtype": entry.get("dtype"),
            "n_slots": entry.get("n_slots"),
            "file": entry.get("file") or arena_name(path, str(fingerprint.get("all", ""))),
            "fingerprint": fingerprint,
        }
    indexed = {a["file"] for a in arrays.values()}
    notes = []
    if holder is not None:
        notes.append(
            f"in use by {holder}: a live run removes the index when it opens the cache and writes it "
            "again when it closes its dataset"
        )
    if error is not None:
        notes.append(f"{error}; a dataset refuses it unless persist='rebuild'")
    elif doc is None and holder is None:
        notes.append(
            "no index: no run has closed a dataset on this cache (or one crashed); the next run starts empty"
        )
    unindexed = [f["name"] for f in files if f["kind"] == "arena" and f["name"] not in indexed]
    if unindexed and doc is not None:
        notes.append(
            f"{len(unindexed)} arena file(s) no array of the index uses (left by a run that did not "
            "persist or a rebuilt array); `insitu cache clear` removes them"
        )
    return {
        "dir": str(directory),
        "format": doc.get("format") if doc else None,
        "reader_format": FORMAT,
        "index": "present" if doc is not None else "unreadable" if error else "absent",
        "lock": {"held": holder is not None, "holder": holder},
        "bytes_on_disk": sum(f["disk_bytes"] for f in files),
        "apparent_bytes": sum(f["bytes"] for f in files),
        "files": files,
        "arrays": arrays,
        "unindexed_files": unindexed,
        "notes": notes,
    }


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def render_show(r: Mapping[str, Any]) -> str:
    lock = f"held by {r['lock']['holder']}" if r["lock"]["held"] else "free"
    lines = [
        f"cache: {r['dir']}",
        f"format: {r['format'] or '-'} (this insitu reads {r['reader_format']}); index {r['index']}",
        f"lock: {lock}",
        f"on disk: {_size(r['bytes_on_disk'])} in {len(r['files'])} file(s) "
        f"(apparent size {_size(r['apparent_bytes'])}; arenas are sparse until written)",
    ]
    if r["arrays"]:
        lines.append("")
        rows = []
        for path, a in r["arrays"].items():
            fp = a["fingerprint"]
            rows.append(
                [
                    path,
                    a["slabs"],
                    a["n_slots"] if a["n_slots"] is not None else "-",
                    a["slot_nbytes"] if a["slot_nbytes"] is not None else "-",
                    "x".join(map(str, a["slot_shape"])) if a["slot_shape"] else "-",
                    a["dtype"] or "-",
                    _size(a["cached_bytes"]),
                    "/".join(str(fp.get(k, "?"))[:8] for k in ("store", "array", "transforms", "spec")),
                    a["file"],
                ]
            )
        lines += print_table(
            [
                "array",
                "slabs",
                "slots",
                "slot bytes",
                "slot shape",
                "dtype",
                "cached",
                "fingerprint store/array/transforms/spec",
                "arena",
            ],
            rows,
        )
    for note in r["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


# -- verify -----------------------------------------------------------------------------------------
def _lock_for_reading(directory: Path, label: str) -> tuple[int | None, str | None]:
    """The lock, held as a dataset holds it (so that no run starts meanwhile), or who holds it.

    A directory with neither an index nor a lock file has nothing to guard (and gets no lock
    file); on one this process cannot write, nobody can run either: probe only."""
    import errno

    from insitu.engine.cache import INDEX, LOCK, hold_lock, lock_holder
    from insitu.errors import CacheInUseError

    if not (os.path.lexists(directory / LOCK) or os.path.lexists(directory / INDEX)):
        return None, None
    try:
        return hold_lock(directory, f"{label} (process {os.getpid()})"), None
    except CacheInUseError:
        return None, lock_holder(directory) or "another process"
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        return None, lock_holder(directory)


def verify_cache(directory: Path, store: Any = None) -> dict[str, Any]:
    """What ``insitu cache verify`` prints, as a JSON-able dict (``ok`` False on any problem)."""
    fd, holder = _lock_for_reading(directory, "insitu cache verify")
    try:
        return _verify_locked(directory, store, holder)
    finally:
        if fd is not None:
            os.close(fd)


def _verify_locked(directory: Path, store: Any, holder: str | None) -> dict[str, Any]:
    from insitu.engine.cache import check_array

    report: dict[str, Any] = {
        "dir": str(directory),
        "store": None if store is None else _redacted(repr(store)),
        "arrays": {},
        "problems": [],
        "notes": [],
    }
    problems: list[str] = report["problems"]
    if holder is not None:
        problems.append(
            f"in use by {holder}: a live run owns the arenas (its index is written when it closes "
            "its dataset); verify once it has"
        )
        report["ok"] = False
        return report
    doc, error = _index_or_error(directory)
    if error is not None:
        problems.append(f"{error}; a dataset refuses it unless persist='rebuild'")
    elif doc is None:
        report["notes"].append("no index: nothing is cached (the next run starts empty)")
    arrays = (doc or {}).get("arrays", {})
    for path, entry in sorted(arrays.items()):
        entry = entry if isinstance(entry, dict) else {}
        checked = check_array(directory, path, entry)
        corrupt = {s: why for s, why in checked.items() if why is not None}
        info: dict[str, Any] = {
            "slabs": len(checked),
            "corrupt": corrupt,
            "stale": {},
            "array_stale": None,
        }
        report["arrays"][path] = info
        for slab, why in _by_slab(corrupt):
            kind = "unchecked" if why.startswith("unchecked") else "corrupt"
            problems.append(f"array {path!r} slab {slab}: {kind}: {why.removeprefix('unchecked: ')}")
    if store is not None and arrays:
        _check_store(store, arrays, report)
    for info in report["arrays"].values():
        bad = set(info["corrupt"]) | set(info["stale"])
        info["intact"] = info["slabs"] - len(bad) if info["array_stale"] is None else 0
    report["ok"] = not problems
    return report


def _by_slab(items: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return sorted(items.items(), key=lambda kv: (len(kv[0]), kv[0]))


def _redacted(text: str) -> str:
    from insitu.store.opener import redact_urls

    return redact_urls(text)


def _check_store(store: Any, arrays: Mapping[str, Any], report: dict[str, Any]) -> None:
    """Staleness against ``store``: the cache's store identity, each array's metadata, and each
    slab's recorded sources (what a dataset checks when it adopts them)."""
    import zarr

    from insitu.engine.cache import metadata_digest, source_states, store_digest
    from insitu.store.fetch import ChunkFetcher
    from insitu.store.loop import run_sync
    from insitu.store.retry import RetryPolicy

    problems: list[str] = report["problems"]
    mine = store_digest(store)
    fetcher = ChunkFetcher(store, RetryPolicy())
    for path, entry in sorted(arrays.items()):
        info = report["arrays"][path]
        entry = entry if isinstance(entry, dict) else {}
        fingerprint = _table(entry, "fingerprint")
        if fingerprint.get("store") != mine:
            info["array_stale"] = "the cache was built from another store (store identity differs)"
        else:
            try:
                current = metadata_digest(zarr.open_array(store, path=path, mode="r").metadata.to_dict())
            except (FileNotFoundError, KeyError, ValueError, zarr.errors.BaseZarrError):
                info["array_stale"] = "the store no longer holds this array"
            else:
                recorded = entry.get("metadata")
                if recorded is None:
                    report["notes"].append(
                        f"array {path!r}: the index does not record its metadata digest (older insitu); "
                        "only its chunks' sources were checked"
                    )
                elif recorded != current:
                    info["array_stale"] = "its metadata changed in the store (attributes, codecs or shape)"
        if info["array_stale"] is not None:
            problems.append(f"array {path!r}: stale: {info['array_stale']}")
            continue
        slabs = _table(entry, "slabs")
        usable = {
            s: e
            for s, e in slabs.items()
            if isinstance(e, dict) and isinstance(e.get("sources"), list) and s not in info["corrupt"]
        }
        states = run_sync(source_states(fetcher, usable))
        for slab, e in _by_slab(usable):
            changed = []
            for key, byte_range, source in e["sources"]:
                state = states[(key, json.dumps(byte_range), source)]
                if state is True:
                    continue
                where = key if byte_range is None else f"{key} bytes {byte_range[0]}-{byte_range[1]}"
                changed.append(
                    f"{where} changed since it was cached"
                    if state is False
                    else f"{where} could not be checked ({type(state).__name__}: {state})"
                )
            if changed:
                info["stale"][slab] = "; ".join(changed)
                problems.append(f"array {path!r} slab {slab}: stale: {info['stale'][slab]}")


def render_verify(r: Mapping[str, Any]) -> str:
    lines = [f"cache: {r['dir']}"]
    if r["store"] is not None:
        lines.append(f"checked against: {r['store']}")
    if r["arrays"]:
        lines.append("")
        rows = [
            [
                path,
                a["slabs"],
                a.get("intact", "-"),
                len(a["corrupt"]),
                "array" if a["array_stale"] else len(a["stale"]) if r["store"] is not None else "-",
            ]
            for path, a in r["arrays"].items()
        ]
        lines += print_table(["array", "slabs", "intact", "corrupt", "stale"], rows)
    for note in r["notes"]:
        lines.append(f"note: {note}")
    if r["problems"]:
        lines += ["", "problems:"] + [f"  {p}" for p in r["problems"]]
        lines.append(f"verify: FAILED, {len(r['problems'])} problem(s)")
    else:
        slabs = sum(a["slabs"] for a in r["arrays"].values())
        what = "crc32 and sources" if r["store"] is not None else "crc32 (pass --store to check sources)"
        lines.append(f"verify: OK, {slabs} slab(s) in {len(r['arrays'])} array(s), {what}")
    return "\n".join(lines)


# -- clear ------------------------------------------------------------------------------------------
def _clear(directory: Path, args: argparse.Namespace) -> int:
    from insitu.engine.cache import LOCK, hold_lock, is_cache_file, lock_holder
    from insitu.errors import CacheInUseError

    holder = lock_holder(directory)
    if holder is not None:
        print(
            f"insitu: error: not cleared: the cache in {directory} is in use by {holder}; "
            "clear it once that process has closed its dataset",
            file=sys.stderr,
        )
        return 1
    files = _files(directory)
    if not files:
        _emit({"dir": str(directory), "removed": [], "bytes": 0}, args.json, _render_clear)
        return 0
    total = sum(f["disk_bytes"] for f in files)
    if not args.yes and not _confirm(f"remove {len(files)} file(s), {_size(total)}, from {directory}?"):
        print("insitu: nothing removed", file=sys.stderr)
        return 1
    try:
        lock_fd = hold_lock(directory, f"insitu cache clear (process {os.getpid()})")
    except CacheInUseError as exc:
        print(f"insitu: error: not cleared: {exc}", file=sys.stderr)
        return 1
    removed: list[str] = []
    freed = 0
    try:
        # Names are unlinked relative to a descriptor of the directory opened without following
        # a link, so a directory swapped for a link meanwhile is not walked into; unlinking a
        # file that is itself a link removes the link, never its target.
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_NOFOLLOW", 0))
        try:
            with os.scandir(dir_fd) as entries:
                names = sorted(e.name for e in entries if is_cache_file(e.name) and e.name != LOCK)
            for name in [*names, LOCK]:
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    continue  # a directory with one of insitu's names is not insitu's
                os.unlink(name, dir_fd=dir_fd)
                removed.append(name)
                freed += getattr(st, "st_blocks", 0) * 512 or st.st_size
        finally:
            os.close(dir_fd)
    finally:
        os.close(lock_fd)
    _emit({"dir": str(directory), "removed": removed, "bytes": freed}, args.json, _render_clear)
    return 0


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        raise ValueError("refusing to clear without confirmation: pass --yes (stdin is not a terminal)")
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _render_clear(r: Mapping[str, Any]) -> str:
    if not r["removed"]:
        return f"nothing to remove in {r['dir']} (no insitu cache files there)"
    return f"removed {len(r['removed'])} file(s), {_size(r['bytes'])}, from {r['dir']}: " + ", ".join(
        r["removed"]
    )


__all__: Sequence[str] = ["CacheCommand", "show_cache", "verify_cache"]
