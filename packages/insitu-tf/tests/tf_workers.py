"""What the TensorFlow tests run in a fresh process, and the dataset every process builds identically.

``python tf_workers.py resume STORE STATE OUT [STATE OUT ...]``: for each saved
state, rebuild the dataset, load the state into the view, re-create the
``tf.data.Dataset`` and write the remaining ``x`` batches to OUT.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from zarr.storage import LocalStore

import insitu
from insitu.testing.synthetic import make_linear_regression

N_SAMPLES = 512
CHUNK = 16
N_FEATURES = 3
BATCH = 8
BLOCK_CHUNKS = 3


def write_store(path: Path) -> None:
    """The linear-regression store the resume tests read (x rows are distinct floats)."""
    make_linear_regression(path, n_samples=N_SAMPLES, n_features=N_FEATURES, chunks=CHUNK, seed=9)


def open_dataset(store: Any, *, shuffle: bool = True) -> insitu.InSituDataset:
    """The same dataset in every process: one ``train`` split of every chunk."""
    geoms = insitu.open_geometries(store, variables=["x", "y"])
    manifest = insitu.split_by_chunk(geoms["x"], fractions=(1.0,), names=("train",))
    # Geometries named in a fixed order: the label list is part of the resume state, and the
    # order a store lists its arrays in can differ from one process to the next.
    return insitu.InSituDataset(
        store, manifest, geoms, batch_size=BATCH, block_chunks=BLOCK_CHUNKS, shuffle=shuffle, seed=4
    )


def resume(store_path: str, jobs: list[str]) -> None:
    from insitu_tf import as_tf_dataset, rank_view

    for state_path, out in zip(jobs[::2], jobs[1::2], strict=True):
        state = json.loads(Path(state_path).read_text())
        with open_dataset(LocalStore(store_path, read_only=True), shuffle=state["shuffle"]) as ds:
            ranks = {"rank": state["rank"], "world_size": state["world_size"]}
            rank_view(ds.train, **ranks).load_state_dict(state)
            rest = [element["x"].numpy() for element in as_tf_dataset(ds.train, **ranks)]
        np.save(out, np.stack(rest))


if __name__ == "__main__":
    command, store, *rest = sys.argv[1:]
    if command != "resume":
        raise SystemExit(f"unknown command {command!r}")
    resume(store, rest)
