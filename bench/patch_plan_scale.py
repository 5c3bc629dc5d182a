"""Patch planning at scale, without data: a square raster in square chunks with square patches
(by default the 65,536 x 65,536 uint8 mosaic in 512 x 512 chunks with 32 x 32 patches: 4.2
million positions), planned as regions of chunks.

Reports, in a fresh interpreter per case: ``plan_s`` (positions, regions, boxes), ``order_s``
(one rank's epoch order), ``first_batch_s`` (the patches of batch 0: one block generated),
``needs_s`` (every block's chunk needs, for the read-amplification model) and ``peak_MB``: peak
RSS (VmHWM) minus the interpreter's RSS after imports. The target the project set: seconds and
well under 1 GB for the default case.

    python bench/patch_plan_scale.py
    python bench/patch_plan_scale.py --side 65536 131072 --patch 32 16 --stride 24 --world 1 64
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CASE = r"""
import json, sys, time
import numpy as np
from insitu.arrays.geometry import ArrayGeometry
from insitu.plan.patches import PatchSpec, block_chunk_needs, epoch_patches, plan_patches, read_amplification

def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    return 0

side, chunk, patch, stride, world, block = (int(v) for v in sys.argv[1:7])
floor = rss("VmRSS:")
geom = ArrayGeometry(name="mosaic", path="mosaic", shape=(side, side), dtype=np.dtype("u1"),
                     chunk_shape=(chunk, chunk), dimension_names=("y", "x"))
spec = PatchSpec({"y": patch, "x": patch}, stride={"y": stride, "x": stride})
t0 = time.perf_counter()
patches = plan_patches(geom, spec)
t1 = time.perf_counter()
order = epoch_patches(patches, spec, epoch=0, seed=0, block_chunks=block, rank=world - 1, world_size=world)
t2 = time.perf_counter()
order.batch(0, 256)
t3 = time.perf_counter()
needs = block_chunk_needs(order, (chunk, chunk))
t4 = time.perf_counter()
model = read_amplification(needs, block * 4)
print(json.dumps(dict(
    side=side, chunk=chunk, patch=patch, stride=stride, world=world, block_chunks=block,
    positions=patches.grid.n_positions, regions=patches.layout.n_regions, rank_patches=order.n_patches,
    plan_s=round(t1 - t0, 4), order_s=round(t2 - t1, 4), first_batch_s=round(t3 - t2, 4),
    needs_s=round(t4 - t3, 4), plan_bytes=patches.nbytes + order.nbytes,
    amplification_at_4_blocks=round(model.ratio, 4),
    peak_MB=round((rss("VmHWM:") - floor) / 2**20, 1),
)))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", type=int, nargs="+", default=[65_536])
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--patch", type=int, nargs="+", default=[32])
    parser.add_argument("--stride", type=int, default=None, help="default: the patch size (no overlap)")
    parser.add_argument("--world", type=int, nargs="+", default=[1])
    parser.add_argument("--block-chunks", type=int, default=16)
    args = parser.parse_args()
    for side in args.side:
        for patch in args.patch:
            for world in args.world:
                stride = args.stride or patch
                argv = [side, args.chunk, patch, stride, world, args.block_chunks]
                out = subprocess.run(
                    [sys.executable, "-c", CASE, *map(str, argv)], check=True, capture_output=True, text=True
                )
                print(json.dumps(json.loads(out.stdout)))


if __name__ == "__main__":
    main()
