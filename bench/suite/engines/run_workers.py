"""Runner for the typical user stack: a map-style zarr Dataset behind a torch DataLoader.

``__getitem__(i)`` reads sample ``i`` of every variable with one zarr read per
field (``array[i]``, and ``array[i + window]`` for windowed cases) and returns
numpy arrays; the DataLoader shuffles with a seeded generator, collates
``batch_size`` samples per batch and spreads the reads over ``num_workers``
processes. The arrays are opened lazily in each process that reads, so every
DataLoader worker has its own store and zarr event loop.

Tuning: ``num_workers`` (0: read in the main process), ``prefetch_factor``
(batches in flight per worker; torch's default where absent, only with
workers). Works with every case and store kind (local, latency, s3).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.utils.data
import zarr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Spec, begin, cold_epoch, emit, open_zarr_store


class ZarrSampleDataset(torch.utils.data.Dataset):
    """Sample ``i``: each variable at ``i`` (then each at ``i + window`` when the case has a window).

    The arrays are opened on first use in each process (the main one or a
    forked worker), as a user's Dataset must: store clients do not survive fork.
    """

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.arrays: list[Any] = []
        self.pid = -1

    def __len__(self) -> int:
        return self.spec.case.samples_per_epoch

    def _open(self) -> list[Any]:
        if self.pid != os.getpid():  # first read in this process (main or a forked worker)
            store = open_zarr_store(self.spec)
            self.arrays = [zarr.open_array(store=store, path=v, mode="r") for v in self.spec.case.variables]
            self.pid = os.getpid()
        return self.arrays

    def __getitem__(self, i: int) -> tuple[Any, ...]:
        arrays = self._open()
        fields = [a[i] for a in arrays]
        if self.spec.case.window:
            fields += [a[i + self.spec.case.window] for a in arrays]
        return tuple(fields)


def make_loader(spec: Spec, dataset: Any, **kwargs: Any) -> torch.utils.data.DataLoader:
    """A DataLoader over ``dataset`` with the spec's worker tuning (fork context, no persistent workers)."""
    workers = int(spec.tuning.get("num_workers", 0))
    if workers and spec.tuning.get("prefetch_factor") is not None:
        kwargs["prefetch_factor"] = int(spec.tuning["prefetch_factor"])
    return torch.utils.data.DataLoader(dataset, num_workers=workers, persistent_workers=False, **kwargs)


def main() -> None:
    spec = Spec.load(sys.argv[1])
    floor, clock = begin()
    dataset = ZarrSampleDataset(spec)
    generator = torch.Generator().manual_seed(spec.seed)
    loader = make_loader(spec, dataset, batch_size=spec.batch_size, shuffle=True, generator=generator)
    result = cold_epoch(spec, clock, floor, loader)
    result.extra = {"num_workers": loader.num_workers}
    emit(result)


if __name__ == "__main__":
    main()
