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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.utils.data
import zarr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Clock, Result, Spec, batch_sum, emit, open_zarr_store, rss_now


class ZarrSampleDataset(torch.utils.data.Dataset):
    """Sample ``i``: each variable at ``i`` (then each at ``i + window`` when the case has a window)."""

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


def run_epoch(
    spec: Spec,
    clock: Clock,
    loader: Any,
    floor: int,
    fields: Callable[[Any], Sequence[Any]] = list,
) -> Result:
    """One cold epoch over ``loader``, timed and checksummed.

    ``fields(batch)`` gives the batch's per-field arrays, each with the sample
    axis first (the default takes a batch that already is that sequence).
    """
    samples = nbytes = 0
    checksum = elapsed = 0.0
    truncated = False
    for batch in loader:
        if samples == 0:
            clock.first()
        arrays = fields(batch)
        samples += len(arrays[0])
        nbytes += sum(a.nbytes for a in arrays)
        checksum += batch_sum(*arrays)
        elapsed = clock.since_start()  # at the last batch: worker shutdown is not part of the epoch
        if elapsed > spec.max_seconds:
            truncated = True
            break
    return Result(samples, nbytes, elapsed, clock.ttfb, floor, truncated=truncated, checksum=checksum)


def main() -> None:
    spec = Spec.load(sys.argv[1])
    floor = rss_now()
    clock = Clock()
    clock.start()
    dataset = ZarrSampleDataset(spec)
    generator = torch.Generator().manual_seed(spec.seed)
    loader = make_loader(spec, dataset, batch_size=spec.batch_size, shuffle=True, generator=generator)
    result = run_epoch(spec, clock, loader, floor)
    result.extra = {"num_workers": loader.num_workers}
    emit(result)


if __name__ == "__main__":
    main()
