"""Static fields: arrays without the sample dimension (a land-sea mask, orography, a grid's areas).

A static field is read once, when the dataset is built, through the engine's
fetcher (so its reads are retried and timed out like every other read), only
where its selection touches. Its chunk transforms (CF decoding first) run on
it as a one-row block, ``(1, *shape)``, so the chunk-transform contract is
the same as for sampled arrays. It stays resident for the dataset's life,
counted against the cache budget, and every batch carries a copy of it under
its label with a leading axis of length 1, ``(1, *shape)``: stored once, not
repeated per row, and broadcastable against the batch's ``(n, *shape)``
arrays in numpy, torch, JAX and TensorFlow alike (``x * batch["lsm"]``,
or ``np.broadcast_to(batch["lsm"], (n, *shape))`` for a per-row copy).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import numpy as np
import zarr
from zarr.abc.store import Store

from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.transforms import ChunkTransform, SlabSpec, chain_runner, output_spec
from insitu.store.fetch import ChunkFetcher
from insitu.store.zarr_reads import FetchingStore


def static_spec(geom: ArrayGeometry, transforms: Sequence[ChunkTransform]) -> SlabSpec:
    """The resident block of a static field after its chunk transforms: ``(1, *shape)``."""
    return output_spec(geom, transforms, start=SlabSpec((1, *geom.sample_shape), geom.dtype))


async def read_statics(
    store: Store,
    fetcher: ChunkFetcher,
    statics: Sequence[ArrayGeometry],
    transforms: Mapping[str, Sequence[ChunkTransform]],
) -> dict[str, np.ndarray]:
    """``{label: values}`` of every static field, selection applied and transformed; read concurrently."""
    through = FetchingStore(store, fetcher)

    async def one(g: ArrayGeometry) -> tuple[str, np.ndarray]:
        arr = await zarr.api.asynchronous.open_array(store=through, path=g.path, mode="r")
        region, _ = g.orthogonal_region()
        raw = np.asarray(await arr.get_orthogonal_selection(region))
        chain = tuple(transforms.get(g.path, ()))
        if chain:
            spec = static_spec(g, chain)
            block = chain_runner(g.name, chain, spec)(raw[np.newaxis])
            return g.label, np.ascontiguousarray(block)
        return g.label, np.ascontiguousarray(raw[np.newaxis])

    return dict(await asyncio.gather(*(one(g) for g in statics)))
