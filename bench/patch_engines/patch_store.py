"""The patch benchmark's store: one float32 ``(t, y, x)`` array in zstd-compressed chunks of one
step and ``CY x CX`` pixels, written once with zarr and reused (keyed by its sizes).

The group is zarr v3 as xarray writes one (``dimension_names``), so insitu names the dimensions
and ``xarray.open_zarr`` reads it without coordinates. Values are a smooth random field per step
(two cumulative sums of noise) drifting in time plus a little noise, quantized to 1/256: zstd
compresses it somewhat, as it does real imagery, and every patch differs from every other (the
checksums mean something).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ARRAY = "image"  # not a dimension's name: xarray would take it for a coordinate of "x"
DIMS = ("t", "y", "x")


def store_path(work: Path, shape: Sequence[int], chunks: Sequence[int]) -> Path:
    name = "patches-{}-c{}.zarr".format("x".join(map(str, shape)), "x".join(map(str, chunks)))
    return work / name


def build_store(work: Path, shape: Sequence[int], chunks: Sequence[int]) -> Path:
    """The store of ``shape`` in ``chunks`` under ``work``, written on first use."""
    import zarr
    from zarr.codecs import ZstdCodec

    root = store_path(work, shape, chunks)
    # Written last, beside the group (a stray file inside it makes zarr warn when listing it): an
    # interrupted build is redone, not reused.
    done = root.with_suffix(".complete")
    if done.exists():
        return root
    group = zarr.open_group(zarr.storage.LocalStore(root), mode="w", zarr_format=3)
    array = group.create_array(
        ARRAY,
        shape=tuple(shape),
        chunks=tuple(chunks),
        dtype="float32",
        compressors=[ZstdCodec()],
        dimension_names=DIMS,
        fill_value=0.0,
    )
    n_t, n_y, n_x = shape
    rng = np.random.default_rng(0)
    base = rng.normal(size=(n_y, n_x)).cumsum(axis=0).cumsum(axis=1) / np.sqrt(n_y * n_x)
    wave = rng.normal(size=(n_y, n_x)).cumsum(axis=1) / np.sqrt(n_x)
    step = max(1, chunks[0])
    for t0 in range(0, n_t, step):
        t = np.arange(t0, min(t0 + step, n_t))[:, None, None]
        noise = rng.normal(scale=0.01, size=(len(t), n_y, n_x))
        field = base + 0.01 * t + np.sin(t / 5.0) * wave + noise
        # Quantized to 1/256 as a sensor's integer counts are: zstd finds the zero low bits
        # (about 3x here), where full float noise would leave it next to nothing to compress.
        array[t0 : t0 + len(t)] = (np.round(field * 256) / 256).astype("float32")
    done.write_text(json.dumps({"shape": list(shape), "chunks": list(chunks)}))
    return root


def stored_bytes(root: Path) -> int:
    """Bytes of the array's chunk files (compressed)."""
    return sum(p.stat().st_size for p in (root / ARRAY / "c").rglob("*") if p.is_file())
