"""Runner for the per-patch reader (the torchgeo / torch-em pattern): a map-style torch Dataset
whose ``__getitem__(i)`` slices ``array[t, y0:y0+P, x0:x0+P]`` with zarr for patch ``i``'s
position, behind a ``DataLoader`` that shuffles, collates and spreads reads over workers.

Each process that reads (the main one, or each forked worker) opens the array on its first item,
as a user's Dataset must. A patch read decodes every stored chunk it overlaps, whole: with 4
patches per chunk, each chunk is decoded 4 times per epoch. GETs are counted by
:class:`shared.CountingStore` in memory the workers share with the parent.

Tuning: ``num_workers`` (0: read in the main process), ``prefetch_factor`` (torch's default
where absent). Positions: the grid (every patch once, shuffled by the DataLoader) or
``patches_per_epoch`` random draws (``shared.random_origins``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shared import Clock, PatchSpec, cold_epoch, counting_store, emit, origins_for, unsupported_without


def make_loader(spec: PatchSpec, dataset: Any, shuffle: bool) -> Any:
    """A DataLoader over ``dataset`` with the spec's worker tuning; workers are forked (the GET
    counters live in memory shared over fork) and not kept between epochs."""
    import torch
    import torch.utils.data

    workers = int(spec.tuning.get("num_workers", 0))
    kwargs: dict[str, Any] = {}
    if workers:
        kwargs["multiprocessing_context"] = "fork"
        if spec.tuning.get("prefetch_factor") is not None:
            kwargs["prefetch_factor"] = int(spec.tuning["prefetch_factor"])
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=spec.batch_size,
        shuffle=shuffle,
        generator=torch.Generator().manual_seed(spec.seed),
        num_workers=workers,
        persistent_workers=False,
        **kwargs,
    )


class PatchReader:
    """Patch ``i``: ``array[t, y0:y0+P, x0:x0+P]`` at ``origins[i]`` (a torch map-style Dataset)."""

    def __init__(self, spec: PatchSpec, store: Any, origins: Any) -> None:
        self.spec = spec
        self.store = store
        self.origins = origins
        self.array: Any = None
        self.pid = -1

    def __len__(self) -> int:
        return len(self.origins)

    def __getitem__(self, i: int) -> Any:
        if self.pid != os.getpid():  # first item in this process: open the array here
            import zarr

            self.array = zarr.open_array(store=self.store, path=self.spec.array, mode="r")
            self.pid = os.getpid()
        t, *lo = (int(v) for v in self.origins[i])
        box = tuple(slice(o, o + p) for o, p in zip(lo, self.spec.patch, strict=True))
        return self.array[(t, *box)]


def main() -> None:
    spec = PatchSpec.load(sys.argv[1])
    unsupported_without(["torch", "zarr"])
    import torch.utils.data  # noqa: F401  (imported before the clock)
    import zarr  # noqa: F401

    clock = Clock()
    store, counts = counting_store(spec)
    dataset = PatchReader(spec, store, origins_for(spec))
    # Grid positions are shuffled by the DataLoader; random ones are already in a random order.
    loader = make_loader(spec, dataset, shuffle=spec.sampling == "grid")
    result = cold_epoch(spec, clock, lambda: loader)
    gets = counts.summary()
    result.chunk_gets = result.chunk_decodes = gets["chunk_gets"]
    result.distinct_chunks = gets["distinct_chunks"]
    result.max_decodes_one_chunk = gets["max_decodes_one_chunk"]
    result.extra = {"num_workers": loader.num_workers, "other_gets": gets["other_gets"]}
    emit(result)


if __name__ == "__main__":
    main()
