"""The wb2_pair example: both stacks deliver the same samples, the smoke run, and the real-store path.

The real-store path is checked against a local copy shaped like
WeatherBench2's 5.625° ERA5 (13 levels, variables the run does not read, a
static land-sea mask, time in hours since 1959), reached by a ``file://``
URL so that it goes through the URL path of both stacks (obstore under
xarray, DataLoader workers from a forkserver).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch

from examples.wb2_pair import compare, data
from examples.wb2_pair.spec import SMOKE, Spec
from examples.wb2_pair.stacks import Batches, InsituStack, XbatcherStack

# Model RMSE of the two runs: the same model, samples and steps, in a different order.
TOLERANCE = 0.10


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("wb2_pair") / "wb2-like.zarr"
    return data.write_store(path, SMOKE.train[0], compare.day_after(SMOKE.test[1]), seed=0)


def gather(batches: Batches) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """Batch sizes, and every sample's inputs and targets in delivery order."""
    sizes, xs, ys = [], [], []
    for x, y in batches:
        sizes.append(len(x))
        xs.append(x)
        ys.append(y)
    return sizes, torch.cat(xs), torch.cat(ys)


def by_content(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The samples in an order fixed by their values, whatever order they came in."""
    order = torch.argsort(x.double().sum(dim=(1, 2, 3)))
    return x[order], y[order]


def test_fixed_order_delivers_the_same_values(store: str) -> None:
    spec = Spec(store=store, plan=SMOKE, seed=0, shuffle=False)
    ours, theirs = InsituStack(spec), XbatcherStack(spec)
    try:
        for part in ("train", "test"):
            a = gather(ours.train_batches(0) if part == "train" else ours.test_batches())
            b = gather(theirs.train_batches(0) if part == "train" else theirs.test_batches())
            assert a[0] == b[0], part  # the same batch sizes
            assert a[1].shape[1:] == (2, 64, 32)
            assert torch.equal(a[1], b[1]), part  # inputs at t, bit for bit
            assert torch.equal(a[2], b[2]), part  # targets at t + 6 h
        assert len(a[1]) == 28  # 7 test days, 4 steps a day
        # Targets are the inputs one step later: sample i's target is sample i+1's input.
        assert torch.equal(a[2][:-1], a[1][1:])
    finally:
        ours.close()


def test_each_shuffled_epoch_holds_the_same_samples(store: str) -> None:
    spec = Spec(store=store, plan=SMOKE, seed=3)
    ours, theirs = InsituStack(spec), XbatcherStack(spec)
    try:
        epochs = [(gather(ours.train_batches(e)), gather(theirs.train_batches(e))) for e in (0, 1)]
    finally:
        ours.close()
    first = by_content(*epochs[0][0][1:])
    assert len(first[0]) == 124  # December 2017, 6-hourly
    for a, b in epochs:
        assert sum(a[0]) == sum(b[0]) == 124
        assert len(a[0]) == len(b[0])  # the same number of steps
        for ours_sorted, theirs_sorted in zip(by_content(*a[1:]), by_content(*b[1:]), strict=True):
            assert torch.equal(ours_sorted, theirs_sorted)
        assert torch.equal(by_content(*a[1:])[0], first[0])
    # Shuffled: neither stack delivers time order, and each epoch has an order of its own.
    for stack in (0, 1):
        x0, x1 = epochs[0][stack][1], epochs[1][stack][1]
        assert not torch.equal(x0, by_content(x0, x0)[0])
        assert not torch.equal(x0, x1)


def test_smoke_run_prints_both_rows_and_beats_persistence(tmp_path: Path) -> None:
    args = argparse.Namespace(
        smoke=True, store=None, workdir=str(tmp_path), seed=0, train=None, test=None, epochs=0, workers=2
    )
    outcome = compare.compare(args)
    text = compare.render(outcome)
    rows = {line.split()[0]: line for line in text.splitlines() if line.split()}
    for name in ("insitu", "xbatcher", "persistence"):
        assert name in rows, text
    assert "MISMATCH" not in text, text
    insitu, xb = outcome.rows
    assert insitu["samples_per_epoch"] == xb["samples_per_epoch"] == [124, 124, 124]
    assert insitu["steps"] == xb["steps"] == 24
    assert outcome.result.beats_baseline, outcome.result.line()
    assert outcome.result.model < 0.8 * outcome.result.baseline  # a margin, not a coin flip
    for name in data.VARIABLES:
        assert xb["rmse"][name] == pytest.approx(insitu["rmse"][name], rel=TOLERANCE)
        assert xb["rmse"][name] < xb["persistence"][name]
    for row in outcome.rows:
        assert row["ttfb_s"] > 0
        assert row["samples_per_s"] > 0
        assert row["peak_rss_mb"] > row["floor_rss_mb"]


def test_real_store_path_on_a_local_wb2_shaped_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "1959-2023_01_10-6h-64x32_equiangular_conservative.zarr"
    data.write_store(
        copy, SMOKE.train[0], compare.day_after(SMOKE.test[1]), seed=1, levels=data.WB2_LEVELS, extras=True
    )
    code = compare.main(["--smoke", "--store", copy.as_uri(), "--json"])
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    assert code == 0, out
    assert result["beats_baseline"], out
    lines = out.splitlines()
    assert any(line.startswith("insitu ") for line in lines), out
    assert any(line.startswith("xbatcher ") for line in lines), out
    assert "MISMATCH" not in out, out


def test_wb2_layout_is_what_the_run_reads(tmp_path: Path) -> None:
    import xarray as xr

    path = data.write_store(
        tmp_path / "x.zarr", "2018-01-01", "2018-01-02", levels=data.WB2_LEVELS, extras=True
    )
    ds = xr.open_zarr(path, chunks=None)
    assert ds["2m_temperature"].dims == ("time", "longitude", "latitude")
    assert ds["geopotential"].dims == ("time", "level", "longitude", "latitude")
    assert ds["land_sea_mask"].dims == ("longitude", "latitude")
    assert ds.time.encoding["units"] == data.TIME_UNITS
    assert float(ds.latitude[0]) == -87.1875
    assert float(ds.longitude[-1]) == 354.375
    assert (ds.time.diff("time") == ds.time[1] - ds.time[0]).all()
    assert data.lead_steps(ds, 6) == 1
    fields = data.model_fields(ds)
    assert set(fields.data_vars) == set(data.VARIABLES)
    assert fields["geopotential"].dims == ("time", "longitude", "latitude")
    assert len(data.anchor_range(ds, ("2018-01-01", "2018-01-01"), 1)) == 4
    with pytest.raises(ValueError, match="no target"):
        data.anchor_range(ds, ("2018-01-01", "2018-01-02"), 1)
    # Deterministic from the seed.
    first = xr.open_zarr(data.write_store(tmp_path / "y.zarr", "2018-01-01", "2018-01-02"), chunks=None)
    again = xr.open_zarr(data.write_store(tmp_path / "z.zarr", "2018-01-01", "2018-01-02"), chunks=None)
    xr.testing.assert_identical(first.load(), again.load())
