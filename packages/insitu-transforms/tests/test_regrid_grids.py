"""Grids for regridding: constructors, conventions (cell centres, poles, seam) and refusals."""

from __future__ import annotations

import numpy as np
import pytest

from insitu import ArrayGeometry, ConfigError
from insitu_transforms.regrid import Grid, parse_resolution


@pytest.mark.parametrize(
    ("text", "degrees"),
    [("1deg", 1.0), ("1.5deg", 1.5), ("5.625deg", 5.625), ("0.25", 0.25), ("2 degrees", 2.0), ("1°", 1.0)],
)
def test_resolution_strings(text: str, degrees: float) -> None:
    assert parse_resolution(text) == degrees


@pytest.mark.parametrize("bad", ["1.5km", "deg", "-1deg", "0deg", "0.7deg", "", "abc"])
def test_a_bad_resolution_is_an_error_naming_it(bad: str) -> None:
    with pytest.raises(ConfigError, match="resolution") as err:
        Grid.regular(bad)
    assert repr(bad) in str(err.value)


def test_regular_grids_have_cell_centres_by_default_like_weatherbench2() -> None:
    g = Grid.regular("5.625deg")
    assert g.shape == (32, 64)
    assert g.lat[0] == -90 + 5.625 / 2
    assert g.lat[-1] == 90 - 5.625 / 2
    assert g.lon[0] == 0.0
    assert g.lon[-1] == 360 - 5.625
    assert g.periodic
    assert not g.curvilinear
    # Cells tile the sphere from pole to pole.
    assert g.lat_axis.extent == (-90.0, 90.0)
    np.testing.assert_allclose(np.diff(g.lat_axis.edges), 5.625)


def test_regular_grids_with_poles_and_north_first_like_era5() -> None:
    g = Grid.regular(0.25, poles=True, descending=True)
    assert g.shape == (721, 1440)
    assert g.lat[0] == 90.0
    assert g.lat[-1] == -90.0
    edges = g.lat_axis.edges
    assert edges[0] == -90.0
    assert edges[-1] == 90.0
    assert edges[1] - edges[0] == pytest.approx(0.125)  # polar cells are half as tall
    assert Grid.regular("1.5deg", poles=True).shape == (121, 240)


def test_longitude_start_for_minus_180_grids() -> None:
    g = Grid.regular(10, lon_start=-180)
    assert g.lon[0] == -180.0
    assert g.lon[-1] == 170.0
    assert g.periodic


def test_global_and_regional_longitude_detection() -> None:
    lat = np.linspace(-80, 80, 9)
    assert Grid.from_coords(lat, np.arange(0, 360, 2.5)).periodic
    assert Grid.from_coords(lat, np.arange(-180, 180, 2.5)).periodic
    assert not Grid.from_coords(lat, np.arange(0, 355.0, 2.5)).periodic  # a 5° gap: not round the globe
    assert not Grid.from_coords(lat, np.arange(-20, 40, 1.0)).periodic
    across = np.concatenate([np.arange(340, 360, 1.0), np.arange(0, 21, 1.0)])  # 340..359, 0..20
    g = Grid.from_coords(lat, across)
    assert not g.periodic
    assert g.lon_axis.extent == (339.5, 380.5)
    assert Grid.from_coords(lat, np.arange(0, 355.0, 2.5), periodic=True).periodic  # told, not detected


def test_gaussian_latitudes_cover_the_poles() -> None:
    nodes, _ = np.polynomial.legendre.leggauss(32)
    lat = np.degrees(np.arcsin(nodes))
    g = Grid.from_coords(lat, np.arange(0, 360, 360 / 64))
    assert g.lat_axis.extent == (-90.0, 90.0)  # the first row sits short of the pole; its cell reaches it
    np.testing.assert_allclose(g.lat_axis.edges[1:-1], (lat[1:] + lat[:-1]) / 2)


def test_descending_latitude_is_sorted_internally_and_keeps_its_order() -> None:
    g = Grid.from_coords(np.arange(80, -81, -20.0), np.arange(0, 360, 30.0))
    assert g.lat[0] == 80
    assert (np.diff(g.lat_axis.centres) > 0).all()
    assert g.lat_axis.order[0] == 8


def test_explicit_bounds_override_midpoints() -> None:
    lat = np.array([-45.0, 45.0])
    g = Grid.from_coords(lat, np.arange(0, 360, 90.0), lat_bounds=[[-90, 0], [0, 90]])
    assert g.lat_axis.edges.tolist() == [-90.0, 0.0, 90.0]
    assert g.digest != Grid.from_coords(lat, np.arange(0, 360, 90.0), lat_bounds=[-60, 0, 60]).digest


def test_digest_is_stable_and_tells_grids_apart() -> None:
    a = Grid.regular(2)
    assert a.digest == Grid.from_coords(a.lat, a.lon, lat_bounds=a.lat_axis.edges).digest
    assert a == Grid.regular("2deg")
    assert a.digest != Grid.regular(2, lon_start=-180).digest
    assert a.digest != Grid.regular(2, descending=True).digest


@pytest.mark.parametrize(
    ("lat", "lon", "match"),
    [
        ([0, 10, 5], [0, 10, 20], "strictly increasing or decreasing"),
        ([0, 95], [0, 10], "beyond the poles"),
        ([0, 10], [0, 10, 5], "longitude must be strictly"),
        ([0, 10], np.arange(0, 361, 10.0), "360° or more"),
        ([0, np.nan], [0, 10], "non-finite"),
        ([[0, 1], [2, 3]], [0, 10], "both be 1-D"),
        ([5.0], [0, 10], "needs explicit bounds"),
    ],
)
def test_bad_coordinates_are_refused(lat: object, lon: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Grid.from_coords(lat, lon)


def test_curvilinear_grids() -> None:
    i, j = np.meshgrid(np.arange(10.0), np.arange(20.0), indexing="ij")
    regional = Grid.from_coords(10 + 2 * i + 0.3 * j, 20 + 2 * j - 0.5 * i)
    assert regional.curvilinear
    assert regional.shape == (10, 20)
    assert not regional.periodic
    lat, lon = np.meshgrid(np.linspace(-60, 60, 7), np.arange(0, 360, 15.0), indexing="ij")
    wrapped = Grid.from_coords(lat, lon + 3 * np.sin(np.radians(lat)))
    assert wrapped.periodic
    with pytest.raises(ConfigError, match="curvilinear"):
        _ = wrapped.lat_axis


def _geometry(dims: tuple[str, ...], coords: dict[str, np.ndarray], shape: tuple[int, ...]) -> ArrayGeometry:
    return ArrayGeometry(
        name="t2m",
        path="t2m",
        shape=shape,
        dtype=np.dtype("f4"),
        chunk_shape=(2, *shape[1:]),
        dimension_names=dims,
        coords=coords,
    )


def test_from_geometry_reads_delivered_coordinates() -> None:
    lat, lon = np.linspace(90, -90, 19), np.arange(0, 360, 10.0)
    geom = _geometry(("time", "latitude", "longitude"), {"latitude": lat, "longitude": lon}, (4, 19, 36))
    g = Grid.from_geometry(geom)
    assert g.shape == (19, 36)
    assert g.periodic
    np.testing.assert_array_equal(g.lat, lat)
    box = Grid.from_geometry(geom.sel(latitude=slice(60, 30), longitude=slice(340, 20)))
    assert box.shape == (4, 5)
    assert not box.periodic
    np.testing.assert_array_equal(box.lon, [340, 350, 0, 10, 20])
    short = _geometry(("time", "lat", "lon"), {"lat": lat, "lon": lon}, (4, 19, 36))
    assert Grid.from_geometry(short).shape == (19, 36)


def test_from_geometry_errors_name_what_is_missing() -> None:
    lat = np.linspace(90, -90, 19)
    geom = _geometry(("time", "latitude", "longitude"), {"latitude": lat}, (4, 19, 36))
    with pytest.raises(ConfigError, match=r"no coordinate values for 'longitude'.*Grid.from_coords"):
        Grid.from_geometry(geom)
    nameless = _geometry(("time", "y", "x"), {}, (4, 19, 36))
    with pytest.raises(ConfigError, match=r"no dimension named latitude or lat.*dims="):
        Grid.from_geometry(nameless)
