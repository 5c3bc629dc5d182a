"""Nearest-neighbour regridding against a brute-force great-circle search done here."""

from __future__ import annotations

import numpy as np
import pytest

from insitu import ConfigError
from insitu_transforms.regrid import Grid, Regrid


def haversine(source: Grid, lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """``(n_target, n_source)`` haversine of the great-circle distance (monotonic in it)."""
    slat, slon = (np.radians(a)[None, :] for a in source.points())
    tlat, tlon = np.radians(lat)[:, None], np.radians(lon)[:, None]
    return np.sin((slat - tlat) / 2) ** 2 + np.cos(slat) * np.cos(tlat) * np.sin((slon - tlon) / 2) ** 2


def _gaussian() -> Grid:
    nodes, _ = np.polynomial.legendre.leggauss(24)
    return Grid.from_coords(np.degrees(np.arcsin(nodes)), np.arange(0, 360, 7.5))


def _curvy() -> Grid:
    lat, lon = np.meshgrid(np.linspace(-70, 70, 15), np.arange(0, 360, 12.0), indexing="ij")
    return Grid.from_coords(lat, lon + 4 * np.sin(np.radians(2 * lat)))


@pytest.mark.parametrize(
    "source",
    [
        Grid.regular(6.0),
        Grid.regular(7.5, poles=True, descending=True),
        Grid.regular(9.0, lon_start=-180),
        _gaussian(),
        _curvy(),
    ],
    ids=["regular", "poles-north-first", "minus-180", "gaussian", "curvilinear"],
)
def test_each_target_takes_the_closest_source_point_on_the_sphere(source: Grid) -> None:
    rng = np.random.default_rng(0)
    lat = np.degrees(np.arcsin(rng.uniform(-1, 1, 400)))  # uniform on the sphere: polar points too
    if source.curvilinear:
        lat = np.clip(lat, -74, 74)  # within a grid spacing of the source's outer rows
    lon = rng.uniform(-180, 540, 400)
    target = Grid.from_coords(lat.reshape(20, 20), lon.reshape(20, 20))
    index = np.arange(source.size, dtype="float64").reshape(1, *source.shape)  # says which cell was taken
    chosen = Regrid(source, target, "nearest", cache_dir=False)("x", index).ravel().astype(int)
    h = haversine(source, lat, lon)
    # The closest point, or one as close (the points of a pole row coincide): by distance, not index.
    np.testing.assert_allclose(h[np.arange(lat.size), chosen], h.min(axis=1), rtol=1e-12, atol=1e-18)


def test_a_regional_source_refuses_far_targets() -> None:
    i, j = np.meshgrid(np.arange(10.0), np.arange(12.0), indexing="ij")
    source = Grid.from_coords(40 + i, 5 + j + 0.1 * i)
    with pytest.raises(ConfigError, match=r"latitude 10, longitude 8\) lies outside the curvilinear"):
        Regrid(
            source,
            Grid.from_coords(np.array([[45.0, 10.0]]), np.array([[8.0, 8.0]])),
            "nearest",
            cache_dir=False,
        )


def test_nan_source_values_stay_nan() -> None:
    source = Grid.regular(10.0)
    field = np.ones((1, *source.shape))
    field[0, 9, 0] = np.nan  # the cell at (5, 5)
    out = Regrid(
        source, Grid.from_coords(np.array([4.0, 30.0]), np.array([4.0, 30.0])), "nearest", cache_dir=False
    )("x", field)
    assert np.isnan(out[0, 0, 0])
    assert (out[0, 1] == 1).all()
    assert out[0, 0, 1] == 1
