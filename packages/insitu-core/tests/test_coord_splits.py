"""Splits by coordinate value (``split_by_coord``): inclusive bounds, partial dates covering
their period, exact membership where a range cuts a chunk, the ``"all"`` view over shared
chunks, the manifest's JSON (new and old format), and every refusal naming its value."""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import CountingStore, field, write_array
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.storage import LocalStore

import insitu
from insitu.errors import ConfigError
from insitu.plan.order import epoch_order

HOUR = np.timedelta64(1, "h")


def hours(start: str, stop: str, step: int = 1) -> np.ndarray:
    """``[start, stop)`` every ``step`` hours, as a decoded CF time coordinate."""
    return np.arange(np.datetime64(start, "h"), np.datetime64(stop, "h"), step * HOUR).astype(
        "datetime64[ns]"
    )


def geom(coord: np.ndarray, chunk: int = 4, dim: str = "time") -> insitu.ArrayGeometry:
    return insitu.ArrayGeometry(
        name="v",
        path="v",
        shape=(len(coord), 3),
        dtype=np.dtype("f4"),
        chunk_shape=(chunk, 3),
        dimension_names=(dim, "lat"),
        coords={dim: coord},
    )


def reference(coord: np.ndarray, lo: Any, hi: Any, *, hi_inclusive: bool) -> np.ndarray:
    """Sample indices numpy's own comparison of the coordinate with explicit bounds selects."""
    mask = np.ones(len(coord), dtype=bool)
    if lo is not None:
        mask &= coord >= lo
    if hi is not None:
        mask &= (coord <= hi) if hi_inclusive else (coord < hi)
    return np.flatnonzero(mask)


# -- membership -----------------------------------------------------------------------------
SIX_HOURLY = hours("1979-01-01", "2019-01-01", 6)
D = np.datetime64


@pytest.mark.parametrize(
    ("bounds", "lo", "hi", "hi_inclusive"),
    [
        # A string covers its whole period: year, month, day, hour.
        (("1979", "2015"), D("1979-01-01"), D("2016-01-01"), False),
        (("2016", "2017"), D("2016-01-01"), D("2018-01-01"), False),
        (("2016-03", "2016-03"), D("2016-03-01"), D("2016-04-01"), False),
        (("2016-02", "2016-02"), D("2016-02-01"), D("2016-03-01"), False),  # leap February
        (("2015-12-31", "2015-12-31"), D("2015-12-31"), D("2016-01-01"), False),
        (("2015-12-31T06", "2015-12-31T12"), D("2015-12-31T06"), D("2015-12-31T13"), False),
        (("2015-12-31 06:00", "2015-12-31 18:00"), D("2015-12-31T06"), D("2015-12-31T18:01"), False),
        # Open ends.
        ((None, "1980"), None, D("1981-01-01"), False),
        (("2018-06", None), D("2018-06-01"), None, False),
        ((None, None), None, None, False),
        # Bounds beyond the coordinate (beyond datetime64[ns] too) just clip.
        (("1900", "3000"), None, None, False),
        # Anything else is an instant, inclusive (a date at midnight, as in pandas).
        ((datetime.date(2016, 1, 1), datetime.date(2016, 1, 2)), D("2016-01-01"), D("2016-01-02"), True),
        (
            (datetime.datetime(2016, 1, 1, 6), datetime.datetime(2016, 1, 3, 5)),
            D("2016-01-01T06"),
            D("2016-01-03T05"),
            True,
        ),
        ((D("2016-01-01T06"), D("2016-01-02T06")), D("2016-01-01T06"), D("2016-01-02T06"), True),
        (
            (D("2016-01-01T06:00:00.000000001", "ns"), None),
            D("2016-01-01T06:00:00.000000001", "ns"),
            None,
            True,
        ),
        (
            (
                datetime.datetime(2016, 1, 1, 7, tzinfo=datetime.timezone(datetime.timedelta(hours=1))),
                "2016-01-01",
            ),
            D("2016-01-01T06"),
            D("2016-01-02"),
            False,
        ),
    ],
)
def test_membership_is_numpy_comparison_with_the_bounds(bounds, lo, hi, hi_inclusive) -> None:
    m = insitu.split_by_coord(geom(SIX_HOURLY, chunk=10), {"x": bounds})
    expected = reference(SIX_HOURLY, lo, hi, hi_inclusive=hi_inclusive)
    np.testing.assert_array_equal(m.samples("x"), expected)
    assert m.ranges == {"x": (int(expected[0]), int(expected[-1]) + 1)}
    assert m.chunks("x") == tuple(range(expected[0] // 10, expected[-1] // 10 + 1))


def test_partial_dates_cover_their_period_on_hourly_data() -> None:
    t = hours("2015-01-01", "2017-01-01")
    g = geom(t, chunk=24 * 7)
    count = {
        ("2015", "2015"): 365 * 24,
        ("2016", "2016"): 366 * 24,
        ("2016-02", "2016-02"): 29 * 24,
        ("2016-03", "2016-03"): 31 * 24,
        ("2015-12-31", "2015-12-31"): 24,
        ("2016-03-01T06", "2016-03-01T06"): 1,
        ("2016-03-01T06", "2016-03-01T08"): 3,
        ("2015-06", "2015"): 214 * 24,  # June to December: the stop's period ends the year
    }
    for bounds, n in count.items():
        s = insitu.split_by_coord(g, {"x": bounds}).samples("x")
        assert len(s) == n, bounds
        assert t[s[0]] == np.datetime64(bounds[0]), bounds
        np.testing.assert_array_equal(s, np.arange(s[0], s[0] + n))


def test_pandas_timestamps_are_instants() -> None:
    pd = pytest.importorskip("pandas")
    m = insitu.split_by_coord(
        geom(SIX_HOURLY), {"x": (pd.Timestamp("2016-01-01"), pd.Timestamp("2016-01-02T00:00:00.000000001"))}
    )
    np.testing.assert_array_equal(
        m.samples("x"), reference(SIX_HOURLY, D("2016-01-01"), D("2016-01-02"), hi_inclusive=True)
    )
    assert m.coord_ranges == {"x": ("2016-01-01T00:00:00", "2016-01-02T00:00:00.000000001")}


def test_numeric_coordinates_take_numeric_bounds() -> None:
    depth = np.array([0.5, 1.5, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0])
    g = geom(depth, chunk=2, dim="depth")
    m = insitu.split_by_coord(g, {"shallow": (None, 10), "deep": (20.0, np.float64(1e9))})
    np.testing.assert_array_equal(m.samples("shallow"), np.flatnonzero(depth <= 10))
    np.testing.assert_array_equal(m.samples("deep"), np.flatnonzero(depth >= 20))
    assert m.coord_dim == "depth"
    assert m.coord_ranges == {
        "shallow": (None, "10"),
        "deep": ("20.0", "1000000000.0"),
    }
    levels = np.arange(0, 100, 10, dtype=np.int32)
    m = insitu.split_by_coord(geom(levels, dim="level"), {"a": (5, 25.5), "b": (30, 10**30)})
    np.testing.assert_array_equal(m.samples("a"), np.flatnonzero((levels >= 5) & (levels <= 25.5)))
    np.testing.assert_array_equal(m.samples("b"), np.flatnonzero(levels >= 30))
    with pytest.raises(ConfigError, match=r"cannot read the start bound '2016' as a number"):
        insitu.split_by_coord(g, {"x": ("2016", None)})


def test_missing_values_outside_the_ranges_used_are_fine() -> None:
    t = hours("2016-01-01", "2016-01-03").copy()
    t[-3:] = np.datetime64("NaT")
    g = geom(t)
    np.testing.assert_array_equal(
        insitu.split_by_coord(g, {"x": ("2016-01-01", "2016-01-01")}).samples("x"), np.arange(24)
    )
    with pytest.raises(ConfigError, match=r"reaches position 45 of the coordinate 'time', which is NaT"):
        insitu.split_by_coord(g, {"x": ("2016-01-02", None)})
    with pytest.raises(ConfigError, match=r"reaches position 45 .* NaT"):
        insitu.split_by_coord(g, {"x": ("2016-01-02", "2016-01-02T20")})  # the hole could be 21:00


# -- chunks cut by a range ----------------------------------------------------------------
def test_a_boundary_cutting_a_chunk_gives_each_split_exactly_its_samples() -> None:
    t = hours("2016-01-01", "2016-01-03")  # 48 hourly samples, chunks of 5: chunk 4 is 20..24
    m = insitu.split_by_coord(
        geom(t, chunk=5), {"train": (None, "2016-01-01T21"), "val": ("2016-01-01T22", "2016-01-02T12")}
    )
    assert m.ranges == {"train": (0, 22), "val": (22, 37)}
    assert 4 in m.chunks("train")
    assert 4 in m.chunks("val")
    np.testing.assert_array_equal(m.chunk_samples(4, "train"), [20, 21])
    np.testing.assert_array_equal(m.chunk_samples(4, "val"), [22, 23, 24])
    np.testing.assert_array_equal(m.chunk_samples(4), np.arange(20, 25))
    np.testing.assert_array_equal(m.chunk_samples(7), [35, 36])  # the last chunk, partly in no split
    np.testing.assert_array_equal(m.samples("train"), np.arange(22))
    np.testing.assert_array_equal(m.samples("val"), np.arange(22, 37))
    kw: dict[str, Any] = dict(anchor_range=(0, 48), epoch=3, seed=7, shuffle=True, block_chunks=2)
    for split, expected in (("train", np.arange(22)), ("val", np.arange(22, 37)), ("all", np.arange(37))):
        order = epoch_order(m, split, **kw)
        assert sorted(order.anchors.tolist()) == expected.tolist(), split
        for b in range(order.n_blocks):
            assert set((order.block_anchors(b) // 5).tolist()) <= set(order.block_chunks[b])
        chunks = [c for block in order.block_chunks for c in block]
        assert len(chunks) == len(set(chunks)), "a chunk planned twice in one pass"
    # An anchor range (offsets) clips each split's own range.
    assert sorted(epoch_order(m, "all", **{**kw, "anchor_range": (3, 30)}).anchors.tolist()) == list(
        range(3, 30)
    )


def test_gaps_between_splits_are_never_delivered() -> None:
    m = insitu.split_by_coord(
        geom(SIX_HOURLY, chunk=7), {"train": ("1979", "1980"), "test": ("1982", "1982-06")}
    )
    never = reference(SIX_HOURLY, D("1981-01-01"), D("1982-01-01"), hi_inclusive=False)
    kept = np.concatenate([m.samples("train"), m.samples("test")])
    assert not np.intersect1d(kept, never).size
    order = epoch_order(
        m, "all", anchor_range=(0, len(SIX_HOURLY)), epoch=0, seed=0, shuffle=True, block_chunks=3
    )
    np.testing.assert_array_equal(np.sort(order.anchors), kept)
    assert m.sample_range == (0, int(m.samples("test")[-1]) + 1)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 9),
    st.lists(st.integers(0, 60), min_size=2, max_size=8, unique=True),
    st.integers(0, 2**16),
    st.integers(1, 3),
    st.integers(1, 4),
)
def test_every_split_and_all_deliver_each_sample_once(chunk, cuts, seed, world, block_chunks) -> None:
    """Random cut points (a gap wherever two consecutive cuts are not adjacent ranges)."""
    t = hours("2016-01-01", "2016-01-03T13")  # 61 samples
    cuts = sorted(cuts)
    ranges = {
        f"s{i}": (str(t[a])[:13], str(t[b - 1])[:13])
        for i, (a, b) in enumerate(itertools.pairwise(cuts))
        if b > a
    }
    ranges = dict(list(ranges.items())[::2] if seed % 2 else ranges.items())  # every other: gaps
    m = insitu.split_by_coord(geom(t, chunk=chunk), ranges)
    kw: dict[str, Any] = dict(anchor_range=(0, len(t)), epoch=seed % 3, seed=seed, block_chunks=block_chunks)
    for name, (a, b) in m.ranges.items():
        np.testing.assert_array_equal(m.samples(name), np.arange(a, b))
    everything = np.concatenate([m.samples(n) for n in m.names])
    for split in (*m.names, "all"):
        expected = everything if split == "all" else m.samples(split)
        if world > len({int(s) // chunk for s in expected}):
            continue
        orders = [
            epoch_order(m, split, shuffle=True, rank=r, world_size=world, uneven="pad", **kw)
            for r in range(world)
        ]
        real = [o.anchors[: o.n_valid] if o.n_valid >= 0 else o.anchors for o in orders]
        flat = np.concatenate(real)
        np.testing.assert_array_equal(np.sort(flat), expected)  # each sample once, over all ranks
        chunk_sets = [{c for block in o.block_chunks for c in block} for o in orders]
        for i in range(world):
            for j in range(i + 1, world):
                assert not chunk_sets[i] & chunk_sets[j]  # no chunk read by two ranks


# -- end to end ---------------------------------------------------------------------------
N = 40
T = hours("2016-01-01", "2016-01-02T16")  # 40 hourly samples


@pytest.fixture
def stored(tmp_path: Path) -> tuple[Path, np.ndarray, insitu.ArrayGeometry]:
    data = field(N, (3, 5), seed=3)
    write_array(tmp_path, "v", data, (4, 3, 5), dimension_names=("time", "lat", "lon"))
    g = insitu.open_geometries(LocalStore(tmp_path, read_only=True))["v"]
    return tmp_path, data, dataclasses.replace(g, coords={"time": T})


SPLITS = {
    "train": (None, "2016-01-01T13"),
    "val": ("2016-01-01T14", "2016-01-01T21"),
    "test": ("2016-01-02T02", None),
}


def _delivered(view: insitu.DatasetView, data: np.ndarray) -> np.ndarray:
    seen = []
    for batch in view:
        np.testing.assert_array_equal(batch["v"], data[batch.sample_indices])
        seen.append(batch.sample_indices)
    return np.concatenate(seen) if seen else np.zeros(0, dtype=np.int64)


def test_end_to_end_each_view_yields_its_samples_once(stored) -> None:
    root, data, g = stored
    m = insitu.split_by_coord(g, SPLITS)
    assert m.ranges == {"train": (0, 14), "val": (14, 22), "test": (26, 40)}  # chunk 3 (12..15) is shared
    with insitu.InSituDataset(LocalStore(root, read_only=True), m, [g], batch_size=3, block_chunks=2) as ds:
        for epoch in (0, 1):
            ds.set_epoch(epoch)
            for split in ("train", "val", "test"):
                got = _delivered(ds.view(split), data)
                assert sorted(got.tolist()) == m.samples(split).tolist(), split
            got = _delivered(ds.all, data)
            assert sorted(got.tolist()) == list(range(22)) + list(range(26, 40))


def test_a_shared_chunk_is_read_once_per_pass_over_all(stored) -> None:
    root, data, g = stored
    m = insitu.split_by_coord(g, SPLITS)
    store = CountingStore(LocalStore(root, read_only=True))
    with insitu.InSituDataset(store, m, [g], batch_size=3, block_chunks=2) as ds:
        got = _delivered(ds.all, data)
        stats = ds.stats
    assert len(got) == 22 + 14
    chunks = sorted({c for name in m.names for c in m.chunks(name)})
    assert chunks == list(range(10))  # chunk 3 (12..15) is shared by train and val; 24, 25 are in no split
    assert 3 in m.chunks("train")
    assert 3 in m.chunks("val")
    assert stats["slabs_loaded"] == len(chunks)
    gets = store.chunk_gets()
    assert sorted(gets.values()) == [1] * len(chunks), gets


@pytest.mark.parametrize("split", ["train", "val", "all"])
def test_two_ranks_get_disjoint_samples(stored, split) -> None:
    root, data, g = stored
    m = insitu.split_by_coord(g, SPLITS)
    expected = set(range(22)) | set(range(26, 40)) if split == "all" else set(m.samples(split).tolist())
    with insitu.InSituDataset(LocalStore(root, read_only=True), m, [g], batch_size=2, uneven="pad") as ds:
        per_rank = []
        for rank in (0, 1):
            view = ds.view(split, rank=rank, world_size=2)
            n_valid = view.plan().order.n_valid
            got = _delivered(view, data)
            per_rank.append(got[:n_valid] if n_valid >= 0 else got)
    assert not set(per_rank[0].tolist()) & set(per_rank[1].tolist())
    assert set(per_rank[0].tolist()) | set(per_rank[1].tolist()) == expected


# -- the manifest's JSON ------------------------------------------------------------------
def test_json_round_trip_records_ranges_and_bounds() -> None:
    m = insitu.split_by_coord(
        geom(SIX_HOURLY, chunk=10),
        {
            "train": ("1979", datetime.date(2015, 12, 31)),
            "val": (D("2016-01-01T06"), "2017"),
            "test": ("2018", None),
        },
    )
    raw = json.loads(m.to_json())
    assert raw["format"] == "insitu.SplitManifest/2"
    assert raw["coord_dim"] == "time"
    assert raw["coord_ranges"] == {
        "train": ["1979", "2015-12-31"],
        "val": ["2016-01-01T06", "2017"],
        "test": ["2018", None],
    }
    assert raw["ranges"] == {k: list(v) for k, v in m.ranges.items()}
    again = insitu.SplitManifest.from_json(m.to_json())
    assert again == m
    for name in m.names:
        np.testing.assert_array_equal(again.samples(name), m.samples(name))


OLD_MANIFEST = """{
 "format": "insitu.SplitManifest/1",
 "label": "t2m",
 "n_samples": 10,
 "chunk_len": 4,
 "sample_range": [0, 10],
 "seed": 0,
 "contiguous": true,
 "splits": {"train": [0, 1], "val": [2]}
}"""


def test_old_format_manifests_still_read_and_chunk_manifests_are_written_as_before() -> None:
    m = insitu.SplitManifest.from_json(OLD_MANIFEST)
    assert (m.ranges, m.coord_ranges, m.coord_dim, m.sample_dim) == (None, None, None, None)
    np.testing.assert_array_equal(m.samples("train"), np.arange(8))
    np.testing.assert_array_equal(m.samples("val"), [8, 9])
    raw = json.loads(m.to_json())
    assert raw["format"] == "insitu.SplitManifest/1"
    assert not {"ranges", "coord_dim", "coord_ranges"} & set(raw)  # same text, same view-state hashes
    assert insitu.SplitManifest.from_json(m.to_json()) == m
    chunked = insitu.split_by_chunk(geom(SIX_HOURLY), (0.5, 0.5), sample_range=(3, 100))
    assert json.loads(chunked.to_json())["format"] == "insitu.SplitManifest/1"
    with pytest.raises(ConfigError, match=r"format='insitu.SplitManifest/9'"):
        insitu.SplitManifest.from_json(OLD_MANIFEST.replace("/1", "/9"))


def test_manifest_ranges_are_checked() -> None:
    base = insitu.SplitManifest.from_json(OLD_MANIFEST)
    with pytest.raises(ConfigError, match="one \\(start, stop\\) per split"):
        dataclasses.replace(base, ranges={"train": (0, 8)})
    with pytest.raises(ConfigError, match=r"ranges\['val'\]=\(8, 11\) must be integers"):
        dataclasses.replace(base, ranges={"train": (0, 8), "val": (8, 11)})


# -- refusals -----------------------------------------------------------------------------
EXTENT = r"the coordinate 'time' runs from 1979-01-01 to 2018-12-31T18:00 \(58440 samples\)"


@pytest.mark.parametrize(
    ("ranges", "match"),
    [
        (
            {"test": ("2030", "2031")},
            r"range 'test' \('2030', '2031'\) lies entirely outside the coordinate: " + EXTENT,
        ),
        ({"old": (None, "1978-12-31")}, r"range 'old' \(None, '1978-12-31'\) lies entirely outside"),
        (
            {"x": ("2016-01-01T01", "2016-01-01T05")},
            r"range 'x' \('2016-01-01T01', '2016-01-01T05'\) selects no sample: it falls between 2016-01-01 "
            r"\(position 54056\) and 2016-01-01T06:00 \(position 54057\); " + EXTENT,
        ),
        ({"x": ("2017", "2016")}, r"range 'x' \('2017', '2016'\): the start is after the stop; " + EXTENT),
        ({"x": (D("2016-01-02"), D("2016-01-01"))}, r"the start is after the stop"),
        (
            {"train": ("1979", "2016"), "val": ("2016", "2017")},
            r"splits 'train' \('1979', '2016'\) and 'val' \('2016', '2017'\) overlap from '2016' to '2016': both "
            r"hold the 1464 sample\(s\) 2016-01-01 to 2016-12-31T18:00",
        ),
        (
            {"a": ("2000", None), "b": ("1990", "2005-06")},
            r"splits 'a' \('2000', None\) and 'b' \('1990', '2005-06'\) overlap from '2000' to '2005-06'",
        ),
        (
            {"a": ("2000-01-01T00", "2000-01-01T02"), "b": ("2000-01-01T02", "2000-01-01T06")},
            r"overlap from '2000-01-01T02' to '2000-01-01T02': no sample lies in the overlap",
        ),
        ({"x": ("yesterday-ish", None)}, r"range 'x': cannot read the start bound 'yesterday-ish' as a date"),
        ({"x": (None, "now")}, r"cannot read the stop bound 'now' as a date"),
        ({"x": (None, 2016)}, r"cannot read the stop bound 2016 as a date .*; " + EXTENT),
        ({"x": (D("NaT"), None)}, r"cannot read the start bound"),
        ({"x": (object(), None)}, r"cannot read the start bound <object"),
        ({}, r"ranges is empty"),
        ({3: ("1979", "2015")}, r"split names must be non-empty strings, got 3"),
        ({"": ("1979", "2015")}, r"split names must be non-empty strings, got ''"),
        ({"x": "1979"}, r"range 'x' must be a \(start, stop\) pair, got '1979'"),
        ({"x": ("1979", "1980", "1981")}, r"range 'x' must be a \(start, stop\) pair"),
    ],
)
def test_bad_ranges_are_refused_naming_the_value_and_the_extent(ranges, match) -> None:
    with pytest.raises(ConfigError, match=match):
        insitu.split_by_coord(geom(SIX_HOURLY), ranges)


def test_the_coordinate_itself_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"ranges must be a mapping"):
        insitu.split_by_coord(geom(SIX_HOURLY), [("1979", "2015")])  # type: ignore[arg-type]
    with pytest.raises(
        ConfigError,
        match=r"dim='lat' is not the sample dimension of array 'v' \(its sample "
        r"dimension is 'time'\)",
    ):
        insitu.split_by_coord(geom(SIX_HOURLY), {"x": (None, None)}, dim="lat")
    no_coord = dataclasses.replace(geom(SIX_HOURLY), coords={})
    with pytest.raises(ConfigError, match=r"the store has no coordinate array for 'time'"):
        insitu.split_by_coord(no_coord, {"x": (None, None)})
    unnamed = dataclasses.replace(geom(SIX_HOURLY), dimension_names=None)
    with pytest.raises(ConfigError, match=r"does not name its dimensions"):
        insitu.split_by_coord(unnamed, {"x": (None, None)})
    t = hours("2016-01-01", "2016-01-02").copy()
    t[7] = t[6]
    with pytest.raises(
        ConfigError,
        match=r"must be strictly increasing .* at position 7 it is 2016-01-01T06:00, "
        r"not after position 6",
    ):
        insitu.split_by_coord(geom(t), {"x": (None, None)})
    with pytest.raises(ConfigError, match=r"at position 1 "):
        insitu.split_by_coord(geom(t[::-1].copy()), {"x": (None, None)})
    with pytest.raises(ConfigError, match=r"has shape \(5,\), but the sample axis"):
        insitu.split_by_coord(dataclasses.replace(geom(t), coords={"time": t[:5]}), {"x": (None, None)})
    with pytest.raises(ConfigError, match=r"dtype <U1"):
        insitu.split_by_coord(
            dataclasses.replace(geom(t), coords={"time": np.array(list("a" * 24))}), {"x": (None, None)}
        )
    with pytest.raises(ConfigError, match=r"splits an ArrayGeometry"):
        insitu.split_by_coord("v", {"x": (None, None)})  # type: ignore[arg-type]
