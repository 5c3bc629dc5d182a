"""Small real datasets for adapter and plugin tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from zarr.storage import MemoryStore

from insitu.dataset import DatasetView, InSituDataset
from insitu.plan.splits import split_by_chunk


@contextmanager
def linear_regression_view(
    *, n_samples: int = 512, n_features: int = 4, chunks: int = 64, batch_size: int = 32, seed: int = 0
) -> Iterator[DatasetView]:
    """The train split (75%) of ``y = x @ w + b`` in a memory store, read through a real
    ``InSituDataset``; the dataset is closed on exit. A model trained on it should fit."""
    from insitu.arrays.discovery import open_geometries
    from insitu.testing.synthetic import make_linear_regression

    store = MemoryStore()
    make_linear_regression(store, n_samples=n_samples, n_features=n_features, chunks=chunks, seed=seed)
    geoms = open_geometries(store, variables=["x", "y"])
    manifest = split_by_chunk(geoms["x"], fractions=(0.75, 0.25), names=("train", "val"))
    with InSituDataset(store, manifest, [geoms["x"], geoms["y"]], batch_size=batch_size, seed=seed) as ds:
        yield ds.train
