"""``insitu cache show|verify|clear``, run as a user runs them: the console script in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import zarr
from conftest import field, write_array
from zarr.storage import LocalStore

import insitu

# Each test runs the console script several times, seconds each: slow (tests-core runs them once).
pytestmark = pytest.mark.slow

SCRIPT = Path(sys.executable).with_name("insitu")
N = 48  # samples; chunks of 4: 12 slabs per array


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin if stdin is not None else "",
    )


def _epoch(root: Path, cache: Path) -> dict:
    store = LocalStore(root, read_only=True)
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
    with insitu.InSituDataset(store, manifest, batch_size=8, cache_dir=cache, persist=True) as ds:
        for _ in ds.train:
            pass
        return dict(ds.stats)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_array(tmp_path / "data", "x", field(N, (3, 4), seed=1), (4, 3, 4))
    write_array(tmp_path / "data", "y", field(N, (2,), seed=2, dtype="f8"), (4, 2))
    return tmp_path / "data"


@pytest.fixture
def cache(root: Path, tmp_path: Path) -> Path:
    _epoch(root, tmp_path / "cache")
    return tmp_path / "cache"


def _index(cache: Path) -> dict:
    return json.loads((cache / "index.json").read_text())


def test_show_lists_every_cached_array(cache: Path) -> None:
    out = run("cache", "show", str(cache), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["format"] == "insitu.cache/3"
    assert report["lock"] == {"held": False, "holder": None}
    assert sorted(report["arrays"]) == ["x", "y"]
    x, y = report["arrays"]["x"], report["arrays"]["y"]
    assert x["slabs"] == y["slabs"] == N // 4
    assert x["slot_nbytes"] == 4 * 3 * 4 * 4
    assert x["slot_shape"] == [4, 3, 4]
    assert x["dtype"] == "<f4"
    assert y["slot_nbytes"] == 4 * 2 * 8
    assert set(x["fingerprint"]) == {"store", "array", "transforms", "spec", "all"}
    assert (cache / x["file"]).is_file()
    assert report["bytes_on_disk"] > 0
    assert {f["name"] for f in report["files"]} == {"index.json", ".lock", x["file"], y["file"]}
    text = run("cache", "show", str(cache))
    assert text.returncode == 0, text.stderr
    assert "lock: free" in text.stdout
    lines = {line.split()[0]: line.split() for line in text.stdout.splitlines() if line.strip()}
    assert lines["x"][1] == lines["y"][1] == str(N // 4)


def test_the_index_keeps_loading_without_the_fields_verify_reads(root: Path, cache: Path) -> None:
    # An index as insitu wrote it before slot sizes were recorded: a dataset still adopts it,
    # verify says it cannot check it (and fails), and the next close rewrites it in full.
    doc = _index(cache)
    for entry in doc["arrays"].values():
        for key in ("file", "slot_nbytes", "slot_shape", "dtype", "n_slots", "metadata"):
            del entry[key]
    (cache / "index.json").write_text(json.dumps(doc))
    out = run("cache", "verify", str(cache))
    assert out.returncode == 1
    assert "unchecked" in out.stdout
    assert "older insitu" in out.stdout
    stats = _epoch(root, cache)
    assert stats["cache_verified_slabs"] == 2 * (N // 4)
    assert stats["slabs_loaded"] == 0
    assert run("cache", "verify", str(cache)).returncode == 0


def test_verify_passes_then_names_a_tampered_arena_byte(cache: Path) -> None:
    out = run("cache", "verify", str(cache))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "verify: OK" in out.stdout
    entry = _index(cache)["arrays"]["x"]
    slab, record = sorted(entry["slabs"].items())[3]
    with open(cache / entry["file"], "r+b") as f:
        f.seek(record["slot"] * entry["slot_nbytes"] + 5)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x5A]))
    out = run("cache", "verify", str(cache))
    assert out.returncode == 1
    assert f"array 'x' slab {slab}: corrupt" in out.stdout
    assert "verify: FAILED, 1 problem(s)" in out.stdout
    report = json.loads(run("cache", "verify", str(cache), "--json").stdout)
    assert list(report["arrays"]["x"]["corrupt"]) == [slab]
    assert report["arrays"]["y"]["corrupt"] == {}
    assert report["ok"] is False


def test_verify_with_the_store_names_a_rewritten_source(root: Path, cache: Path, tmp_path: Path) -> None:
    assert run("cache", "verify", str(cache), "--store", str(root)).returncode == 0
    arr = zarr.open_array(LocalStore(root), path="y", mode="r+")
    arr[20:24] = arr[20:24] + 1  # slab 5 of y rewritten in place; its cached bytes are intact
    assert run("cache", "verify", str(cache)).returncode == 0  # without --store: crc only
    out = run("cache", "verify", str(cache), "--store", str(root))
    assert out.returncode == 1
    assert "array 'y' slab 5: stale: y/c/5/0 changed since it was cached" in out.stdout
    report = json.loads(run("cache", "verify", str(cache), "--store", str(root), "--json").stdout)
    assert list(report["arrays"]["y"]["stale"]) == ["5"]
    assert report["arrays"]["x"]["stale"] == {}
    # The cache checked against a copy of the data: built from another store, every array stale.
    shutil.copytree(root, tmp_path / "copy")
    out = run("cache", "verify", str(cache), "--store", str(tmp_path / "copy"))
    assert out.returncode == 1
    assert "array 'x': stale: the cache was built from another store" in out.stdout


def test_verify_names_an_array_whose_metadata_changed(root: Path, cache: Path) -> None:
    zarr.open_array(LocalStore(root), path="x", mode="r+").attrs["scale_factor"] = 2.0
    out = run("cache", "verify", str(cache), "--store", str(root))
    assert out.returncode == 1
    assert "array 'x': stale: its metadata changed" in out.stdout
    assert "array 'y'" not in out.stdout


@pytest.fixture
def holder(root: Path, cache: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process with a persisted dataset open on ``cache``, until its stdin closes."""
    code = textwrap.dedent(
        f"""
        import sys, insitu, zarr
        store = zarr.storage.LocalStore({str(root)!r}, read_only=True)
        g = insitu.open_geometries(store)
        with insitu.InSituDataset(store, insitu.split_by_chunk(g["x"], (1.0,)),
                                  cache_dir={str(cache)!r}, persist=True):
            print("open", flush=True)
            sys.stdin.read()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "open"
        yield proc
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=60)


def test_clear_refuses_while_another_process_holds_the_cache(
    cache: Path, holder: subprocess.Popen[str]
) -> None:
    before = sorted(p.name for p in cache.iterdir())
    out = run("cache", "clear", str(cache), "--yes")
    assert out.returncode == 1
    assert f"in use by process {holder.pid}" in out.stderr
    assert sorted(p.name for p in cache.iterdir()) == before
    shown = json.loads(run("cache", "show", str(cache), "--json").stdout)
    assert shown["lock"] == {"held": True, "holder": f"process {holder.pid}"}
    verified = run("cache", "verify", str(cache))
    assert verified.returncode == 1
    assert f"in use by process {holder.pid}" in verified.stdout


def test_clear_removes_insitu_files_only_and_never_follows_links(cache: Path, tmp_path: Path) -> None:
    precious = tmp_path / "precious.bin"
    precious.write_bytes(b"keep")
    (cache / "arena-planted-000000000000.bin").symlink_to(precious)
    (cache / "notes.txt").write_text("mine")
    # Not a terminal and no --yes: refused, nothing removed.
    out = run("cache", "clear", str(cache))
    assert out.returncode == 2
    assert "--yes" in out.stderr
    assert (cache / "index.json").exists()
    out = run("cache", "clear", str(cache), "--yes", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert "index.json" in report["removed"]
    assert ".lock" in report["removed"]
    assert sorted(p.name for p in cache.iterdir()) == ["notes.txt"]
    assert precious.read_bytes() == b"keep"  # the link went, not its target
    assert "nothing to remove" in run("cache", "clear", str(cache), "--yes").stdout


def test_a_linked_cache_directory_is_the_directory_it_names(cache: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(cache, target_is_directory=True)
    shown = run("cache", "show", str(link), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == json.loads(run("cache", "show", str(cache), "--json").stdout)
    assert run("cache", "verify", str(link)).returncode == 0
    assert (cache / "index.json").exists()
    out = run("cache", "show", str(tmp_path / "absent"))
    assert out.returncode == 1
    assert "no cache directory" in out.stderr
