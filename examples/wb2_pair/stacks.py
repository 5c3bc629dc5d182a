"""The two loaders, over the same store, each yielding ``(x, y)`` batches of the same samples.

``x`` is ``(batch, 2, longitude, latitude)`` float32: 2 m temperature and
500 hPa geopotential at time ``t``; ``y`` is the same at ``t + lead``. The
samples are the time steps in the plan's date range (train or test), the
same for both stacks; each stack shuffles them in its own way.

- :class:`InsituStack`: ``insitu.open_geometries`` picks the two arrays by
  name and selects level 500 in the read plan, ``shift("6h")`` reads the
  target from the same arrays, ``split_by_coord`` makes the date split, and
  ``insitu.as_torch`` serves whole batches to ``DataLoader(batch_size=None,
  num_workers=0)``.
- :class:`XbatcherStack`: ``xr.open_zarr`` (dask-backed), ``.sel(level=500)``,
  one ``xbatcher.BatchGenerator`` for the inputs and one for the targets
  (the same time steps, ``lead`` later), each item one time step; xbatcher's
  ``MapDataset`` pairs them, and ``DataLoader(batch_size=..., shuffle=True,
  num_workers=2)`` collates the samples into batches in worker processes.
"""

from __future__ import annotations

import importlib
import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from examples.wb2_pair.data import (
    LEVEL,
    VARIABLES,
    anchor_range,
    is_url,
    lead_steps,
    model_fields,
    open_insitu_store,
    open_xarray,
)
from examples.wb2_pair.spec import Spec

Batches = Iterator[tuple[torch.Tensor, torch.Tensor]]


class InsituStack:
    name = "insitu"
    how = "insitu.as_torch → DataLoader(batch_size=None, num_workers=0)"

    def __init__(self, spec: Spec) -> None:
        import insitu

        store = open_insitu_store(spec.store)
        geoms = insitu.open_geometries(store, VARIABLES, sel={"level": LEVEL})
        inputs = [geoms[name] for name in VARIABLES]
        targets = [g.shift(f"{spec.lead_hours}h") for g in inputs]
        self.inputs = [g.label for g in inputs]
        self.targets = [g.label for g in targets]
        manifest = insitu.split_by_coord(inputs[0], {"train": spec.plan.train, "test": spec.plan.test})
        self.dataset = insitu.InSituDataset(
            store,
            manifest,
            [*inputs, *targets],
            batch_size=spec.plan.batch_size,
            seed=spec.seed,
            shuffle=spec.shuffle,
        )
        self.train = insitu.as_torch(self.dataset.train)
        self.test = insitu.as_torch(self.dataset.test)
        self.train_loader = DataLoader(self.train, batch_size=None, num_workers=0)
        self.test_loader = DataLoader(self.test, batch_size=None, num_workers=0)

    def _xy(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.stack([batch[label] for label in self.inputs], dim=1)
        y = torch.stack([batch[label] for label in self.targets], dim=1)
        return x, y

    def train_batches(self, epoch: int) -> Batches:
        self.train.set_epoch(epoch)
        return (self._xy(batch) for batch in self.train_loader)

    def test_batches(self) -> Batches:
        return (self._xy(batch) for batch in self.test_loader)

    def close(self) -> None:
        self.dataset.close()


class StackChannels:
    """MapDataset transform: one generator item (a Dataset of one time step) → ``(channels, lon, lat)``."""

    def __call__(self, item: Any) -> torch.Tensor:
        return torch.from_numpy(np.stack([item[name].values[0] for name in VARIABLES]))


def xbatcher_pairs(ds: Any, dates: tuple[str, str], lead: int) -> Any:
    """xbatcher's ``MapDataset``: item ``i`` is (fields at anchor ``i``, fields ``lead`` steps later)."""
    xbatcher = importlib.import_module("xbatcher")  # untyped; imported by name to keep mypy quiet
    map_dataset = importlib.import_module("xbatcher.loaders.torch").MapDataset
    anchors = anchor_range(ds, dates, lead)
    field = {"longitude": ds.sizes["longitude"], "latitude": ds.sizes["latitude"]}

    def generator(start: int) -> Any:
        part = ds.isel(time=slice(start, start + len(anchors)))
        return xbatcher.BatchGenerator(part, input_dims=field, batch_dims={"time": 1})

    transform = StackChannels()
    return map_dataset(
        generator(anchors.start),
        generator(anchors.start + lead),
        transform=transform,
        target_transform=transform,
    )


def fresh_dask_pool(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: dask's threaded scheduler gets a thread pool made in this worker.

    A forked worker inherits the parent's dask pool without its threads: if the
    parent ever computed with dask (normalisation statistics, a quick look at
    the data), the worker's first compute waits forever on that dead pool.
    """
    import dask

    dask.config.set(pool=ThreadPoolExecutor(4))


# Modules a forkserver imports once, so that each worker it forks need not.
FORKSERVER_PRELOAD = [
    "torch",
    "xarray",
    "dask",
    "zarr",
    "obstore",
    "xbatcher.loaders.torch",
    "examples.wb2_pair.stacks",
]


class XbatcherStack:
    name = "xbatcher"

    def __init__(self, spec: Spec) -> None:
        ds = model_fields(open_xarray(spec.store))
        lead = lead_steps(ds, spec.lead_hours)
        train, test = xbatcher_pairs(ds, spec.plan.train, lead), xbatcher_pairs(ds, spec.plan.test, lead)
        options: dict[str, Any] = {"num_workers": spec.num_workers}
        if spec.num_workers:
            options["worker_init_fn"] = fresh_dask_pool
        if spec.num_workers and is_url(spec.store):
            # A store reached by URL holds a client (obstore's, or gcsfs's) that does not survive a
            # fork: the workers start from a forkserver and each unpickles the dataset.
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(FORKSERVER_PRELOAD)
            options["multiprocessing_context"] = context
        self.how = f"xbatcher.BatchGenerator → MapDataset → DataLoader(batch_size={spec.plan.batch_size}, num_workers={spec.num_workers})"
        generator = torch.Generator().manual_seed(spec.seed)
        self.train_loader = DataLoader(
            train, batch_size=spec.plan.batch_size, shuffle=spec.shuffle, generator=generator, **options
        )
        self.test_loader = DataLoader(test, batch_size=spec.plan.batch_size, shuffle=False, **options)

    def train_batches(self, epoch: int) -> Batches:
        return iter(self.train_loader)  # the loader's generator draws a new order each epoch

    def test_batches(self) -> Batches:
        return iter(self.test_loader)

    def close(self) -> None:
        pass


STACKS: dict[str, type[InsituStack] | type[XbatcherStack]] = {
    "insitu": InsituStack,
    "xbatcher": XbatcherStack,
}
