"""Runner for the xarray user stack: xbatcher over ``xarray.open_zarr`` behind a torch DataLoader.

The group is opened with ``xarray.open_zarr`` (no dask: ``chunks=None``; the
store reaches xarray as a zarr Store object for the latency and s3 stores, as
a path for local disk). A ``BatchGenerator`` with ``input_dims`` of one time
step and the full field makes each generator item one sample; xbatcher's own
torch adapter, ``xbatcher.loaders.torch.MapDataset``, serves item ``i`` to a
DataLoader that shuffles with a seeded generator, collates ``batch_size``
samples per batch and spreads the reads over ``num_workers`` forked processes.

A sample holds every variable: the MapDataset transform stacks the variables
of an item into one ``(variables, lat, lon)`` tensor (xbatcher's default
transform only handles a single variable). Windowed cases use xbatcher's
X/y pairing: an X generator over ``time[0:n]`` and a y generator over
``time[window:window + n]``, so MapDataset item ``t`` is ``(X[t], y[t + window])``.

The DataLoader forks its workers (torch's default), except on the s3 and http stores:
the dataset is opened, and so obstore's tokio runtime started, in the main
process, and that runtime does not survive a fork (requests from a forked
worker never complete). There the workers start from a ``forkserver`` and
receive the dataset pickled (each worker unpickles its own zarr store and
obstore client), which costs a fresh interpreter's start-up in the
time to first batch.

Tuning: ``num_workers``, ``prefetch_factor`` (torch's default where absent,
only with workers). Works with every case and store kind.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import xarray as xr
import xbatcher
from xbatcher.loaders.torch import MapDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Spec, begin, cold_epoch, emit, open_zarr_store
from run_workers import make_loader  # the shared DataLoader set-up


class StackVariables:
    """MapDataset transform: one generator item (a Dataset of one time step) -> ``(variables, *field)``."""

    def __init__(self, variables: list[str]) -> None:
        self.variables = variables

    def __call__(self, item: xr.Dataset) -> torch.Tensor:
        return torch.from_numpy(np.stack([item[v].values[0] for v in self.variables]))


def main() -> None:
    spec = Spec.load(sys.argv[1])
    case = spec.case
    floor, clock = begin()
    store = case.root if spec.store.kind == "local" else open_zarr_store(spec)
    ds = xr.open_zarr(store, consolidated=False, chunks=None)[case.variables]
    time_dim, *field_dims = ds[case.variables[0]].dims
    input_dims = {time_dim: 1, **{d: ds.sizes[d] for d in field_dims}}
    n = case.samples_per_epoch
    x_gen = xbatcher.BatchGenerator(ds.isel({time_dim: slice(0, n)}), input_dims=input_dims)
    y_gen = None
    if case.window:
        window = slice(case.window, case.window + n)
        y_gen = xbatcher.BatchGenerator(ds.isel({time_dim: window}), input_dims=input_dims)
    transform = StackVariables(case.variables)
    dataset = MapDataset(x_gen, y_gen, transform=transform, target_transform=transform)
    generator = torch.Generator().manual_seed(spec.seed)
    context: dict[str, str] = {}
    if spec.store.kind in ("s3", "http") and spec.tuning.get("num_workers", 0):
        context["multiprocessing_context"] = "forkserver"
    loader = make_loader(
        spec, dataset, batch_size=spec.batch_size, shuffle=True, generator=generator, **context
    )
    n_vars = len(case.variables)

    def fields(batch: Any) -> list[torch.Tensor]:
        stacked = batch if case.window else [batch]  # (X, y) pairs for windows, else X alone
        return [part[:, k] for part in stacked for k in range(n_vars)]

    result = cold_epoch(spec, clock, floor, loader, fields)
    result.extra = {"num_workers": loader.num_workers, **context}
    emit(result)


if __name__ == "__main__":
    main()
