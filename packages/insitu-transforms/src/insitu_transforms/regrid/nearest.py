"""Nearest-neighbour weights: each target cell takes the value of the closest source centre on the
sphere (great-circle distance)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp  # type: ignore[import-untyped]  # scipy ships no type information

from insitu_transforms.regrid.axes import LonAxis, to_frame, wrap180
from insitu_transforms.regrid.curvilinear import SourcePoints
from insitu_transforms.regrid.grids import Grid
from insitu_transforms.regrid.sphere import unit_vectors


def _one_per_row(cols: np.ndarray, n_source: int) -> sp.csr_matrix:
    n = cols.size
    return sp.csr_matrix((np.ones(n), cols.astype(np.int64), np.arange(n + 1)), shape=(n, n_source))


def _nearest_lon(axis: LonAxis, lon: np.ndarray) -> np.ndarray:
    """Ascending position of the source column nearest in longitude (modulo 360 when periodic)."""
    centres = axis.centres
    n = centres.size
    lo, hi = axis.extent
    start = centres[0] if axis.periodic else (lo + hi) / 2 - 180.0
    x = to_frame(lon, start)
    k = np.searchsorted(centres, x, side="right") - 1
    west = np.clip(k, 0, n - 1)
    east = np.where(k + 1 < n, k + 1, 0 if axis.periodic else n - 1)
    d_west = np.abs(wrap180(x - centres[west]))
    d_east = np.abs(wrap180(x - centres[east]))
    return np.where(d_east < d_west, east, west)  # a tie goes west: the same choice every time


def _rectilinear_nearest(source: Grid, lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """Flat source index nearest to each point, exactly, without a tree.

    For a fixed source row the nearest column is the one nearest in
    longitude, whatever the row, since ``cos d = sin φ sin φ' + cos φ cos φ'
    cos Δλ`` grows with ``cos Δλ``. With that column, ``cos d`` is
    ``R cos(φ' - φ*)`` for ``φ* = atan2(sin φ, cos φ cos Δλ)``, so the nearest
    row is the source latitude nearest to ``φ*``.
    """
    lat_axis, lon_axis = source.lat_axis, source.lon_axis
    col_pos = _nearest_lon(lon_axis, lon)
    dlon = np.radians(wrap180(to_frame(lon, lon_axis.centres[0]) - lon_axis.centres[col_pos]))
    phi = np.radians(lat)
    aim = np.degrees(np.arctan2(np.sin(phi), np.cos(phi) * np.cos(dlon)))
    centres = lat_axis.centres
    k = np.clip(np.searchsorted(centres, aim) - 1, 0, centres.size - 1)
    above = np.minimum(k + 1, centres.size - 1)
    row_pos = np.where(np.abs(centres[above] - aim) < np.abs(aim - centres[k]), above, k)
    _, nx = source.shape
    return lat_axis.order[row_pos] * nx + lon_axis.order[col_pos]


def nearest_weights(source: Grid, target: Grid) -> sp.csr_matrix:
    """``(target.size, source.size)`` weights: a single 1 per row, at the nearest source cell."""
    lat, lon = target.points()
    if source.curvilinear:
        points = SourcePoints(source)
        points.check_near(lat, lon)  # a rectilinear source is checked before weights are built
        _, cols = points.tree.query(unit_vectors(lat, lon), k=1)
        cols = np.asarray(cols)
    else:
        cols = _rectilinear_nearest(source, lat, lon)
    return _one_per_row(cols, source.size)
