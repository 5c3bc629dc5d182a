"""Sizes no pass could allocate are a ConfigError when the dataset is built, naming the label, the
bytes and the limit, instead of a MemoryError at ``next()`` (the address-space limit is set in a
child process, as ``ulimit -v`` would)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import zarr

import insitu
from insitu.errors import ConfigError
from insitu.plan.limits import memory_ceiling

# A child: 64 samples of 4 MiB (1,048,576 float32 each), one sample per chunk, in memory; then
# RLIMIT_AS set to what is mapped now plus HEADROOM_MB, and a dataset built with KWARGS.
CHILD = textwrap.dedent(
    """
    import json, resource, sys
    import numpy as np, zarr, insitu
    headroom_mb, kwargs = int(sys.argv[1]), json.loads(sys.argv[2])
    root = zarr.storage.MemoryStore()
    arr = zarr.open_group(root, mode="w").create_array(
        "big", shape=(64, 1024, 1024), chunks=(1, 1024, 1024), dtype="f4"
    )
    arr[...] = np.arange(64, dtype="f4")[:, None, None]
    geoms = insitu.open_geometries(root)
    manifest = insitu.split_by_chunk(geoms["big"], (1.0,))
    with open("/proc/self/status") as f:
        mapped = next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
    limit = mapped + (headroom_mb << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
    try:
        with insitu.InSituDataset(root, manifest, geoms, shuffle=False, **kwargs) as ds:
            seen = [float(v) for b in ds.train for v in b["big"][:, 0, 0]]
        print(json.dumps({"seen": seen}))
    except Exception as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
    """
)


def _child(headroom_mb: int, **kwargs: object) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(headroom_mb), json.dumps(kwargs)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


needs_rlimit = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc: Linux")


@needs_rlimit
@pytest.mark.timeout(300)
def test_a_batch_beyond_the_address_space_left_is_refused_at_construction() -> None:
    # 48 samples of 4 MiB a batch: 192 MiB per batch, 3 in flight, in 160 MiB of address space.
    out = _child(160, batch_size=48, cache_budget_bytes=0)
    assert out.get("error") == "ConfigError", out
    message = str(out["message"])
    assert "RLIMIT_AS" in message
    assert "batch_size=48" in message
    assert "201,326,592 bytes" in message  # one batch of 48 samples of 4 MiB


@needs_rlimit
@pytest.mark.timeout(300)
def test_one_batch_beyond_the_limit_names_its_label() -> None:
    out = _child(100, batch_size=32, cache_budget_bytes=0)
    assert out.get("error") == "ConfigError", out
    message = str(out["message"])
    assert "label 'big' takes 134,217,728 bytes per batch (batch_size=32)" in message
    assert "address space left under RLIMIT_AS" in message


@needs_rlimit
@pytest.mark.timeout(300)
def test_a_pool_beyond_the_limit_is_refused_naming_its_bytes() -> None:
    # The whole array (256 MiB) cached, in 200 MiB of address space.
    out = _child(200, batch_size=2, cache_budget_bytes=1 << 40)
    assert out.get("error") == "ConfigError", out
    message = str(out["message"])
    assert "the pool's 268,435,456 bytes" in message
    assert "cache_budget_bytes" in message


@needs_rlimit
@pytest.mark.timeout(300)
def test_a_dataset_that_fits_the_limit_is_read_whole() -> None:
    out = _child(900, batch_size=4, cache_budget_bytes=0)
    assert out.get("seen") == [float(i) for i in range(64)], out


def test_a_chunk_larger_than_the_machine_is_refused_naming_the_array() -> None:
    ceiling = memory_ceiling()
    if ceiling is None:
        pytest.skip("the machine's memory cannot be read here")
    side = int((ceiling.nbytes // 4) ** 0.5) + 1024  # one float32 sample larger than RAM and swap
    root = zarr.storage.MemoryStore()
    zarr.open_group(root, mode="w").create_array(
        "huge", shape=(2, side, side), chunks=(1, side, side), dtype="f4"
    )
    geoms = insitu.open_geometries(root)
    manifest = insitu.split_by_chunk(geoms["huge"], (1.0,))
    with pytest.raises(ConfigError) as caught:
        insitu.InSituDataset(root, manifest, geoms, batch_size=1, cache_budget_bytes=0)
    message = str(caught.value)
    assert "label 'huge'" in message
    assert f"{side * side * 4:,} bytes" in message
    assert "RAM and swap" in message or "cgroup" in message


def test_everyday_sizes_are_not_refused() -> None:
    root = zarr.storage.MemoryStore()
    zarr.open_group(root, mode="w").create_array("x", shape=(40, 8), chunks=(4, 8), dtype="f4")[...] = (
        np.arange(320, dtype="f4").reshape(40, 8)
    )
    geoms = insitu.open_geometries(root)
    manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
    with insitu.InSituDataset(root, manifest, geoms, batch_size=1024, shuffle=False) as ds:
        (batch,) = list(ds.train)
    np.testing.assert_array_equal(batch["x"], np.arange(320, dtype="f4").reshape(40, 8))
