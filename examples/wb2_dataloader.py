"""A cloud training loader, step by step: WeatherBench2-style ERA5 -> a PyTorch training loop.

The walk-through a weather-ML project goes through, each step printed as it
runs:

  1. open the store and see what it holds (names, dimensions, chunks);
  2. choose variables: temperature, u and v wind on pressure levels, and a
     static land-sea mask;
  3. split by date: train, validation and test periods;
  4. select a subregion (and levels), so only the chunks it touches are read:
     measured, one pass with and one without the selection;
  5. normalise: a StandardScaler fitted on the training period only, one
     mean and standard deviation per pressure level;
  6. train a small CNN in PyTorch, insitu feeding a DataLoader;
  7. score it on the held-out test period against persistence.

The task: temperature 24 hours ahead at each selected level, predicted as a
change from now. By default everything runs offline on a synthetic store laid
out like WeatherBench2's (``python -m examples.wb2_dataloader``). The same
script reads the real archive with two flags::

    python -m examples.wb2_dataloader \\
        --store gs://weatherbench2/datasets/era5/1959-2023_01_10-6h-64x32_equiangular_conservative.zarr \\
        --storage-options '{"anon": true}'
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

import insitu
from examples.advection.data import simulate, write_wb2_like
from examples.common import Result, finish, parser, run

WB2_URL = "gs://weatherbench2/datasets/era5/1959-2023_01_10-6h-64x32_equiangular_conservative.zarr"

# What to read, by WeatherBench2's names. The same on the synthetic store.
TEMPERATURE = "temperature"
WINDS = ("u_component_of_wind", "v_component_of_wind")
STATIC = "land_sea_mask"
LEVELS = [500, 850]  # hPa
# Europe and the eastern Atlantic: latitude 30-75 N, longitude 320 E (40 W) across Greenwich to 60 E.
# Bounds are coordinate values, both ends included; lo > hi on longitude wraps around the 0/360 seam.
REGION = {"latitude": slice(30, 75), "longitude": slice(320, 60)}
PROBE_DAYS = 20  # step 4 measures reads over this many days of the validation period
# Date ranges, both ends included. Each period stops a day before the next starts, so that no
# training target (24 h after its input) lies in the validation period.
REAL_SPLITS = {
    "train": ("2010-01-01", "2017-12-30"),
    "val": ("2018-01-01", "2018-12-30"),
    "test": ("2019-01-01", "2019-12-31"),
}
SYNTHETIC_SPLITS = {
    "train": ("2015-01-01", "2016-12-30"),
    "val": ("2017-01-01", "2017-06-29"),
    "test": ("2017-07-01", "2017-12-31"),
}
SMOKE_SPLITS = {
    "train": ("2015-01-01", "2015-12-30"),
    "val": ("2016-01-01", "2016-03-30"),
    "test": ("2016-04-01", "2016-12-31"),
}


def step(number: int, title: str) -> None:
    print(f"\n== Step {number}: {title}")


def arguments() -> argparse.ArgumentParser:
    p = parser(__doc__.split("\n\n")[0] if __doc__ else "")
    p.description = __doc__
    p.add_argument("--storage-options", type=json.loads, default=None, help="JSON, e.g. '{\"anon\": true}'")
    p.add_argument(
        "--splits", type=json.loads, default=None, help='JSON: {"train": ["2010", "2017-12-30"], ...}'
    )
    p.add_argument("--levels", type=lambda s: [int(v) for v in s.split(",")], default=LEVELS, help="500,850")
    p.add_argument("--epochs", type=int, default=None, help="default: 4 smoke, 10 full")
    p.add_argument("--max-train-batches", type=int, default=None, help="cap on batches per epoch")
    p.add_argument("--threads", type=int, default=1, help="torch compute threads (a small CNN wants 1)")
    return p


def synthetic_store(workdir: Path, *, smoke: bool, seed: int) -> Path:
    """A local store laid out like WeatherBench2's ERA5 (written once per workdir)."""
    years = 2 if smoke else 3
    path = workdir / f"wb2-like-{years}y-seed{seed}.zarr"
    if not path.exists():
        partial = path.with_suffix(".partial")
        # Chunks of 16 x 16 grid points, one level, 240 time steps (60 days): a region reads less.
        write_wb2_like(
            simulate(years=years, levels=(500, 700, 850), seed=seed),
            partial,
            chunks={"time": 240, "level": 1, "longitude": 16, "latitude": 16},
        )
        partial.rename(path)
    return path


def chunks_touched(geom: insitu.ArrayGeometry) -> tuple[int, int]:
    """Chunks per time chunk: touched by the selection, and in the whole field."""
    touched = total = 1
    for axis, (size, chunk) in enumerate(zip(geom.shape, geom.chunk_shape, strict=True)):
        if axis == geom.sample_axis and not geom.static:
            continue
        chosen = geom.axis_selection(axis)
        total *= math.ceil(size / chunk)
        touched *= math.ceil(size / chunk) if chosen is None else len({i // chunk for i in chosen.indices})
    return touched, total


def probe_reads(store: Any, geom: insitu.ArrayGeometry, start: np.datetime64) -> Mapping[str, Any]:
    """Read ``PROBE_DAYS`` days of one array from ``start`` once; the dataset's counters."""
    stop = start + np.timedelta64(PROBE_DAYS, "D") - np.timedelta64(1, "s")
    probe = insitu.split_by_coord(geom, {"probe": (start, stop)})
    with insitu.InSituDataset(store, probe, [geom], batch_size=64) as ds:
        for _ in ds.view("probe"):
            pass
        return ds.stats


def when(value: np.datetime64) -> str:
    return str(np.datetime_as_string(value, unit="h"))


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="insitu-wb2-") as tmp:
        workdir = Path(args.workdir or tmp)

        step(1, "open the store")
        if args.store is None:
            url = str(synthetic_store(workdir, smoke=args.smoke, seed=args.seed))
            splits = SMOKE_SPLITS if args.smoke else SYNTHETIC_SPLITS
            print(f"no --store: a synthetic store laid out like WeatherBench2's ERA5 at {url}")
        else:
            url, splits = args.store, REAL_SPLITS
        splits = {k: tuple(v) for k, v in (args.splits or splits).items()}
        # A path, or a URL: s3://, gs://, az://, https:// go through obstore (insitu-stores), with
        # xarray-style storage_options ({"anon": true} for a public bucket). Only metadata is read here.
        if args.storage_options:
            store = insitu.open_store(url, storage_options=args.storage_options)
        else:
            store = insitu.open_store(url)  # a local path takes no storage options
        everything = insitu.open_geometries(store, include_static=True)
        print(everything.report())
        for name in (TEMPERATURE, *WINDS, STATIC):
            g = everything[name]
            print(f"  {name}: dims {g.dimension_names}, shape {g.shape}, chunks {g.chunk_shape}, {g.dtype}")

        step(2, "choose variables")
        names = [TEMPERATURE, *WINDS, STATIC]
        full = insitu.open_geometries(store, variables=names)
        print(f"inputs {TEMPERATURE}, {', '.join(WINDS)} at time t; {STATIC} is static (no time axis):")
        print(f"it is read once and comes in every batch as (1, {', '.join(map(str, full[STATIC].shape))}).")
        print(f"target: {TEMPERATURE} 24 h later, the same stored array read 4 steps ahead (shift('24h')).")

        step(3, "split by date")
        # split_by_coord works on the decoded time coordinate ("hours since 1959-01-01" -> datetime64).
        manifest = insitu.split_by_coord(full[TEMPERATURE], splits)
        times = full[TEMPERATURE].coords["time"]
        for name in manifest.names:
            samples = manifest.samples(name)
            print(
                f"  {name:5s} {len(samples):6d} samples, {when(times[samples[0]])} .. {when(times[samples[-1]])}"
            )

        step(4, "select levels and a region: read only their chunks")
        sel = {"level": args.levels, **REGION}
        geoms = insitu.open_geometries(store, variables=names, sel=sel)
        t = geoms[TEMPERATURE]
        touched, total = chunks_touched(t)
        print(
            f"{TEMPERATURE}: sample {t.sample_shape} of {full[TEMPERATURE].sample_shape} "
            f"(dims {t.delivered_dims}); {touched} of {total} chunks per time chunk"
        )
        # Measured, not assumed: the same days read once for the whole field, once for the selection.
        start = times[manifest.samples("val")[0]]
        whole, region = probe_reads(store, full[TEMPERATURE], start), probe_reads(store, t, start)
        for what, stats in (("whole field", whole), ("selection", region)):
            print(
                f"  {PROBE_DAYS} days, {what:11s}: {stats['reads']:5d} reads, {stats['bytes_read'] / 1e6:7.2f} MB"
            )
        ratio = region["reads"] / whole["reads"]
        verdict = (
            "as planned" if math.isclose(ratio, touched / total) else f"but {touched} of {total} were planned"
        )
        print(f"  -> the selection costs {ratio:.0%} of the reads, {verdict}")
        if touched == total:
            print(
                "  (every chunk of this store holds whole fields: a region saves memory and decoding, not reads)"
            )

        step(5, "normalise: statistics of the training period, per level")
        from insitu_transforms import StandardScaler

        # Fitted on the base labels (no shifted target: it would read every chunk twice); a
        # shifted label ("temperature+4") shares its base variable's statistics. On a remote store,
        # 64 shuffled batches of the training period give the statistics without reading all of it.
        max_batches = None if args.store is None else 64
        with insitu.InSituDataset(store, manifest, geoms, batch_size=64, seed=args.seed) as stats_ds:
            scaler = StandardScaler.fit(stats_ds, per="level", max_batches=max_batches)
        print(f"fitted on {'all' if max_batches is None else max_batches} batches of the training period")
        for label in (TEMPERATURE, *WINDS, STATIC):
            mean, std = scaler.stats(label) or (np.nan, np.nan)
            print(f"  {label}: mean {np.round(np.ravel(mean), 2)}, std {np.round(np.ravel(std), 2)}")

        step(6, "train in PyTorch")
        import torch
        from torch.utils.data import DataLoader

        torch.set_num_threads(args.threads)
        torch.manual_seed(args.seed)
        target = t.shift("24h")
        with insitu.InSituDataset(
            store,
            manifest,
            [*geoms.values(), target],
            batch_size=32,
            seed=args.seed,
            batch_transforms=[scaler],  # runs in insitu's gather thread: batches arrive normalised
        ) as ds:
            levels = len(args.levels)
            model = torch.nn.Sequential(
                torch.nn.Conv2d(3 * levels + 1, 32, 5, padding="same"),
                torch.nn.ReLU(),
                torch.nn.Conv2d(32, 32, 3, padding="same"),
                torch.nn.ReLU(),
                torch.nn.Conv2d(32, levels, 1),
            )
            optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)

            def tensors(batch: dict[str, Any]) -> tuple[Any, Any]:
                """Inputs (B, 3 x levels + 1, lon, lat) and the scaled 24 h change (B, levels, lon, lat).

                Arrays come in the store's dimension order (here level, longitude, latitude: see
                delivered_dims in step 4), so levels are the channels; a CNN minds no grid order."""
                now = batch[TEMPERATURE]
                static = batch[STATIC].expand(now.shape[0], 1, *now.shape[2:])  # (1, ...) -> (B, 1, ...)
                x = torch.cat([now, batch[WINDS[0]], batch[WINDS[1]], static], dim=1)
                # Both are scaled with the same per-level statistics: their difference is change / std.
                return x, batch[target.label] - now

            def loader(view: insitu.DatasetView) -> Any:
                # insitu shuffles, batches and reads in parallel: no sampler, no worker processes.
                return DataLoader(insitu.as_torch(view), batch_size=None, num_workers=0)

            def rmse(view: insitu.DatasetView) -> tuple[np.ndarray, np.ndarray]:
                """Per-level RMSE (K) of the model and of persistence (no change)."""
                found = scaler.stats(TEMPERATURE)
                assert found is not None
                std = np.ravel(found[1])  # a scaled change times the level's std is the change in K
                model_se, persistence_se, n = np.zeros(levels), np.zeros(levels), 0
                with torch.no_grad():
                    for batch in loader(view):
                        x, change = tensors(batch)
                        error = (model(x) - change).numpy()
                        model_se += np.square(error).sum(axis=(0, 2, 3))
                        persistence_se += np.square(change.numpy()).sum(axis=(0, 2, 3))
                        n += change.shape[0] * change.shape[2] * change.shape[3]
                return std * np.sqrt(model_se / n), std * np.sqrt(persistence_se / n)

            epochs = args.epochs or (4 if args.smoke else 10)
            for epoch in range(epochs):
                ds.set_epoch(epoch)  # a new shuffle each epoch
                t0, losses = time.perf_counter(), []
                for i, batch in enumerate(loader(ds.train)):
                    if args.max_train_batches is not None and i == args.max_train_batches:
                        break
                    x, change = tensors(batch)
                    loss = torch.nn.functional.mse_loss(model(x), change)
                    optimizer.zero_grad()
                    loss.backward()  # type: ignore[no-untyped-call]
                    optimizer.step()
                    losses.append(loss.item())
                val_model, val_persistence = rmse(ds.val)
                print(
                    f"  epoch {epoch}: train loss {np.mean(losses):.4f}  val RMSE {np.round(val_model, 3)} K "
                    f"(persistence {np.round(val_persistence, 3)} K)  {time.perf_counter() - t0:.1f} s"
                )
            counters = ds.stats
            print(
                f"  loader: {counters['reads']} reads, {counters['bytes_read'] / 1e6:.1f} MB, hit rate "
                f"{counters['hit_rate']:.0%}, waiting for data {counters['stall_fraction']:.0%} of the time"
            )

            step(7, "score on the test period")
            test_model, test_persistence = rmse(ds.test)
            for level, m, p in zip(args.levels, test_model, test_persistence, strict=True):
                print(f"  {level} hPa: model {m:.3f} K, persistence {p:.3f} K")

    result = Result(
        example="wb2_dataloader",
        metric="test RMSE of temperature 24 h ahead (K, mean over levels)",
        model=float(np.sqrt(np.mean(np.square(test_model)))),
        baseline=float(np.sqrt(np.mean(np.square(test_persistence)))),
        baseline_name="persistence",
        higher_is_better=False,
        seconds=time.perf_counter() - started,
    )
    return finish(result, args)


if __name__ == "__main__":
    run(main)
