"""A DDP run killed mid-epoch and restarted on fewer processes, finishing the epoch exactly once.

Run it with ``torchrun`` (gloo on CPU; one data directory for both runs)::

    torchrun --nproc-per-node=4 examples/elastic_ddp.py --work /tmp/elastic --die-after 5
    torchrun --nproc-per-node=3 examples/elastic_ddp.py --work /tmp/elastic

The first run trains on 4 processes and, after step 5, rank 0 kills itself
(SIGKILL, as a lost node would) right after saving the checkpoint, so torchrun
tears the job down. The second run, on 3 processes, loads the checkpoint: the
insitu state saved by rank 0 at world size 4 (ranks move in lockstep under
DDP, so one rank's state says what every rank handed out), and the three new
ranks share the rest of the epoch, in whole chunks, with equal batch counts.
Every rank appends the samples it trained on to ``WORK/samples-*.jsonl``;
``--check`` then shows that the epoch's samples were each seen once.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

import insitu
from insitu.testing.synthetic import make_linear_regression
from insitu_torch import as_torch

N_SAMPLES, CHUNK, FEATURES, BATCH = 400, 8, 4, 4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, required=True, help="data, checkpoint and sample logs")
    ap.add_argument("--die-after", type=int, default=0, help="rank 0 kills itself after this step")
    ap.add_argument("--check", action="store_true", help="report the samples seen (no training)")
    args = ap.parse_args()
    store_path = args.work / "data.zarr"
    if args.check:
        print(json.dumps(check(args.work)))
        return
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0 and not store_path.exists():
        make_linear_regression(store_path, n_samples=N_SAMPLES, n_features=FEATURES, chunks=CHUNK, seed=0)
    dist.barrier()
    torch.set_num_threads(1)
    store = insitu.open_store(store_path)
    manifest = insitu.split_by_chunk(insitu.open_geometries(store)["x"], (1.0,))
    checkpoint_path = args.work / "checkpoint.pt"
    with insitu.InSituDataset(store, manifest, batch_size=BATCH, block_chunks=4, seed=3) as ds:
        dataset = as_torch(ds.train)  # rank and world size come from torch.distributed
        torch.manual_seed(0)
        model = DistributedDataParallel(torch.nn.Linear(FEATURES, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        step = 0
        if checkpoint_path.exists():
            checkpoint = torch.load(checkpoint_path, weights_only=False)
            model.module.load_state_dict(checkpoint["model"])
            optimizer.load_state_dict(checkpoint["optimizer"])
            dataset.load_state_dict(checkpoint["data"])  # saved at another world size: re-sharded
            step = checkpoint["step"]
        else:
            dataset.set_epoch(0)
        log = open(args.work / f"samples-w{world}-r{rank}.jsonl", "a")  # noqa: SIM115
        for batch in DataLoader(dataset, batch_size=None, num_workers=0):
            valid = torch.ones(len(batch["x"]), dtype=torch.bool) if batch.valid is None else batch.valid
            error = (model(batch["x"]) - batch["y"]).pow(2).mean(dim=1)
            loss = (error * valid).sum() / valid.sum().clamp(min=1)
            optimizer.zero_grad()
            loss.backward()  # DDP all-reduces gradients: the ranks move in lockstep
            optimizer.step()
            step += 1
            log.write(json.dumps({"step": step, "samples": batch.sample_indices[valid].tolist()}) + "\n")
            log.flush()
            dist.barrier()  # every rank has logged this step before it is checkpointed
            if rank == 0:
                state = {
                    "step": step,
                    "model": model.module.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "data": dataset.state_dict(),  # rank 0's: ranks moved in lockstep
                }
                torch.save(state, str(checkpoint_path) + ".tmp")
                os.replace(str(checkpoint_path) + ".tmp", checkpoint_path)
                if step == args.die_after:
                    os.kill(os.getpid(), signal.SIGKILL)  # a lost node: no clean shutdown
        log.close()
        print(f"rank {rank} of {world}: epoch finished at step {step}", flush=True)
    dist.destroy_process_group()


def check(work: Path) -> dict[str, object]:
    """Samples each run delivered, and whether the epoch saw any sample twice or missed one."""
    seen: list[int] = []
    batches: dict[str, int] = {}
    for path in sorted(work.glob("samples-*.jsonl")):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        batches[path.stem] = len(lines)
        seen += [i for line in lines for i in line["samples"]]
    return {
        "batches_per_rank": batches,
        "samples": len(seen),
        "distinct": len(set(seen)),
        "missing": sorted(set(range(N_SAMPLES)) - set(seen)),
    }


if __name__ == "__main__":
    main()
