"""Train a small forecast model in place on an ERA5-like Zarr store.

The model predicts how 2 m temperature changes over the next ``--lead`` hours
at every grid point, from the current temperature, wind and local time of
day. insitu reads the inputs at ``t`` and the target at ``t + lead`` from the
same store (``geoms["t2m"].shift(lead)``), splits by chunk, shuffles and
batches; a batch transform turns each batch into per-pixel features.

    python examples/train_era5.py                      # numpy, or torch when installed
    python examples/train_era5.py --framework torch --epochs 6
    python examples/train_era5.py --path era5.zarr --n-time 8760 --lat 181 --lon 360

The store is built with ``insitu.testing.synthetic.make_era5_like`` (in a temporary
folder unless ``--path`` names one; an existing store there is reused).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import zarr

import insitu
from insitu.testing.synthetic import make_era5_like

INPUTS = ("t2m", "u10", "v10")
FEATURES = (
    "t2m",
    "dT/dx",
    "dT/dy",
    "laplacian",
    "u10",
    "v10",
    "u*dT/dx",
    "v*dT/dy",
    "diurnal cos",
    "diurnal sin",
)


class PixelFeatures:
    """Batch transform: per-pixel predictors of the temperature change ``lead`` hours ahead.

    Output batch: ``features`` (B, lat, lon, F) and ``target`` (B, lat, lon),
    the change ``t2m(t + lead) - t2m(t)`` in kelvin.
    """

    def __init__(self, lon_deg: np.ndarray, lead: int) -> None:
        self.lon_hours = lon_deg.astype(np.float64) / 15.0  # local solar time offset
        self.lead = lead
        self.target_label = f"t2m+{lead}"

    def __call__(self, batch: insitu.Batch) -> insitu.Batch:
        t = batch["t2m"].astype(np.float32)
        u, v = batch["u10"], batch["v10"]
        east, west = np.roll(t, -1, axis=2), np.roll(t, 1, axis=2)  # longitude wraps around
        padded = np.pad(t, ((0, 0), (1, 1), (0, 0)), mode="edge")  # latitude stops at the poles
        south, north = padded[:, 2:], padded[:, :-2]
        dtdx, dtdy = (east - west) / 2, (north - south) / 2
        laplacian = east + west + north + south - 4 * t
        # Where the diurnal cycle takes each column between now and the target time.
        local = batch.sample_indices[:, None] + self.lon_hours[None, :]
        now, later = 2 * np.pi * (local - 15) / 24, 2 * np.pi * (local + self.lead - 15) / 24
        shape = t.shape
        diurnal_cos = np.broadcast_to((np.cos(later) - np.cos(now))[:, None, :], shape)
        diurnal_sin = np.broadcast_to((np.sin(later) - np.sin(now))[:, None, :], shape)
        features = np.stack(
            [t, dtdx, dtdy, laplacian, u, v, u * dtdx, v * dtdy, diurnal_cos, diurnal_sin],
            axis=-1,
            dtype=np.float32,
        )
        return batch.replace({"features": features, "target": batch[self.target_label] - t})


def feature_scaling(batches: Iterable[insitu.Batch], n_batches: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std of each feature over the first ``n_batches`` batches."""
    total = np.zeros(len(FEATURES))
    squares = np.zeros(len(FEATURES))
    count = 0
    for i, batch in enumerate(batches):
        if i == n_batches:
            break
        rows = batch["features"].reshape(-1, len(FEATURES)).astype(np.float64)
        total += rows.sum(axis=0)
        squares += np.square(rows).sum(axis=0)
        count += len(rows)
    mean = total / count
    std = np.sqrt(np.maximum(squares / count - mean**2, 1e-12))
    return mean.astype(np.float32), std.astype(np.float32)


def timed(batches: Iterable[Any]) -> Iterator[tuple[Any, float]]:
    """Yield ``(batch, seconds waited for it)``."""
    iterator = iter(batches)
    while True:
        start = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            return
        yield batch, time.perf_counter() - start


class NumpyLinear:
    """Linear model on normalised features, trained by SGD with momentum."""

    def __init__(self, mean: np.ndarray, std: np.ndarray, lr: float) -> None:
        self.mean, self.std, self.lr = mean, std, lr
        self.w = np.zeros(len(FEATURES), dtype=np.float32)
        self.b = np.float32(0.0)
        self.vw = np.zeros_like(self.w)
        self.vb = np.float32(0.0)

    def _rows(self, batch: insitu.Batch) -> tuple[np.ndarray, np.ndarray]:
        x = (batch["features"].reshape(-1, len(FEATURES)) - self.mean) / self.std
        return x, batch["target"].reshape(-1)

    def train_step(self, batch: insitu.Batch) -> float:
        x, y = self._rows(batch)
        error = x @ self.w + self.b - y
        grad_w = 2 * (x.T @ error) / len(y)
        grad_b = 2 * error.mean()
        self.vw = 0.9 * self.vw - self.lr * grad_w
        self.vb = np.float32(0.9 * self.vb - self.lr * grad_b)
        self.w += self.vw
        self.b += self.vb
        return float(np.mean(error**2))

    def eval_step(self, batch: insitu.Batch) -> float:
        x, y = self._rows(batch)
        return float(np.mean((x @ self.w + self.b - y) ** 2))


class TorchMLP:
    """A per-pixel MLP (features -> 32 -> 1) in torch, fed through ``insitu.as_torch``."""

    def __init__(self, mean: np.ndarray, std: np.ndarray, lr: float) -> None:
        import torch

        torch.manual_seed(0)
        self.torch = torch
        self.mean, self.std = torch.from_numpy(mean), torch.from_numpy(std)
        self.model = torch.nn.Sequential(
            torch.nn.Linear(len(FEATURES), 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
        )
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr / 10)

    def wrap(self, view: insitu.DatasetView) -> Iterable[Any]:
        from torch.utils.data import DataLoader

        # insitu batches, shuffles and reads in parallel itself: no sampler, no workers.
        return DataLoader(insitu.as_torch(view), batch_size=None, num_workers=0)

    def _loss(self, batch: dict[str, Any]) -> Any:
        x = (batch["features"] - self.mean) / self.std
        prediction = self.model(x).squeeze(-1)
        return self.torch.nn.functional.mse_loss(prediction, batch["target"])

    def train_step(self, batch: dict[str, Any]) -> float:
        loss = self._loss(batch)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return float(loss.item())

    def eval_step(self, batch: dict[str, Any]) -> float:
        with self.torch.no_grad():
            return float(self._loss(batch).item())


def pick_framework(requested: str) -> str:
    have_torch = all(importlib.util.find_spec(m) is not None for m in ("torch", "insitu_torch"))
    if requested == "auto":
        return "torch" if have_torch else "numpy"
    if requested == "torch" and not have_torch:
        sys.exit("--framework torch needs torch and insitu-torch: pip install torch insitu-torch")
    return requested


def run_epoch(
    batches: Iterable[Any], step: Callable[[Any], float], count: Callable[[Any], int]
) -> tuple[float, int, float, float, float]:
    """Mean loss, samples, seconds, seconds waiting for data, seconds to the first batch."""
    start = time.perf_counter()
    losses: list[float] = []
    weights: list[int] = []
    waited, first = 0.0, float("nan")
    for batch, wait in timed(batches):
        if not losses:
            first = time.perf_counter() - start
        waited += wait
        n = count(batch)
        losses.append(step(batch) * n)
        weights.append(n)
    elapsed = time.perf_counter() - start
    return sum(losses) / max(sum(weights), 1), sum(weights), elapsed, waited, first


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("auto", "numpy", "torch"), default="auto")
    parser.add_argument("--path", type=Path, help="store location (default: a temporary folder)")
    parser.add_argument("--n-time", type=int, default=24 * 40, help="hours in the store")
    parser.add_argument("--lat", type=int, default=32)
    parser.add_argument("--lon", type=int, default=64)
    parser.add_argument("--chunks-time", type=int, default=24, help="hours per stored chunk")
    parser.add_argument("--lead", type=int, default=6, help="forecast lead time in hours")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2 (the demo checks that the loss falls)")
    framework = pick_framework(args.framework)

    with tempfile.TemporaryDirectory(prefix="insitu-demo-") as tmp:
        path = args.path or Path(tmp) / "era5.zarr"
        start = time.perf_counter()
        if path.exists():
            print(f"reusing the store at {path}")
        else:
            make_era5_like(
                path,
                n_time=args.n_time,
                shape=(args.lat, args.lon),
                chunks_time=args.chunks_time,
                seed=args.seed,
            )
            print(f"wrote a synthetic ERA5-like store to {path} in {time.perf_counter() - start:.1f} s")

        store = insitu.open_store(str(path))
        geoms = insitu.open_geometries(store, variables=INPUTS)
        target = geoms["t2m"].shift(args.lead)
        manifest = insitu.split_by_chunk(geoms["t2m"], fractions=(0.8, 0.1, 0.1), seed=args.seed)
        lon = zarr.open_array(store, path="lon", mode="r")[:]
        features = PixelFeatures(np.asarray(lon), args.lead)
        t2m = geoms["t2m"]
        print(
            f"t2m {t2m.shape} chunks {t2m.chunk_shape}; inputs {', '.join(INPUTS)} at t, "
            f"target {target.label} ({args.lead} h ahead); framework {framework}"
        )

        with insitu.InSituDataset(
            store,
            manifest,
            geometries=[*geoms.values(), target],
            batch_size=args.batch_size,
            block_chunks=8,
            seed=args.seed,
            batch_transforms=[features],
        ) as ds:
            mean, std = feature_scaling(ds.train, n_batches=4)
            model: NumpyLinear | TorchMLP
            if framework == "torch":
                model = TorchMLP(mean, std, args.lr)
                wrap: Callable[[insitu.DatasetView], Iterable[Any]] = model.wrap
            else:
                model = NumpyLinear(mean, std, args.lr)
                wrap = iter
            persistence = [float(np.mean(np.square(b["target"]))) * b.size for b in ds.val]
            val_samples = sum(b.size for b in ds.val)
            print(f"{len(ds.train)} train / {len(ds.val)} val batches of {args.batch_size}")
            print(f"persistence (no change) val loss: {sum(persistence) / val_samples:.4f} K^2")

            def count(batch: Any) -> int:
                return int(batch["target"].shape[0])

            history = []
            for epoch in range(args.epochs):
                ds.set_epoch(epoch)
                train_loss, n, seconds, waited, first = run_epoch(wrap(ds.train), model.train_step, count)
                val_loss, *_ = run_epoch(wrap(ds.val), model.eval_step, count)
                history.append(train_loss)
                print(
                    f"epoch {epoch}: train loss {train_loss:.4f}  val loss {val_loss:.4f} K^2  "
                    f"{n / seconds:,.0f} samples/s  first batch {first * 1e3:.1f} ms  "
                    f"data wait {100 * waited / seconds:.0f}%"
                )

    if not history[-1] < history[0]:
        print(f"FAILED: train loss did not fall ({history[0]:.4f} -> {history[-1]:.4f})")
        return 1
    print(f"OK: train loss fell from {history[0]:.4f} to {history[-1]:.4f} K^2 over {len(history)} epochs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
