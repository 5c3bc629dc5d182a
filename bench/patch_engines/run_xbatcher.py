"""Runner for xbatcher: ``xbatcher.BatchGenerator(ds, input_dims=..., input_overlap=...)`` over
``xarray.open_zarr``, through a torch map-style Dataset and a ``DataLoader`` with workers, the
pattern of xbatcher's own torch adapter (``xbatcher.loaders.torch.MapDataset``).

The group is opened with ``xr.open_zarr(store, chunks=None)`` (lazy indexing, no dask) over a
:class:`shared.CountingStore`. ``input_dims`` is one step of the sample dimension and the patch
size on the others, ``input_overlap`` zero along them (a grid, stride = size); each generator
item is one patch, and ``MapDataset`` item ``i`` its array as a tensor (the transform takes the
values without the copy xbatcher's default ``to_tensor`` makes). The DataLoader shuffles with a
seeded generator, collates, and forks ``num_workers`` workers (they inherit the opened dataset).

Tuning: ``num_workers``, ``prefetch_factor``. Grid sampling only: xbatcher has no random
positions (a random-sampling spec is reported unsupported).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run_zarr_reader import make_loader
from shared import Clock, PatchSpec, cold_epoch, counting_store, emit, unsupported_without


class PatchValues:
    """MapDataset transform: one generator item (a ``(1, P, P)`` DataArray) -> a ``(P, P)`` tensor."""

    def __call__(self, item: Any) -> Any:
        import torch

        return torch.from_numpy(item.values[0])


def main() -> None:
    spec = PatchSpec.load(sys.argv[1])
    unsupported_without(["torch", "xarray", "xbatcher", "zarr"])
    if spec.sampling != "grid":
        emit({"unsupported": "xbatcher draws grid patches only (no random positions)"})
        return
    import xarray as xr
    import xbatcher
    from xbatcher.loaders.torch import MapDataset

    clock = Clock()
    store, counts = counting_store(spec)
    data = xr.open_zarr(store, consolidated=False, chunks=None)[spec.array]
    sample_dim, *patch_dims = spec.dims
    input_dims = {sample_dim: 1, **dict(zip(patch_dims, spec.patch, strict=True))}
    generator = xbatcher.BatchGenerator(
        data, input_dims=input_dims, input_overlap=dict.fromkeys(patch_dims, 0)
    )
    dataset = MapDataset(generator, transform=PatchValues())
    loader = make_loader(spec, dataset, shuffle=True)
    result = cold_epoch(spec, clock, lambda: loader)
    gets = counts.summary()
    result.chunk_gets = result.chunk_decodes = gets["chunk_gets"]
    result.distinct_chunks = gets["distinct_chunks"]
    result.max_decodes_one_chunk = gets["max_decodes_one_chunk"]
    result.extra = {
        "num_workers": loader.num_workers,
        "other_gets": gets["other_gets"],
        "generator_items": len(generator),
    }
    emit(result)


if __name__ == "__main__":
    main()
