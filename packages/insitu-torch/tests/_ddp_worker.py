"""One rank of the 2-process ``torch.distributed`` test (started by ``torch.multiprocessing.spawn``).

Each rank joins a gloo process group on loopback, builds the same dataset
over a store that records every chunk read, lets ``as_torch`` pick its rank
from ``torch.distributed``, trains a DistributedDataParallel linear model for
two epochs and writes what it saw to ``OUT/rank{r}-{uneven}.json``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from _support import N_FEATURES, CountingStore, open_dataset
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from zarr.storage import LocalStore

from insitu_torch import as_torch

EPOCHS = 2


def chunk_id(key: str) -> int:
    """The chunk index along the sample axis of a chunk key such as ``x/c/3/0``."""
    return int(key.split("/c/", 1)[1].split("/", 1)[0])


def run_rank(rank: int, world_size: int, port: int, store_path: str, out_dir: str) -> None:
    """Entry point of one spawned process (``rank`` is passed first by ``spawn``)."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)  # two ranks share the machine's cores with the decode threads
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        for uneven in ("drop", "pad"):
            result = _train(store_path, uneven)
            Path(out_dir, f"rank{rank}-{uneven}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def _train(store_path: str, uneven: str) -> dict[str, Any]:
    store = CountingStore(LocalStore(store_path, read_only=True))
    with open_dataset(store, uneven=uneven) as ds:
        dataset = as_torch(ds.train)  # rank and world size come from torch.distributed
        loader = DataLoader(dataset, batch_size=None, num_workers=0)
        torch.manual_seed(0)  # the same initial weights on both ranks
        model = DistributedDataParallel(torch.nn.Linear(N_FEATURES, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        epochs = []
        for epoch in range(EPOCHS):
            dataset.set_epoch(epoch)
            reads_before = len(store.chunk_reads())
            samples: list[int] = []
            padding: list[int] = []
            error_sum, error_count = 0.0, 0
            batches = 0
            for batch in loader:
                # Per-sample squared error; padding rows (valid False) weigh nothing.
                error = (model(batch["x"]) - batch["y"]).pow(2).mean(dim=1)
                valid = torch.ones_like(error, dtype=torch.bool) if batch.valid is None else batch.valid
                loss = (error * valid).sum() / valid.sum().clamp(min=1)
                optimizer.zero_grad()
                loss.backward()  # DDP all-reduces the gradient across both ranks here
                optimizer.step()
                error_sum += float((error.detach() * valid).sum())
                error_count += int(valid.sum())
                samples += batch.sample_indices[valid].tolist()
                padding += batch.sample_indices[~valid].tolist()
                batches += 1
            plan = dataset.view.plan()
            epochs.append(
                {
                    "samples": samples,
                    "padding": padding,
                    "batches": batches,
                    "len": len(dataset),
                    "chunk_keys": sorted(set(store.chunk_reads()[reads_before:])),
                    "planned_chunks": sorted({c for block in plan.order.block_chunks for c in block}),
                    "mean_loss": error_sum / error_count,  # over the real samples of the epoch
                }
            )
        return {
            "rank": dataset.view.rank,
            "world_size": dataset.view.world_size,
            "epochs": epochs,
            "weights": [p.detach().flatten().tolist() for p in model.parameters()],
        }
