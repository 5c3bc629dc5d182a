"""One stack, measured in a process of its own: the model, the training loop, the evaluation.

:func:`run` is the body of a measuring process that the parent
(:mod:`examples.wb2_pair.compare`) starts per stack and whose memory (with
its DataLoader workers) it samples from outside. The clock starts just
before the stack is built (the store opened); the model is trained on the
training dates, then it and persistence are scored on the test dates through
the same stack.
"""

from __future__ import annotations

import importlib
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from examples.wb2_pair.data import VARIABLES, lead_steps, model_fields, normalisation, open_xarray
from examples.wb2_pair.spec import Spec, Stats


def pad(x: torch.Tensor) -> torch.Tensor:
    """One cell of padding: longitude wraps around the globe, latitude repeats its edge rows."""
    x = torch.cat([x[:, :, -1:], x, x[:, :, :1]], dim=2)  # (B, C, lon, lat): lon is dim 2
    return F.pad(x, (1, 1, 0, 0), mode="replicate")


class Forecaster(nn.Module):  # type: ignore[misc, unused-ignore]  # torch is Any where absent (nox -s types)
    """``x(t) → x(t + 6 h)``: ``x`` plus a tendency from each cell's 5×5 neighbourhood.

    Two 3×3 convolutions on normalised fields; the last one starts at zero, so
    the untrained model is persistence.
    """

    mean: torch.Tensor
    std: torch.Tensor
    change_std: torch.Tensor

    def __init__(self, stats: Stats, hidden: int = 32) -> None:
        super().__init__()
        channels = len(stats.mean)

        def column(values: list[float]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float32).view(1, channels, 1, 1)

        self.register_buffer("mean", column(stats.mean))
        self.register_buffer("std", column(stats.std))
        self.register_buffer("change_std", column(stats.change_std))
        self.inner = nn.Conv2d(channels, hidden, 3)
        self.outer = nn.Conv2d(hidden, channels, 3)
        with torch.no_grad():
            for parameter in self.outer.parameters():
                parameter.zero_()

    def tendency(self, x: torch.Tensor) -> torch.Tensor:
        """The change over the lead time, in units of its std."""
        h = F.gelu(self.inner(pad((x - self.mean) / self.std)))
        return self.outer(pad(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.tendency(x) * self.change_std

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.tendency(x), (y - x) / self.change_std)


@dataclass
class Measured:
    stack: str
    how: str
    ttfb_s: float  # construction (store opening included) → first training batch in hand
    samples_per_s: float  # training samples / s after the warm-up steps, model steps included
    wait_fraction: float  # share of that time spent waiting for the next batch
    steps: int
    samples_per_epoch: list[int]
    train_s: float  # construction → end of the last training step
    final_loss: float  # mean training loss over the last epoch (normalised units)
    rmse: dict[str, float]  # model, test dates, latitude-weighted, physical units
    persistence: dict[str, float]  # the same for x(t + 6 h) = x(t)
    test_samples: int
    floor_rss_mb: float  # this process's RSS before construction (imports and a warm-up step done)


def latitude_weights(latitude: Sequence[float]) -> torch.Tensor:
    w = np.cos(np.deg2rad(np.asarray(latitude, dtype=np.float64)))
    return torch.tensor(w / w.mean(), dtype=torch.float64)


def evaluate(
    model: Forecaster, batches: Any, latitude: Sequence[float]
) -> tuple[dict[str, float], dict[str, float], int]:
    """Latitude-weighted RMSE per variable of the model and of persistence, and the samples seen."""
    w = latitude_weights(latitude)
    model_sq = torch.zeros(len(VARIABLES), dtype=torch.float64)
    persist_sq = torch.zeros_like(model_sq)
    count = samples = 0
    with torch.no_grad():
        for x, y in batches:
            err = (model(x) - y).double()
            same = (x - y).double()
            model_sq += (err**2 * w).sum(dim=(0, 2, 3))
            persist_sq += (same**2 * w).sum(dim=(0, 2, 3))
            count += x.shape[0] * x.shape[2] * x.shape[3]
            samples += x.shape[0]

    def per_variable(total: torch.Tensor) -> dict[str, float]:
        return {name: float(v) for name, v in zip(VARIABLES, (total / count).sqrt(), strict=True)}

    return per_variable(model_sq), per_variable(persist_sq), samples


def rss_mb() -> float:
    import psutil

    return float(psutil.Process().memory_info().rss / 1e6)


# Both stacks' libraries: imported before either clock starts.
LIBRARIES = (
    "insitu",
    "insitu_torch",
    "xarray",
    "dask",
    "zarr",
    "xbatcher",
    "xbatcher.loaders.torch",
    "psutil",
)


def preload() -> None:
    """Import both stacks' libraries, so that neither stack's clock or memory floor includes them.

    Resolving ``insitu.as_torch`` builds insitu's plugin registry, which
    imports every installed insitu plugin package (with insitu-transforms,
    scipy too): an import, done here rather than on the first ``open_store``.
    """
    import insitu

    for name in LIBRARIES:
        importlib.import_module(name)
    _ = insitu.as_torch


def shared_inputs(spec: Spec) -> tuple[Stats, list[float], tuple[int, int]]:
    """The normalisation and the grid's latitudes, read with xarray before either stack is built.

    Each measuring process computes them the same way from the same time
    steps, so both models see identically normalised inputs.
    """
    ds = open_xarray(spec.store)
    mean, std, change = normalisation(ds, spec.plan.train, lead_steps(ds, spec.lead_hours))
    latitude = [float(v) for v in model_fields(ds)["latitude"].values]
    grid = (ds.sizes["longitude"], ds.sizes["latitude"])
    return Stats(mean=mean, std=std, change_std=change), latitude, grid


def warm_up_torch(stats: Stats, grid: tuple[int, int], batch_size: int) -> None:
    """One throwaway training step on zeros: torch's one-time costs (and the pages of its libraries
    that training touches) land before the clock and the memory floor, for both stacks alike."""
    model = Forecaster(stats)
    x = torch.zeros(batch_size, len(stats.mean), *grid)
    torch.autograd.backward(model.loss(x, x))
    torch.optim.Adam(model.parameters()).step()


def train_and_evaluate(build: Callable[[Spec], Any], spec: Spec) -> Measured:
    """Build the stack, train for ``spec.plan.epochs`` epochs, evaluate on the test dates.

    The model runs on one intra-op thread, leaving the cores to the loaders
    (and keeping torch safe in a forked process).
    """
    torch.set_num_threads(1)
    stats, latitude, grid = shared_inputs(spec)
    warm_up_torch(stats, grid, spec.plan.batch_size)
    torch.manual_seed(spec.seed)
    model = Forecaster(stats)
    optimizer = torch.optim.Adam(model.parameters(), lr=spec.plan.lr)
    floor = rss_mb()
    clock = time.perf_counter()
    stack = build(spec)
    ttfb = 0.0
    steps: list[tuple[float, float, float, int]] = []  # (asked, received, stepped, samples)
    per_epoch: list[int] = []
    losses: list[float] = []
    for epoch in range(spec.plan.epochs):
        batches = stack.train_batches(epoch)
        seen, losses = 0, []
        while True:
            asked = time.perf_counter()
            try:
                x, y = next(batches)
            except StopIteration:
                break
            received = time.perf_counter()
            ttfb = ttfb or received - clock
            loss = model.loss(x, y)
            optimizer.zero_grad()
            torch.autograd.backward(loss)
            optimizer.step()
            losses.append(loss.item())
            steps.append((asked, received, time.perf_counter(), len(x)))
            seen += len(x)
        per_epoch.append(seen)
    if len(steps) <= spec.warmup_steps:
        raise ValueError(
            f"{len(steps)} training steps leave none after the {spec.warmup_steps} warm-up steps"
        )
    warm = steps[spec.warmup_steps :]
    span = warm[-1][2] - (steps[spec.warmup_steps - 1][2] if spec.warmup_steps else clock)
    rmse, persistence, test_samples = evaluate(model, stack.test_batches(), latitude)
    stack.close()
    return Measured(
        stack=stack.name,
        how=stack.how,
        ttfb_s=ttfb,
        samples_per_s=sum(s[3] for s in warm) / span,
        wait_fraction=sum(s[1] - s[0] for s in warm) / span,
        steps=len(steps),
        samples_per_epoch=per_epoch,
        train_s=steps[-1][2] - clock,
        final_loss=float(np.mean(losses)),
        rmse=rmse,
        persistence=persistence,
        test_samples=test_samples,
        floor_rss_mb=floor,
    )


def run(stack: str, spec_json: str, conn: Connection) -> None:
    """A measuring process's body: measure ``stack`` and send the result (or the error) to the parent."""
    from examples.wb2_pair.stacks import STACKS

    try:
        preload()  # before the clock: each spawned process imports both stacks' libraries itself
        measured = train_and_evaluate(STACKS[stack], Spec.loads(spec_json))
        conn.send(("ok", asdict(measured)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        raise
    finally:
        conn.close()
