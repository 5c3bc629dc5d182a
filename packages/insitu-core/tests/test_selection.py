"""Selections by position and by coordinate value resolve to the source indices a user expects."""

from __future__ import annotations

import numpy as np
import pytest

from insitu import ArrayGeometry, ConfigError

LAT = np.linspace(90, -90, 19)  # north to south, 10° apart
LON_360 = np.arange(36) * 10.0
LON_180 = np.arange(-180, 180, 10.0)


def geom(lon: np.ndarray = LON_360) -> ArrayGeometry:
    return ArrayGeometry(
        name="t2m",
        path="t2m",
        shape=(8, 19, 36),
        dtype=np.dtype("f4"),
        chunk_shape=(2, 5, 9),
        dimension_names=("time", "latitude", "longitude"),
        coords={"latitude": LAT, "longitude": lon},
    )


def indices(g: ArrayGeometry, dim: str) -> list[int]:
    chosen = g.axis_selection(g.axis_of(dim))
    assert chosen is not None
    return list(chosen.indices)


def test_a_latitude_box_works_in_either_direction_on_a_descending_axis() -> None:
    want = np.flatnonzero((LAT <= 60) & (LAT >= 30)).tolist()
    assert indices(geom().sel(latitude=slice(60, 30)), "latitude") == want
    assert indices(geom().sel(latitude=slice(30, 60)), "latitude") == want


@pytest.mark.parametrize("lon", [LON_360, LON_180], ids=["0-360", "-180-180"])
def test_a_longitude_box_crosses_the_antimeridian_in_order(lon: np.ndarray) -> None:
    g = geom(lon).sel(longitude=slice(340, 20))  # 340, 350, 0, 10, 20 — eastwards from 340°E
    wrapped = lon[indices(g, "longitude")] % 360
    assert wrapped.tolist() == [340, 350, 0, 10, 20]
    same = geom(lon).sel(longitude=slice(-20, 20))  # the same box in -180..180 terms
    assert indices(same, "longitude") == indices(g, "longitude")
    assert g.sample_shape == (19, 5)
    assert g.coord("longitude").tolist() == lon[indices(g, "longitude")].tolist()


def test_values_lists_and_scalars_follow_xarray() -> None:
    g = geom().sel(latitude=[0, 50, -50])
    assert LAT[indices(g, "latitude")].tolist() == [0, 50, -50]  # in the order asked
    dropped = geom().sel(latitude=0)
    assert dropped.sample_shape == (36,)  # a scalar drops the axis, as in xarray
    assert dropped.delivered_dims == ("longitude",)


def test_isel_composes_with_an_earlier_selection() -> None:
    g = geom().isel(longitude=slice(10, 30)).isel(longitude=[0, 5, -1])
    assert indices(g, "longitude") == [10, 15, 29]
    assert g.isel(latitude=slice(None)).selection == g.selection  # selecting everything is a no-op
    assert geom().isel(latitude=slice(None)).selection is None


def test_selections_are_part_of_identity() -> None:
    a = geom().sel(latitude=slice(60, 30))
    b = geom().sel(latitude=slice(50, 30))
    assert a != b
    assert a.describe()["selection"] != b.describe()["selection"]
    assert a == geom().isel(latitude=indices(a, "latitude"))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda g: g.sel(latitude=95), r"no coordinate value equals 95; the coordinate spans -90.0 .. 90.0"),
        (lambda g: g.sel(latitude=slice(91, 99)), r"slice\(91, 99\) selects nothing"),
        (lambda g: g.isel(latitude=[1, 1]), r"names an index twice"),
        (lambda g: g.isel(latitude=19), r"index 19 is out of range for an axis of length 19"),
        (lambda g: g.isel(latitude=slice(5, 5)), r"selects nothing from an axis of length 19"),
        (lambda g: g.isel(latitude=1.5), r"expected a list of values, got 1.5"),
        (lambda g: g.sel(latitude="north"), r"'north' is not a number"),
        (lambda g: g.isel(time=0), r"sample axis \(axis 0, 'time'\) cannot be selected"),
        (lambda g: g.sel(level=500), r"has no dimension 'level'"),
        (lambda g: g.isel(latitude=0).isel(latitude=0), r"already reduced to one index"),
        (lambda g: g.isel({"latitude": 0}, latitude=1), r"selected twice"),
    ],
)
def test_bad_selections_name_the_value(call, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=match):
        call(geom())


def test_sel_needs_coordinates() -> None:
    bare = ArrayGeometry(
        name="a", path="a", shape=(4, 6), dtype=np.dtype("f4"), chunk_shape=(2, 3), dimension_names=("t", "x")
    )
    with pytest.raises(ConfigError, match=r"no coordinate values for it; select by position with isel"):
        bare.sel(x=1.0)
    assert bare.isel(x=[0, 2]).sample_shape == (2,)


@pytest.mark.parametrize("budget", ["auto", 0], ids=["pooled", "streamed"])
@pytest.mark.parametrize("decoders", [None, []], ids=["direct", "zarr-pipeline"])
def test_a_selection_reads_the_same_values_through_either_decode_path(tmp_path, decoders, budget) -> None:  # type: ignore[no-untyped-def]
    """With no direct decoder, zarr's pipeline reads the selected region (orthogonally)."""
    import zarr

    import insitu

    values = np.arange(8 * 19 * 36, dtype="f4").reshape(8, 19, 36)
    arr = zarr.create_array(
        tmp_path / "s.zarr",
        shape=values.shape,
        chunks=(2, 5, 9),
        dtype="f4",
        dimension_names=("time", "latitude", "longitude"),
    )
    arr[...] = values
    store = insitu.open_store(tmp_path / "s.zarr")
    (g,) = insitu.open_geometries(store, sample_axis="time").values()  # the store is one array
    chosen = g.isel(latitude=3, longitude=[30, 2, 11])
    manifest = insitu.split_by_chunk(chosen, (1.0,), names=["train"])
    with insitu.InSituDataset(
        store, manifest, [chosen], batch_size=8, shuffle=False, decoders=decoders, cache_budget_bytes=budget
    ) as data:
        batch = next(iter(data.train))
    np.testing.assert_array_equal(batch[chosen.label], values[:, 3][:, [30, 2, 11]])
