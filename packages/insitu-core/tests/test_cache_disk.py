"""The persisted cache on a full disk, and its lock after a failed construction: clear errors naming
cache_dir, no truncated index, no SIGBUS, and a directory free to retry at once."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import field, write_array

import insitu
from insitu.engine.cache import lock_holder
from insitu.errors import CacheDiskFullError, ConfigError, StaleCacheError

N = 96


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_array(tmp_path / "data", "x", field(N, (3, 4), seed=3), (4, 3, 4))
    return tmp_path / "data"


def _dataset(root: Path, cache: Path, persist: bool | str = True, **kw: Any) -> insitu.InSituDataset:
    store = insitu.open_store(root)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
    return insitu.InSituDataset(store, manifest, batch_size=8, cache_dir=cache, persist=persist, **kw)


def _read_all(ds: insitu.InSituDataset) -> dict[int, np.ndarray]:
    got: dict[int, np.ndarray] = {}
    for b in ds.train:
        got.update(zip(b.sample_indices.tolist(), b["x"], strict=True))
    return got


def _assert_source(got: dict[int, np.ndarray], root: Path) -> None:
    src = np.asarray(zarr.open_array(str(root / "x"), mode="r")[...])
    assert sorted(got) == list(range(N))
    assert all(np.array_equal(v, src[i]) for i, v in got.items())


def _no_space(*_: Any) -> Any:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


# -- faults injected at the system calls (runs everywhere) -----------------------------------------
def test_no_room_for_the_arenas_is_an_error_at_construction_naming_cache_dir(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setattr(os, "posix_fallocate", _no_space)
    with pytest.raises(
        CacheDiskFullError, match=rf"cache_dir {cache}: the arena of array 'x' .*needs [\d,]+ bytes"
    ):
        _dataset(root, cache)
    assert lock_holder(cache) is None  # released at once, not when the half-built object is collected
    monkeypatch.undo()
    with _dataset(root, cache) as ds:  # the same directory, once there is room
        _assert_source(_read_all(ds), root)


def test_scratch_arenas_are_removed_when_they_do_not_fit(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setattr(os, "posix_fallocate", _no_space)
    with pytest.raises(CacheDiskFullError) as info:
        _dataset(root, cache, persist=False)
    assert info.value.errno == errno.ENOSPC
    assert sorted(p.name for p in cache.iterdir()) == []


def test_a_short_write_of_the_index_is_continued(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    real_write = os.write

    def short(fd: int, data: Any) -> int:  # what a nearly full disk does: part of the bytes
        return real_write(fd, bytes(data[: max(1, len(data) // 3)]))

    ds = _dataset(root, cache)
    _read_all(ds)
    monkeypatch.setattr(os, "write", short)
    ds.close()
    monkeypatch.undo()
    json.loads((cache / "index.json").read_text())  # whole
    with _dataset(root, cache) as again:
        got = _read_all(again)
        assert again.stats["cache_verified_slabs"] == N // 4
    _assert_source(got, root)


def test_no_room_for_the_index_raises_from_close_and_leaves_no_broken_index(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    ds = _dataset(root, cache)
    _read_all(ds)
    monkeypatch.setattr(os, "write", _no_space)
    with pytest.raises(CacheDiskFullError, match=rf"cache_dir {cache}: the cache index was not saved"):
        ds.close()
    monkeypatch.undo()
    assert lock_holder(cache) is None
    assert not (cache / "index.json").exists()
    assert [p.name for p in cache.iterdir() if p.name.endswith(".tmp")] == []
    with _dataset(root, cache) as again:  # not refused: an empty cache, filled again
        _assert_source(_read_all(again), root)
        assert again.stats["cache_verified_slabs"] == 0


def test_a_failed_save_keeps_the_previous_index(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from insitu.engine.cache import PersistentCache

    cache = tmp_path / "cache"
    with _dataset(root, cache) as ds:
        _read_all(ds)
    before = (cache / "index.json").read_bytes()
    monkeypatch.setattr(os, "write", _no_space)
    with pytest.raises(CacheDiskFullError, match="the previous index is kept"):
        PersistentCache._write_index(ds._cache, b"{}")  # type: ignore[arg-type]
    assert (cache / "index.json").read_bytes() == before


# -- the lock after a failed construction ----------------------------------------------------------
def test_rebuilding_inside_the_except_block_of_a_stale_cache_works(root: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with _dataset(root, cache) as ds:
        _read_all(ds)
    arr = zarr.open_array(str(root / "x"), mode="r+")
    arr.attrs["units"] = "K"  # the array's metadata changed: its cached slabs are stale
    try:
        _dataset(root, cache)
    except StaleCacheError:
        # The documented fix, with the exception (and the half-built object's frame) still alive.
        with _dataset(root, cache, persist="rebuild") as ds:
            _assert_source(_read_all(ds), root)
    else:
        pytest.fail("a cache built from other metadata was accepted")


# -- a linked cache_dir ----------------------------------------------------------------------------
def test_a_cache_dir_that_is_a_link_is_the_directory_it_names(root: Path, tmp_path: Path) -> None:
    real = tmp_path / "scratch" / "cache"
    real.mkdir(parents=True)
    link = tmp_path / "cache"
    link.symlink_to(real, target_is_directory=True)
    with _dataset(root, link) as ds:
        _read_all(ds)
        assert lock_holder(real) == f"process {os.getpid()}"  # one directory, whichever name
    assert (real / "index.json").exists()
    with _dataset(root, link) as again:
        _assert_source(_read_all(again), root)
        assert again.stats["cache_verified_slabs"] == N // 4


def test_a_cache_dir_that_is_a_file_is_a_config_error(root: Path, tmp_path: Path) -> None:
    file = tmp_path / "cache"
    file.write_text("not a directory")
    with pytest.raises(ConfigError, match=f"cache_dir {file} is not a directory"):
        _dataset(root, file)


# -- a real small filesystem (root only; skipped where mounting is not permitted) ------------------
@contextlib.contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", f"insitu-{uuid.uuid4().hex[:8]}", str(where)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    # In a child: on a reservation bug the arena write would be a SIGBUS, which must not kill pytest.
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


_CHILD = """
import sys
import insitu
store = insitu.open_store({root!r})
g = insitu.open_geometries(store)["x"]
m = insitu.split_by_chunk(g, (1.0,))
try:
    with insitu.InSituDataset(store, m, batch_size=8, cache_dir={cache!r}, persist=True) as ds:
        for _ in ds.train:
            pass
        {between}
except insitu.CacheDiskFullError as exc:
    print("ERROR:", exc)
    sys.exit(3)
print("OK")
"""


@pytest.fixture
def big(tmp_path: Path) -> Path:
    # 3 x 256 x 256 float32 per sample: 786 KiB, 48 samples: 36 MiB of arena, more than the tmpfs.
    write_array(tmp_path / "big", "x", np.zeros((48, 256, 256), dtype="f4"), (4, 256, 256))
    return tmp_path / "big"


@pytest.mark.slow
def test_an_arena_larger_than_the_disk_is_an_error_not_a_sigbus(big: Path, tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "mnt", "8m") as mnt:
        out = _run(_CHILD.format(root=str(big), cache=str(mnt / "cache"), between="pass"))
        assert out.returncode == 3, (out.returncode, out.stderr[-2000:])
        assert f"cache_dir {mnt / 'cache'}" in out.stdout
        assert "needs" in out.stdout
        assert "bytes are free there" in out.stdout
        assert sorted(p.name for p in (mnt / "cache").iterdir()) == [".lock"]  # no half-grown arena kept


@pytest.mark.slow
def test_a_full_disk_at_open_names_cache_dir(root: Path, tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "mnt", "1m") as mnt:
        filler = mnt / "filler"
        with contextlib.suppress(OSError), filler.open("wb") as f:
            f.write(b"\0" * (2 << 20))
        out = _run(_CHILD.format(root=str(root), cache=str(mnt / "cache"), between="pass"))
        assert out.returncode == 3, (out.returncode, out.stderr[-2000:])
        assert f"cache_dir {mnt / 'cache'}" in out.stdout


@pytest.mark.slow
def test_a_disk_filled_during_the_run_fails_the_save_cleanly(root: Path, tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "mnt", "1m") as mnt:
        # After the epoch, before close(): the disk fills up (another job's output, say).
        between = (
            "import contextlib\n"
            "        with contextlib.suppress(OSError), open("
            f"{str(mnt / 'filler')!r}, 'wb') as f: f.write(bytes(2 << 20))"
        )
        out = _run(_CHILD.format(root=str(root), cache=str(mnt / "cache"), between=between))
        assert out.returncode == 3, (out.returncode, out.stderr[-2000:])
        assert "the cache index was not saved" in out.stdout
        (mnt / "filler").unlink()
        again = _run(_CHILD.format(root=str(root), cache=str(mnt / "cache"), between="pass"))
        assert again.returncode == 0, again.stdout + again.stderr[-2000:]
