"""Programs the JAX tests run in fresh processes, and the dataset they all build identically.

``python jax_workers.py distributed PROCESS_ID PORT STORE OUT``: one process of a
two-process ``jax.distributed`` run on CPU; writes what it read and built to OUT.
``python jax_workers.py resume STORE STATE OUT``: load a saved iterator state and
write the remaining batches to OUT.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from zarr.abc.store import ByteRequest
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import LocalStore, WrapperStore

import insitu
from insitu.testing.synthetic import make_linear_regression

N_SAMPLES = 512
CHUNK = 16  # samples per chunk: 32 chunks
N_FEATURES = 3
BATCH = 8
BLOCK_CHUNKS = 3


class CountingStore(WrapperStore[Any]):
    """Counts every ``get`` by key, so a test can tell which chunks a process read."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.gets: collections.Counter[str] = collections.Counter()

    def _with_store(self, store: Any) -> CountingStore:
        return CountingStore(store)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self.gets[key] += 1
        return await self._store.get(key, prototype, byte_range)

    def chunk_gets(self) -> dict[str, int]:
        """Gets per chunk key (``x/c/3/0``); metadata probes are left out."""
        return {k: n for k, n in sorted(self.gets.items()) if "/c/" in k}


def write_store(path: Path) -> None:
    """The linear-regression store every program here reads (x rows are distinct floats)."""
    make_linear_regression(path, n_samples=N_SAMPLES, n_features=N_FEATURES, chunks=CHUNK, seed=5)


def open_dataset(store: Any, *, shuffle: bool = True) -> insitu.InSituDataset:
    """The same dataset in every process: one ``train`` split of every chunk."""
    geoms = insitu.open_geometries(store, variables=["x", "y"])
    manifest = insitu.split_by_chunk(geoms["x"], fractions=(1.0,), names=("train",))
    # Geometries named in a fixed order: the label list is part of the resume state, and the
    # order a store lists its arrays in can differ from one process to the next.
    return insitu.InSituDataset(
        store, manifest, geoms, batch_size=BATCH, block_chunks=BLOCK_CHUNKS, shuffle=shuffle, seed=7
    )


def distributed(process_id: int, port: int, store_path: str, out: str) -> None:
    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

    from insitu_jax import jax_iterator

    # Cross-process computations on CPU need a collectives backend; the default is none.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=2,
        process_id=process_id,
        initialization_timeout=120,
    )
    store = CountingStore(LocalStore(store_path, read_only=True))
    with open_dataset(store) as ds:
        # A view sharded for another process is refused; one sharded for this process is used.
        try:
            jax_iterator(ds.train.shard(1 - process_id, 2))
            wrong_shard = ""
        except insitu.ConfigError as exc:
            wrong_shard = str(exc)
        own_shard = jax_iterator(ds.train.shard(process_id, 2)).view.rank
        ds.set_epoch(1)
        iterator = jax_iterator(ds.train)
        local, gathered, shapes, means = [], [], [], []
        mean = jax.jit(jnp.mean)
        for batch in iterator:
            x = batch["x"]
            shapes.append(list(x.shape))
            # This process's rows: the shard on its one device.
            local.append(np.asarray(x.addressable_data(0)))
            gathered.append(np.asarray(multihost_utils.process_allgather(x, tiled=True)))
            means.append(float(mean(x)))  # a computation over both processes' rows
        result = {
            "rank": iterator.view.rank,
            "world_size": iterator.view.world_size,
            "n_batches": len(iterator),
            "shapes": shapes,
            "means": means,
            "fully_addressable": bool(x.is_fully_addressable),
            "keys": list(store.chunk_gets()),
            "max_gets": max(store.chunk_gets().values()),
            "wrong_shard_error": wrong_shard,
            "own_shard_rank": own_shard,
            "plan_chunks": sorted(c for block in iterator.view.plan().order.block_chunks for c in block),
        }
    Path(out, f"process{process_id}.json").write_text(json.dumps(result))
    np.save(Path(out, f"local{process_id}.npy"), np.stack(local))
    np.save(Path(out, f"global{process_id}.npy"), np.stack(gathered))
    jax.distributed.shutdown()


def resume(store_path: str, state_path: str, out: str) -> None:
    from insitu_jax import jax_iterator

    state = json.loads(Path(state_path).read_text())
    with open_dataset(LocalStore(store_path, read_only=True), shuffle=state["shuffle"]) as ds:
        iterator = jax_iterator(ds.train)
        iterator.load_state_dict(state)
        rest = [np.asarray(batch["x"]) for batch in iterator]
    np.save(out, np.stack(rest) if rest else np.zeros((0, BATCH, N_FEATURES), np.float32))


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "distributed":
        distributed(int(args[0]), int(args[1]), args[2], args[3])
    elif command == "resume":
        resume(*args)
    else:
        raise SystemExit(f"unknown command {command!r}")
