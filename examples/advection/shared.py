"""What the three advection scripts share besides the data: flags, sizes, the network's shape, the run.

Each script supplies only its framework: how to build the network, one
training epoch and a prediction pass. :func:`main` does the rest (store,
dataset, normalisation, scoring against persistence, the result line).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

import insitu
from examples.advection import data
from examples.common import Result, finish, parser

#: The network, the same in every framework: 'same'-padded convolutions (kernel, width) with ReLU,
#: then a 1x1 convolution to one channel, the predicted (standardised) 24 h change at every pixel.
CONV_LAYERS: tuple[tuple[int, int], ...] = ((5, 16), (3, 16), (3, 16))
N_INPUTS = 4  # temperature, u, v, land-sea mask


@dataclass(frozen=True)
class Settings:
    """Sizes of one run."""

    years: int  # of synthetic data
    splits: dict[str, tuple[str, str]]
    epochs: int
    batch_size: int
    learning_rate: float
    max_train_batches: int | None  # per epoch; None: the whole training period


SMOKE = Settings(
    years=2,
    splits=data.SMOKE_SPLITS,
    epochs=6,
    batch_size=32,
    learning_rate=2e-3,
    max_train_batches=None,
)
FULL = Settings(
    years=4,
    splits=data.SYNTHETIC_SPLITS,
    epochs=15,
    batch_size=32,
    learning_rate=2e-3,
    max_train_batches=None,
)


class Framework(Protocol):
    """What a training script provides."""

    name: str
    layout: str  # "NCHW" or "NHWC": how x and y are laid out

    def setup(self, seed: int, learning_rate: float, threads: int) -> None: ...

    def train_epoch(self, view: insitu.DatasetView, max_batches: int | None) -> float: ...

    def predict(self, view: insitu.DatasetView) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(prediction, dt) per batch, as numpy."""
        ...


def arguments(description: str) -> argparse.ArgumentParser:
    p = parser(description)
    p.add_argument("--epochs", type=int, default=None, help="training epochs (default: 6 smoke, 15 full)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None, help="learning rate (Adam)")
    p.add_argument("--max-train-batches", type=int, default=None, help="cap on batches per epoch")
    p.add_argument(
        "--storage-options",
        type=json.loads,
        default=None,
        help="JSON options for --store, e.g. '{\"anon\": true}' (the default for gs:// URLs)",
    )
    p.add_argument(
        "--splits",
        type=json.loads,
        default=None,
        help='JSON date ranges for --store, e.g. \'{"train": ["2010", "2017-12-30"], "val": ..., "test": ...}\'',
    )
    p.add_argument("--level", type=int, default=850, help="pressure level (hPa) of the fields")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="the framework's compute threads (default 1: a network this small gains nothing from more, "
        "and on a busy machine they contend with each other and with insitu's decode threads)",
    )
    return p


def settings(args: argparse.Namespace) -> Settings:
    base = SMOKE if args.smoke else FULL
    return Settings(
        years=base.years,
        splits=base.splits,
        epochs=args.epochs or base.epochs,
        batch_size=args.batch_size or base.batch_size,
        learning_rate=args.lr or base.learning_rate,
        max_train_batches=args.max_train_batches or base.max_train_batches,
    )


def make_synthetic_store(workdir: str | os.PathLike[str], *, years: int, seed: int) -> Path:
    """The synthetic ERA5-like store in ``workdir``, written once (an existing one is reused)."""
    path = Path(workdir) / f"advection-era5-like-{years}y-seed{seed}.zarr"
    if not path.exists():
        partial = path.with_suffix(".partial")
        data.write_era5_like(data.simulate(years=years, seed=seed), partial)
        os.replace(partial, path)  # a store interrupted mid-write is never mistaken for a finished one
    return path


@contextlib.contextmanager
def source_for(args: argparse.Namespace, run: Settings) -> Iterator[data.Source]:
    """The store this run reads: ``--store`` (WeatherBench2 layout and names), else the synthetic one."""
    if args.store is not None:
        options = args.storage_options
        if options is None and args.store.startswith("gs://"):
            options = {"anon": True}  # WeatherBench2's bucket is public
        splits = data.WB2.splits if args.splits is None else {k: tuple(v) for k, v in args.splits.items()}
        yield dataclasses.replace(
            data.WB2, store=args.store, storage_options=options, splits=splits, level=args.level
        )
        return
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="insitu-advection-"))
        start = time.perf_counter()
        path = make_synthetic_store(workdir, years=run.years, seed=args.seed)
        print(f"synthetic ERA5-like store: {path} ({time.perf_counter() - start:.1f} s)")
        yield dataclasses.replace(data.SYNTHETIC, store=str(path), splits=run.splits, level=args.level)


def main(framework: Framework, argv: Sequence[str] | None, description: str) -> int:
    args = arguments(description).parse_args(argv)
    run = settings(args)
    started = time.perf_counter()
    with source_for(args, run) as source:
        fields = data.open_fields(source)
        shape = fields.inputs[0].sample_shape
        print(
            f"{fields.temperature} at {source.level} hPa, region {shape} of {fields.inputs[0].shape}; "
            f"target {fields.target.label} (24 h later); splits "
            + ", ".join(f"{k} {len(fields.manifest.samples(k))}" for k in fields.manifest.names)
        )
        # On a remote store, statistics from 64 shuffled batches of the training period are plenty and
        # spare a second full read of it; the synthetic store is read whole.
        scaler = data.fit_scaler(fields, max_batches=None if args.store is None else 64)
        framework.setup(args.seed, run.learning_rate, args.threads)
        with data.build_dataset(
            fields, scaler, batch_size=run.batch_size, seed=args.seed, layout=framework.layout
        ) as ds:
            for epoch in range(run.epochs):
                ds.set_epoch(epoch)
                t0 = time.perf_counter()
                loss = framework.train_epoch(ds.train, run.max_train_batches)
                val = score(framework, ds.val, scaler)
                print(
                    f"epoch {epoch}: train loss {loss:.4f}  val RMSE {val.model:.3f} K "
                    f"(persistence {val.persistence:.3f} K)  {time.perf_counter() - t0:.1f} s"
                )
            test = score(framework, ds.test, scaler)
    result = Result(
        example=f"advection ({framework.name})",
        metric="test RMSE of the 24 h temperature change (K)",
        model=test.model,
        baseline=test.persistence,
        baseline_name="persistence",
        higher_is_better=False,
        seconds=time.perf_counter() - started,
    )
    return finish(result, args)


def score(framework: Framework, view: insitu.DatasetView, scaler: Any) -> data.Skill:
    skill = data.Skill(scaler)
    for prediction, change in framework.predict(view):
        skill.add(prediction, change)
    return skill
