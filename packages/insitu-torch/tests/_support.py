"""Shared by the tests and the processes they start: the store, the dataset, the resume runner.

Run as a script, it is the "new process" of the resume tests:

    python _support.py STORE STATE_JSON OUT_NPZ [--no-shuffle] [--stateful-loader]

It rebuilds the dataset exactly as :func:`open_dataset` does, loads the state
saved by the test, iterates the rest of the epoch and saves what it got.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore

import insitu
from insitu.testing.synthetic import make_linear_regression

# 19 chunks of 16 samples, the last one half full: ranks get uneven sample counts.
N_SAMPLES = 296
CHUNK = 16
N_FEATURES = 4


class CountingStore(WrapperStore[Any]):
    """A store that records the key of every ``get``: the reads that really reached the store."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.keys: list[str] = []
        self._lock = threading.Lock()

    def _with_store(self, store: Store) -> CountingStore:
        return type(self)(store)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        with self._lock:
            self.keys.append(key)
        return await self._store.get(key, prototype, byte_range)

    def chunk_reads(self) -> list[str]:
        """Keys of chunk reads (``x/c/3/0``), metadata reads left out."""
        with self._lock:
            return [key for key in self.keys if "/c/" in key]


def write_store(path: Path) -> Path:
    """The linear-regression store every test here reads (``x`` features, ``y`` target)."""
    make_linear_regression(path, n_samples=N_SAMPLES, n_features=N_FEATURES, chunks=CHUNK, seed=0)
    return path


def open_dataset(store: str | Path | Store, *, shuffle: bool = True, **options: Any) -> insitu.InSituDataset:
    """One split, ``train``, over every chunk; small blocks so an epoch has several."""
    store = insitu.open_store(store)
    geoms = insitu.open_geometries(store, variables=["x", "y"])
    manifest = insitu.split_by_chunk(geoms["x"], (1.0,), names=("train",))
    settings: dict[str, Any] = {"batch_size": 16, "block_chunks": 4, "seed": 7, "shuffle": shuffle}
    settings.update(options)
    # Labels passed explicitly: their order is part of the resume state and must not depend on
    # the order the store lists its arrays in.
    return insitu.InSituDataset(store, manifest, [geoms["x"], geoms["y"]], **settings)


def record(batches: Iterable[Any]) -> dict[str, np.ndarray]:
    """What a run yielded, batch by batch, as arrays an ``.npz`` can hold."""
    out: dict[str, np.ndarray] = {}
    for n, batch in enumerate(batches):
        out[f"indices{n}"] = batch.sample_indices.numpy().copy()
        out[f"x{n}"] = batch["x"].numpy().copy()
        out[f"y{n}"] = batch["y"].numpy().copy()
    return out


def as_list(run: dict[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``record`` output back to ``[(indices, x, y), ...]`` in batch order."""
    n = sum(1 for key in run if key.startswith("indices"))
    return [(run[f"indices{i}"], run[f"x{i}"], run[f"y{i}"]) for i in range(n)]


def _resume(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("store")
    parser.add_argument("state")
    parser.add_argument("out")
    parser.add_argument("--no-shuffle", action="store_true")
    parser.add_argument("--stateful-loader", action="store_true")
    args = parser.parse_args(argv)

    from insitu_torch import as_torch

    state = json.loads(Path(args.state).read_text())
    with open_dataset(args.store, shuffle=not args.no_shuffle) as ds:
        dataset = as_torch(ds.train)
        if args.stateful_loader:
            from torchdata.stateful_dataloader import StatefulDataLoader

            loader: Any = StatefulDataLoader(dataset, batch_size=None, num_workers=0)
            loader.load_state_dict(state)
        else:
            from torch.utils.data import DataLoader

            dataset.load_state_dict(state)
            loader = DataLoader(dataset, batch_size=None, num_workers=0)
        np.savez(args.out, **record(loader))


if __name__ == "__main__":
    _resume()
