"""Conservative regridding against references computed here with plain numpy: cell areas on the
sphere, area-weighted means, block averages."""

from __future__ import annotations

import numpy as np
import pytest

from insitu import ConfigError
from insitu_transforms.regrid import Grid, Regrid


def regrid(source: Grid, target: Grid, block: np.ndarray) -> np.ndarray:
    return Regrid(source, target, "conservative", cache_dir=False)("x", block)


def lat_edges(lat: np.ndarray) -> np.ndarray:
    """Midpoints, the outer edges at the poles (the documented convention for global grids)."""
    s = np.sort(lat)
    return np.concatenate([[-90.0], (s[1:] + s[:-1]) / 2, [90.0]])


def cell_areas(lat: np.ndarray, nlon: int) -> np.ndarray:
    """Area of each cell of a global grid with equal longitude spacing, for ascending ``lat``."""
    band = np.diff(np.sin(np.radians(lat_edges(lat))))
    return np.repeat(band[:, None], nlon, axis=1) * (2 * np.pi / nlon)


def global_mean(field: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """Area-weighted mean over the last two axes, computed in float64."""
    areas = cell_areas(np.asarray(lat), field.shape[-1])
    return (field.astype(np.float64) * areas).sum(axis=(-2, -1)) / areas.sum()


def smooth_field(lat: np.ndarray, lon: np.ndarray, rows: int, dtype: str, seed: int = 0) -> np.ndarray:
    phi, lam = np.meshgrid(np.radians(lat), np.radians(lon), indexing="ij")
    rng = np.random.default_rng(seed)
    out = [
        280 + 20 * np.cos(phi) + 5 * np.sin(3 * lam + k) * np.cos(phi) ** 2 + rng.normal(0, 1, phi.shape)
        for k in range(rows)
    ]
    return np.stack(out).astype(dtype)


@pytest.mark.parametrize(("dtype", "rtol"), [("float32", 1e-6), ("float64", 1e-12)])
@pytest.mark.parametrize(
    ("src", "dst"),
    [("2deg", "5deg"), ("5deg", "2deg"), ("1.5deg", "5.625deg")],
    ids=["coarser", "finer", "unaligned"],
)
def test_the_area_weighted_global_mean_is_preserved(src: str, dst: str, dtype: str, rtol: float) -> None:
    source, target = Grid.regular(src), Grid.regular(dst)
    field = smooth_field(source.lat, source.lon, 3, dtype)
    out = regrid(source, target, field)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_allclose(global_mean(out, target.lat), global_mean(field, source.lat), rtol=rtol)


def test_the_global_mean_is_preserved_from_gaussian_latitudes() -> None:
    nodes, _ = np.polynomial.legendre.leggauss(48)
    lat = np.degrees(np.arcsin(nodes))
    source = Grid.from_coords(lat, np.arange(96) * 3.75)
    target = Grid.regular("5.625deg")
    field = smooth_field(lat, source.lon, 2, "float64")
    out = regrid(source, target, field)
    np.testing.assert_allclose(global_mean(out, target.lat), global_mean(field, lat), rtol=1e-12)


@pytest.mark.parametrize("dst", ["3deg", "7.5deg", "1deg"])
def test_a_constant_field_is_reproduced_exactly(dst: str) -> None:
    source = Grid.regular(2.5, poles=True, descending=True)
    field = np.full((2, *source.shape), 273.15, dtype="float32")
    out = regrid(source, Grid.regular(dst), field)
    assert (out == np.float32(273.15)).all()  # float64 sums rounded once to float32
    # float64 data: the weights of a row sum to 1 within rounding, so to the last bit or two.
    np.testing.assert_allclose(
        regrid(source, Grid.regular(dst), np.full_like(field, 273.15, "f8")), 273.15, rtol=1e-15
    )


def test_coarse_graining_by_four_is_the_exact_area_weighted_block_mean() -> None:
    # A 0.25°→1°-style 4:1 ratio on a small grid: 2.5° (72x144) to 10° (18x36), cell edges aligned.
    source = Grid.regular(2.5, lon_start=1.25)  # edges at multiples of 2.5° in both directions
    target = Grid.regular(10, lon_start=5.0)  # edges at multiples of 10°
    field = smooth_field(source.lat, source.lon, 2, "float64", seed=3)
    band = np.diff(np.sin(np.radians(np.linspace(-90, 90, 73))))  # source row areas (per unit lon)
    w = np.broadcast_to(band[:, None], source.shape)
    blocks = (field * w).reshape(2, 18, 4, 36, 4).sum(axis=(2, 4))
    want = blocks / w.reshape(18, 4, 36, 4).sum(axis=(1, 3))
    np.testing.assert_allclose(regrid(source, target, field), want, rtol=1e-12)
    f32 = field.astype("float32")
    np.testing.assert_allclose(regrid(source, target, f32), want, rtol=1e-6)


def test_the_same_grid_is_the_identity() -> None:
    for source in (Grid.regular(3), Grid.regular(2, poles=True, descending=True)):
        field = smooth_field(source.lat, source.lon, 2, "float64")
        np.testing.assert_array_equal(regrid(source, source, field), field)


def test_a_descending_source_gives_the_result_of_the_ascending_one() -> None:
    up = Grid.from_coords(np.arange(-89, 90, 2.0), np.arange(0, 360, 2.0))
    down = Grid.from_coords(up.lat[::-1], up.lon)
    field = smooth_field(up.lat, up.lon, 2, "float64")
    target = Grid.regular(7.5)
    np.testing.assert_allclose(regrid(down, target, field[:, ::-1]), regrid(up, target, field), rtol=1e-13)
    down_target = Grid.regular(7.5, descending=True)
    np.testing.assert_allclose(regrid(up, down_target, field), regrid(up, target, field)[:, ::-1], rtol=1e-13)


def test_minus_180_and_0_360_sources_give_the_same_result() -> None:
    east = Grid.regular(2.5)  # 0 .. 357.5
    west = Grid.regular(2.5, lon_start=-180)  # -180 .. 177.5
    field = smooth_field(east.lat, east.lon, 2, "float64")
    rolled = np.roll(field, 72, axis=-1)  # column k of `west` is longitude -180 + 2.5k
    for target in (Grid.regular(10), Grid.regular(7.5, lon_start=-180)):
        np.testing.assert_allclose(regrid(west, target, rolled), regrid(east, target, field), rtol=1e-12)


def test_masked_cells_are_left_out_and_the_rest_renormalised() -> None:
    source = Grid.regular(2.5, lon_start=1.25)
    target = Grid.regular(10, lon_start=5.0)
    field = smooth_field(source.lat, source.lon, 2, "float64", seed=5)
    field[0, 0:4, 0:4] = np.nan  # a whole target cell's sources: that cell is NaN
    field[0, 10, 8] = np.nan  # one of 16 sources of target cell (2, 2)
    field[1, 40:44, 100:104] = np.nan  # another sample, another mask
    band = np.diff(np.sin(np.radians(np.linspace(-90, 90, 73))))
    w = np.broadcast_to(band[:, None], field.shape).copy()
    w[np.isnan(field)] = 0
    num = (np.nan_to_num(field) * w).reshape(2, 18, 4, 36, 4).sum(axis=(2, 4))
    den = w.reshape(2, 18, 4, 36, 4).sum(axis=(2, 4))
    with np.errstate(invalid="ignore"):
        want = num / den
    out = regrid(source, target, field)
    assert np.isnan(out[0, 0, 0])
    assert np.isnan(out[1, 10, 25])
    assert np.isnan(out).sum() == 2
    np.testing.assert_allclose(out, want, rtol=1e-12)


def test_a_regional_source_renormalises_partial_cells_and_refuses_targets_outside() -> None:
    source = Grid.from_coords(np.arange(30.5, 70, 1.0), np.arange(-9.5, 30, 1.0))  # 30..70N, 10W..30E
    inside = Grid.from_coords(np.arange(35, 66, 5.0), np.arange(-5, 26, 5.0))
    field = np.full((1, *source.shape), 2.0, dtype="float32")
    np.testing.assert_array_equal(regrid(source, inside, field), 2.0)
    with pytest.raises(ConfigError, match=r"target latitude -89.*outside the source grid"):
        Regrid(source, Grid.regular(2), "conservative", cache_dir=False)
    east = Grid.from_coords(np.arange(35, 66, 5.0), np.arange(40, 60, 5.0))
    with pytest.raises(ConfigError, match=r"target longitude 40 lies outside the regional source"):
        Regrid(source, east, "conservative", cache_dir=False)


def test_a_regional_source_across_the_antimeridian_coarse_grains_exactly() -> None:
    # 1° cells from 170°E to 170°W (stored 170.5 .. 179.5, -179.5 .. -170.5), 4° target cells.
    lon = np.concatenate([np.arange(170.5, 180, 1.0), np.arange(-179.5, -170, 1.0)])
    source = Grid.from_coords(np.arange(-9.5, 10, 1.0), lon)
    target = Grid.from_coords(np.arange(-8.0, 9, 4.0), np.array([172.0, 176.0, -180.0, -176.0, -172.0]))
    field = np.random.default_rng(4).normal(size=(1, *source.shape))
    band = np.diff(np.sin(np.radians(np.arange(-10.0, 10.5, 1.0))))
    w = np.broadcast_to(band[:, None], source.shape)
    want = (field[0] * w).reshape(5, 4, 5, 4).sum(axis=(1, 3)) / w.reshape(5, 4, 5, 4).sum(axis=(1, 3))
    np.testing.assert_allclose(regrid(source, target, field)[0], want, rtol=1e-12)


def test_conservative_on_a_curvilinear_grid_is_refused() -> None:
    i, j = np.meshgrid(np.arange(10.0), np.arange(20.0), indexing="ij")
    curvy = Grid.from_coords(10 + 2 * i + 0.3 * j, 20 + 2 * j - 0.5 * i)
    with pytest.raises(ConfigError, match=r"conservative.*source grid.*curvilinear.*bilinear"):
        Regrid(curvy, Grid.regular(30), "conservative", cache_dir=False)
    with pytest.raises(ConfigError, match=r"conservative.*target grid.*curvilinear"):
        Regrid(Grid.regular(1), curvy, "conservative", cache_dir=False)


def test_weights_for_era5_to_one_degree_take_seconds_at_most() -> None:
    import time

    source = Grid.regular(0.25, poles=True, descending=True)
    start = time.perf_counter()
    r = Regrid(source, Grid.regular(1, poles=True), "conservative", cache_dir=False)
    assert time.perf_counter() - start < 10  # about 0.3 s here; generous for slow CI
    assert r.weights.shape == (181 * 360, 721 * 1440)
    np.testing.assert_allclose(np.asarray(r.weights.sum(axis=1)).ravel(), 1.0, rtol=1e-12)
