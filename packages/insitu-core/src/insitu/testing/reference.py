"""The small reference Zarr hierarchy every store plugin must read back exactly.

Three arrays cover the layouts the engine reads: a v3 array, a v3 sharded
array and a v2 array. Each has chunks that were never written (all fill
value), so a store must answer "missing" correctly, not only "present".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import zarr
from zarr.abc.store import Store

GROUP_ATTRIBUTES: dict[str, Any] = {"title": "insitu conformance reference", "version": 1}


@dataclass(frozen=True)
class ReferenceArray:
    """One reference array: where it lives, what it holds, which keys must be absent."""

    path: str
    zarr_format: Literal[2, 3]
    expected: np.ndarray
    #: Chunk or shard keys deliberately never written.
    missing_keys: tuple[str, ...]
    #: A stored chunk or shard key, used for byte-range checks.
    present_key: str
    attributes: dict[str, Any]


def reference_arrays() -> tuple[ReferenceArray, ...]:
    """Fresh copies of the reference arrays' expected contents (nothing is written)."""
    dense = np.arange(10 * 6 * 4, dtype="float32").reshape(10, 6, 4) / 8
    dense[3:6, 0:4, :] = np.nan  # exactly chunk (1, 0, 0): never stored
    sharded = np.arange(24 * 8, dtype="int16").reshape(24, 8) - 50
    sharded[8:16] = -1  # the whole second shard: never stored
    sharded[2:4, 0:4] = -1  # one inner chunk of the first shard: absent from its index
    legacy = np.arange(7 * 5, dtype="float64").reshape(7, 5) * 1.5
    legacy[3:6, 2:4] = np.nan  # exactly chunk (1, 1): never stored
    return (
        ReferenceArray("v3/dense", 3, dense, ("v3/dense/c/1/0/0",), "v3/dense/c/0/0/0", {"units": "K"}),
        ReferenceArray(
            "v3/sharded", 3, sharded, ("v3/sharded/c/1/0",), "v3/sharded/c/0/0", {"units": "count"}
        ),
        ReferenceArray("v2/dense", 2, legacy, ("v2/dense/1.1",), "v2/dense/0.0", {"units": "m"}),
    )


def write_reference(store: Store) -> tuple[ReferenceArray, ...]:
    """Write the reference hierarchy into a writable ``store`` with zarr itself."""
    arrays = reference_arrays()
    dense, sharded, legacy = arrays
    # write_empty_chunks=False is what leaves the all-fill chunks unwritten.
    v3 = zarr.create_group(store=store, path="v3", zarr_format=3, attributes=GROUP_ATTRIBUTES)
    a = v3.create_array(
        "dense",
        shape=dense.expected.shape,
        dtype="float32",
        chunks=(3, 4, 4),
        fill_value=np.nan,
        dimension_names=("time", "y", "x"),
        attributes=dense.attributes,
        config={"write_empty_chunks": False},
    )
    a[...] = dense.expected
    b = v3.create_array(
        "sharded",
        shape=sharded.expected.shape,
        dtype="int16",
        chunks=(2, 4),
        shards=(8, 8),
        fill_value=-1,
        attributes=sharded.attributes,
        config={"write_empty_chunks": False},
    )
    b[...] = sharded.expected
    v2 = zarr.create_group(store=store, path="v2", zarr_format=2, attributes=GROUP_ATTRIBUTES)
    c = v2.create_array(
        "dense",
        shape=legacy.expected.shape,
        dtype="float64",
        chunks=(3, 2),
        fill_value=np.nan,
        attributes=legacy.attributes,
        config={"write_empty_chunks": False},
    )
    c[...] = legacy.expected
    return arrays
