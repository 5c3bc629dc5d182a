"""Train a small U-Net to segment cells, plane by plane, in place on an OME-NGFF volume.

The sample axis is ``z``: each sample is one plane of the image, ``(C, Y, X)``,
delivered with the same plane of its label image, ``(Y, X)``. The two arrays
are chunked differently along z (the image one plane per chunk, the labels
30 planes per chunk): insitu reads each chunk once and assembles both into
the same batches. Training draws random patches (``RandomCrop``, one window
per plane, shared by image and mask); held-out planes (the last quarter of
the stack) are segmented whole and scored by IoU against Otsu's threshold.

    python -m examples.microscopy                  # synthetic OME-Zarr 0.5 volume, ~1 min
    python -m examples.microscopy --smoke          # tiny, a few seconds
    python -m examples.microscopy --store idr      # IDR's idr0062A/6001240 over HTTPS (network)
    python -m examples.microscopy --store /data/image.ome.zarr --label nuclei --channels 1

A real store is any OME-NGFF image (0.4 or 0.5) with a ``labels/`` group:
the label image (``--label``, default the first listed) gives the
foreground (label > 0); ``--channels`` picks the image channels the model
sees (Otsu thresholds the first of them); ``--level`` the pyramid level.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

import insitu
from examples.common import Result, finish, parser
from examples.microscopy.data import OmeImage, open_ome, write_synthetic
from examples.microscopy.model import IoU, UNet, otsu_segment
from insitu_transforms import RandomCrop

#: IDR's OME-NGFF sample image (idr0062A: nuclei in 3D tissue, with a label image), served over HTTPS.
IDR_URL = "https://uk1s3.embassy.ebi.ac.uk/idr/zarr/v0.4/idr0062A/6001240.zarr"


@dataclass(frozen=True)
class Sizes:
    """How much to do in each mode: the synthetic volume (Z, Y, X), patch side, epochs, batch size."""

    patch: int
    epochs: int
    batch_size: int
    shape: tuple[int, int, int] = (0, 0, 0)


SMOKE = Sizes(shape=(48, 64, 64), patch=48, epochs=24, batch_size=6)
DEFAULT = Sizes(shape=(120, 128, 128), patch=64, epochs=30, batch_size=8)
REAL = Sizes(patch=96, epochs=12, batch_size=8)
REAL_SMOKE = Sizes(patch=64, epochs=16, batch_size=6)


class NormalizePlanes:
    """Chunk transform: each plane and channel scaled to its own 1st-99.8th percentile range, float32.

    Runs once per decoded chunk (the pool caches normalised planes) and does
    the same to training and held-out planes, whatever the microscope's gain."""

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        flat = block.reshape(*block.shape[:-2], -1).astype(np.float32)
        lo, hi = np.percentile(flat, [1.0, 99.8], axis=-1)
        scaled = (flat - lo[..., None]) / np.maximum(hi - lo, 1e-6)[..., None]
        return scaled.reshape(block.shape).astype(np.float32)

    def out_spec(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[tuple[int, ...], str]:
        return shape, "float32"

    def fingerprint(self) -> str:
        return "NormalizePlanes(1,99.8)/v1"


class Foreground:
    """Chunk transform: a label image (one id per cell) to a foreground mask, uint8 0/1."""

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        return (block > 0).astype(np.uint8)

    def out_spec(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[tuple[int, ...], str]:
        return shape, "uint8"

    def fingerprint(self) -> str:
        return "Foreground/v1"


class OnlyIn:
    """Batch transform: apply ``transform`` to batches of one split, pass the others through.

    Batch transforms belong to the dataset, so every view would get them; the
    held-out planes are scored whole, uncropped."""

    def __init__(self, split: str, transform: Any) -> None:
        self.split = split
        self.transform = transform

    def __call__(self, batch: insitu.Batch) -> insitu.Batch:
        return self.transform(batch) if batch.split == self.split else batch


def build_dataset(
    store: Any, ome: OmeImage, *, patch: int, batch_size: int, seed: int, test_fraction: float = 0.25
) -> insitu.InSituDataset:
    """Image and mask co-batched along z: train on the first planes (random patches), test on the rest."""
    manifest = insitu.split_by_chunk(
        ome.image, (1 - test_fraction, test_fraction), names=("train", "test"), contiguous=True
    )
    crop = RandomCrop({"y": patch, "x": patch}, dims=ome.dims, seed=seed)
    return insitu.InSituDataset(
        store,
        manifest,
        [ome.image, ome.mask],
        batch_size=batch_size,
        seed=seed,
        chunk_transforms={ome.image.name: [NormalizePlanes()], ome.mask.name: [Foreground()]},
        batch_transforms=[OnlyIn("train", crop)],
    )


def train(ds: insitu.InSituDataset, channels: int, *, epochs: int, seed: int) -> UNet:
    torch.manual_seed(seed)
    model = UNet(channels=channels)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    loader = insitu.as_torch(ds.train)
    steps = epochs * len(loader)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=3e-3, total_steps=steps)
    model.train()
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for batch in loader:
            x, target = batch["image"], batch["mask"].float()
            logits = model(x)
            prob = torch.sigmoid(logits)
            dice = 1 - (2 * (prob * target).sum() + 1) / (prob.sum() + target.sum() + 1)
            loss = F.binary_cross_entropy_with_logits(logits, target) + dice
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            schedule.step()
    return model


def evaluate(ds: insitu.InSituDataset, model: UNet) -> tuple[float, float, int]:
    """IoU of the model and of Otsu's threshold over every held-out plane, and the plane count."""
    ours, otsu = IoU(), IoU()
    planes = 0
    model.eval()
    with torch.no_grad():
        for batch in insitu.as_torch(ds.test):
            x, truth = batch["image"], batch["mask"].numpy()
            ours.add((model(x) > 0).numpy(), truth)
            otsu.add(otsu_segment(x[:, 0].numpy()), truth)
            planes += len(truth)
    return ours.value, otsu.value, planes


def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__ or "")
    p.add_argument("--epochs", type=int, default=None, help="training epochs (default: by mode)")
    p.add_argument("--patch", type=int, default=None, help="side of the random training patches, pixels")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--label", default=None, help="label image under labels/ (default: the first listed)")
    p.add_argument("--channels", default="0", help="image channels the model sees, e.g. 0 or 0,1")
    p.add_argument("--level", type=int, default=0, help="pyramid level (0: full resolution)")
    p.add_argument("--test-fraction", type=float, default=0.25, help="last planes held out for the test")
    args = p.parse_args(argv)
    started = time.perf_counter()
    # Small convolutions gain little from threads, and lose much on a busy machine: half the cores.
    torch.set_num_threads(max(1, min(4, (os.cpu_count() or 2) // 2)))
    real = args.store is not None
    sizes = (REAL_SMOKE if args.smoke else REAL) if real else (SMOKE if args.smoke else DEFAULT)
    with tempfile.TemporaryDirectory(prefix="insitu-microscopy-") as tmp:
        if real:
            url = IDR_URL if args.store == "idr" else args.store
        else:
            workdir = Path(args.workdir) if args.workdir else Path(tmp)
            url = str(workdir / "cells.ome.zarr")
            write_synthetic(url, sizes.shape, seed=args.seed)
        store = insitu.open_store(url)
        channels = [int(c) for c in args.channels.split(",")]
        ome = open_ome(store, label=args.label, level=args.level, channels=channels)
        patch = min(args.patch or sizes.patch, *ome.image.sample_shape[-2:])
        ds = build_dataset(
            store,
            ome,
            patch=patch,
            batch_size=args.batch_size or sizes.batch_size,
            seed=args.seed,
            test_fraction=args.test_fraction,
        )
        with ds:
            print(
                f"microscopy: {url}: image {ome.image.path} {ome.image.shape} chunks {ome.image.chunk_shape}, "
                f"labels {ome.mask.path} chunks {ome.mask.chunk_shape}; sample axis z "
                f"({ome.image.n_samples} planes, {len(ds.manifest.samples('test'))} held out), "
                f"{patch}x{patch} patches"
            )
            model = train(ds, len(channels), epochs=args.epochs or sizes.epochs, seed=args.seed)
            ours, otsu, planes = evaluate(ds, model)
            stats = ds.stats
            print(
                f"microscopy: {planes} held-out planes; {stats['reads']} reads, "
                f"{stats['chunks_decoded']} chunks decoded for {stats['samples']} samples delivered"
            )
    result = Result(
        example="microscopy",
        metric="held-out IoU",
        model=ours,
        baseline=otsu,
        baseline_name="Otsu threshold per plane",
        higher_is_better=True,
        seconds=time.perf_counter() - started,
    )
    return finish(result, args)
