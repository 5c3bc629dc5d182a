"""Bilinear regridding against references computed here: analytic fields, numpy.interp and
scipy's RegularGridInterpolator."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.interpolate import RegularGridInterpolator  # type: ignore[import-untyped]  # scipy ships no type information

from insitu import ConfigError
from insitu_transforms.regrid import Grid, Regrid


def regrid(source: Grid, target: Grid, block: np.ndarray, method: str = "bilinear") -> np.ndarray:
    return Regrid(source, target, method, cache_dir=False)("x", block)


def on_grid(grid: Grid, fn: object) -> np.ndarray:
    lat, lon = grid.points()
    return np.asarray(fn(lat, lon)).reshape(grid.shape)  # type: ignore[operator]


def linear(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    return 2.0 * lat - 0.5 * lon + 3.0


SOURCE = Grid.regular(2.0)  # centres -89..89, 1..359


def test_a_field_linear_in_lat_and_lon_is_reproduced_away_from_poles_and_seam() -> None:
    target = Grid.from_coords(np.linspace(-80, 80, 23), np.linspace(10, 350, 41))
    field = on_grid(SOURCE, linear)[None]
    np.testing.assert_allclose(regrid(SOURCE, target, field)[0], on_grid(target, linear), rtol=1e-12)
    np.testing.assert_allclose(
        regrid(SOURCE, target, field.astype("f4"))[0], on_grid(target, linear), rtol=1e-6, atol=1e-4
    )


def test_across_the_seam_a_periodic_field_is_interpolated_round_the_globe() -> None:
    def periodic(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
        return 0.1 * lat + np.cos(np.radians(lon))

    lats, lons = np.meshgrid([-45.0, 12.5, 60.0], [-0.7, 0.0, 0.3, 359.5, 360.2, 180.0, 1.0], indexing="ij")
    target = Grid.from_coords(lats, lons)  # scattered points: any longitude, in any turn
    field = on_grid(SOURCE, periodic)[None]
    src_lon = SOURCE.lon
    want_lon = np.interp(lons, src_lon, np.cos(np.radians(src_lon)), period=360)  # numpy's own wrap
    np.testing.assert_allclose(regrid(SOURCE, target, field)[0], 0.1 * lats + want_lon, rtol=1e-12)


@pytest.mark.parametrize(
    "source",
    [
        Grid.regular(3.0),
        Grid.from_coords(np.sort(np.random.default_rng(1).uniform(-85, 85, 40)), np.arange(0, 360, 7.5)),
    ],
    ids=["regular", "irregular-latitudes"],
)
def test_bilinear_agrees_with_scipy_regular_grid_interpolator(source: Grid) -> None:
    rng = np.random.default_rng(2)
    field = rng.normal(size=(3, *source.shape))
    lat0, lat1 = source.lat.min(), source.lat.max()
    lon0, lon1 = source.lon.min(), source.lon.max()
    target = Grid.from_coords(
        np.linspace(lat0 + 0.1, lat1 - 0.1, 17), np.linspace(lon0 + 0.1, lon1 - 0.1, 29)
    )
    scattered = Grid.from_coords(rng.uniform(lat0, lat1, (6, 7)), rng.uniform(lon0, lon1, (6, 7)))
    for tgt in (target, scattered):
        lat, lon = tgt.points()
        for k in range(3):
            ref = RegularGridInterpolator((source.lat, source.lon), field[k])(np.stack([lat, lon], axis=-1))
            np.testing.assert_allclose(regrid(source, tgt, field)[k].ravel(), ref, rtol=1e-12, atol=1e-12)


def test_gaussian_latitudes_reproduce_a_linear_field() -> None:
    nodes, _ = np.polynomial.legendre.leggauss(40)
    source = Grid.from_coords(np.degrees(np.arcsin(nodes)), np.arange(0, 360, 4.5))
    target = Grid.from_coords(np.linspace(-80, 80, 33), np.linspace(5, 355, 36))
    got = regrid(source, target, on_grid(source, linear)[None])[0]
    np.testing.assert_allclose(got, on_grid(target, linear), rtol=1e-12)


@pytest.mark.parametrize(
    "grid",
    [Grid.regular(5.0), Grid.regular(2.5, poles=True, descending=True), Grid.regular(6, lon_start=-180)],
    ids=["centres", "poles-north-first", "minus-180"],
)
@pytest.mark.parametrize("method", ["bilinear", "nearest", "conservative"])
def test_the_same_grid_is_the_identity(grid: Grid, method: str) -> None:
    field = np.random.default_rng(0).normal(280, 10, size=(2, 3, *grid.shape))
    for dtype in ("float32", "float64"):
        block = field.astype(dtype)
        np.testing.assert_array_equal(regrid(grid, grid, block, method), block)


def test_targets_beyond_the_outermost_rows_take_the_nearest_row() -> None:
    # Centres of the source stop at ±89°; a 1° target has rows at ±89.5°: clamped, not extrapolated.
    field = np.random.default_rng(3).normal(size=(1, *SOURCE.shape))
    target = Grid.from_coords(np.array([-89.5, 89.5, 90.0]), np.array([3.0, 100.0]))
    want_lon = [
        [np.interp(lon, SOURCE.lon, field[0, row], period=360) for lon in target.lon] for row in (0, -1, -1)
    ]
    np.testing.assert_allclose(regrid(SOURCE, target, field)[0], want_lon, rtol=1e-12)


def test_a_descending_source_gives_the_result_of_the_ascending_one() -> None:
    up = Grid.from_coords(np.arange(-88.5, 90, 3.0), np.arange(0, 360, 3.0))
    down = Grid.from_coords(up.lat[::-1], up.lon)
    field = np.random.default_rng(4).normal(size=(2, *up.shape))
    target = Grid.regular(4.0)
    np.testing.assert_allclose(
        regrid(down, target, field[:, ::-1]), regrid(up, target, field), rtol=1e-13, atol=1e-15
    )


@pytest.mark.parametrize("method", ["bilinear", "nearest"])
def test_minus_180_and_0_360_sources_give_the_same_result(method: str) -> None:
    east, west = Grid.regular(3.0), Grid.regular(3.0, lon_start=-180)
    field = np.random.default_rng(5).normal(size=(2, *east.shape))
    rolled = np.roll(field, 60, axis=-1)
    rng = np.random.default_rng(6)
    target = Grid.from_coords(rng.uniform(-80, 80, (5, 9)), rng.uniform(-200, 400, (5, 9)))
    np.testing.assert_allclose(
        regrid(west, target, rolled, method), regrid(east, target, field, method), rtol=1e-13
    )


def _corner_weights(source: Grid, lat: float, lon: float) -> dict[tuple[int, int], float]:
    """The four bilinear corner weights of one point on an ascending regular source, by hand."""
    dlat, dlon = source.lat[1] - source.lat[0], source.lon[1] - source.lon[0]
    i = int(np.floor((lat - source.lat[0]) / dlat))
    j = int(np.floor((lon - source.lon[0]) / dlon))
    fy = (lat - source.lat[i]) / dlat
    fx = (lon - source.lon[j]) / dlon
    return {
        (i, j): (1 - fy) * (1 - fx),
        (i, j + 1): (1 - fy) * fx,
        (i + 1, j): fy * (1 - fx),
        (i + 1, j + 1): fy * fx,
    }


def test_masked_corners_are_left_out_and_the_rest_renormalised() -> None:
    field = np.random.default_rng(7).normal(size=(2, *SOURCE.shape))
    lat, lon = 40.3, 100.7
    corners = _corner_weights(SOURCE, lat, lon)
    (i, j) = next(iter(corners))
    field[0, i, j] = np.nan  # one corner missing in sample 0
    for c in corners:
        field[1, c] = np.nan  # all four in sample 1
    target = Grid.from_coords(np.array([lat, -20.0]), np.array([lon, 200.0]))
    out = regrid(SOURCE, target, field)
    valid = {c: w for c, w in corners.items() if c != (i, j)}
    want = sum(w * field[0][c] for c, w in valid.items()) / sum(valid.values())
    assert out[0, 0, 0] == pytest.approx(want, rel=1e-12)
    assert np.isnan(out[1, 0, 0])
    assert np.isfinite(out[:, 1]).all()  # other points untouched by the mask
    clean = np.nan_to_num(field)
    np.testing.assert_allclose(out[:, 1], regrid(SOURCE, target, clean)[:, 1], rtol=1e-12)


def test_a_regional_source_clamps_at_its_edges_and_refuses_targets_outside() -> None:
    source = Grid.from_coords(np.arange(30.0, 71, 2.0), np.arange(-10.0, 31, 2.0))  # cells to 29..71, -11..31
    field = on_grid(source, linear)[None]
    edge = Grid.from_coords(np.array([29.5, 50.0]), np.array([-10.5, 30.5]))
    want = linear(np.array([[30.0], [50.0]]), np.array([[-10.0, 30.0]]))
    np.testing.assert_allclose(regrid(source, edge, field)[0], want, rtol=1e-12)
    with pytest.raises(ConfigError, match=r"target latitude 75 lies outside the source grid"):
        Regrid(source, Grid.from_coords(np.array([50.0, 75.0]), np.array([0.0, 10.0])), cache_dir=False)
    with pytest.raises(ConfigError, match=r"target longitude 35 lies outside the regional source grid"):
        Regrid(source, Grid.from_coords(np.array([50.0, 60.0]), np.array([0.0, 35.0])), cache_dir=False)
    with pytest.raises(ConfigError, match=r"target longitude -12 lies outside"):
        Regrid(
            source,
            Grid.from_coords(np.array([50.0, 60.0]), np.array([-12.0, 0.0])),
            "nearest",
            cache_dir=False,
        )


def test_a_regional_source_across_the_antimeridian() -> None:
    lon = np.concatenate([np.arange(170.0, 180, 1.0), np.arange(-180.0, -169, 1.0)])  # 170E .. 170W
    source = Grid.from_coords(np.arange(-10.0, 11, 1.0), lon)
    unwrapped = np.where(lon < 0, lon + 360, lon)
    field = (0.5 * source.lat[:, None] + unwrapped[None, :])[None]  # linear across the seam
    target = Grid.from_coords(np.array([-5.5, 0.25, 7.0]), np.array([175.5, 179.9, -179.5, -171.25]))
    t_lon = np.array([175.5, 179.9, 180.5, 188.75])
    np.testing.assert_allclose(
        regrid(source, target, field)[0], 0.5 * target.lat[:, None] + t_lon, rtol=1e-12
    )


# -- curvilinear sources ------------------------------------------------------------------------------
def sheared_grid() -> Grid:
    """A regional curvilinear grid: sheared, with a smooth wobble, so no quad is a parallelogram."""
    i, j = np.meshgrid(np.arange(25.0), np.arange(40.0), indexing="ij")
    lat = 10 + 1.5 * i + 0.2 * j + 0.3 * np.sin(j / 3)
    lon = -20 + 1.2 * j - 0.4 * i + 0.2 * np.cos(i / 2)
    return Grid.from_coords(lat, lon)


def test_a_curvilinear_source_reproduces_a_linear_field() -> None:
    source = sheared_grid()
    field = on_grid(source, linear)[None]
    target = Grid.from_coords(np.linspace(20, 40, 11), np.linspace(-10, 15, 13))
    np.testing.assert_allclose(
        regrid(source, target, field)[0], on_grid(target, linear), rtol=1e-10, atol=1e-9
    )


def test_a_curvilinear_copy_of_a_rectilinear_grid_interpolates_alike_across_the_seam() -> None:
    rect = Grid.from_coords(np.arange(-60.0, 61, 4.0), np.arange(0.0, 360, 5.0))
    lat2, lon2 = np.meshgrid(rect.lat, rect.lon, indexing="ij")
    curvy = Grid.from_coords(lat2, np.where(lon2 >= 180, lon2 - 360, lon2))  # stored -180..180 per row
    assert curvy.periodic
    field = np.random.default_rng(8).normal(size=(2, *rect.shape))
    rng = np.random.default_rng(9)
    target = Grid.from_coords(
        rng.uniform(-59, 59, (8, 8)),
        np.concatenate([rng.uniform(355, 360, 32), rng.uniform(0, 360, 32)]).reshape(8, 8),
    )
    np.testing.assert_allclose(
        regrid(curvy, target, field), regrid(rect, target, field), rtol=1e-10, atol=1e-12
    )


def test_curvilinear_points_near_the_edge_fall_back_and_far_points_are_refused() -> None:
    source = sheared_grid()
    field = on_grid(source, linear)[None]
    # Just south of the first row: in no quad, but within a grid spacing: the 4 nearest points, 1/d².
    lat, lon = float(source.lat[0, 10]) - 0.4, float(source.lon[0, 10])
    out = regrid(source, Grid.from_coords(np.array([[lat]]), np.array([[lon]])), field)[0, 0, 0]
    d = np.hypot(source.lat - lat, (source.lon - lon) * np.cos(np.radians(lat))).ravel()
    near = np.argsort(d)[:4]
    w = 1 / d[near] ** 2
    assert out == pytest.approx(float((w * field[0].ravel()[near]).sum() / w.sum()), rel=1e-3)
    with pytest.raises(
        ConfigError, match=r"target point \(latitude 80, longitude 0\) lies outside the curvilinear"
    ):
        Regrid(source, Grid.from_coords(np.array([[30.0, 80.0]]), np.array([[0.0, 0.0]])), cache_dir=False)
