"""Bilinear weights from a rectilinear source: linear in latitude times linear in longitude.

Each target point takes the four source centres around it. Longitude wraps
across the seam when the source is global. Targets beyond the outermost
source centre but within its cells (near the poles for a global source, at
the edges of a regional one) take the value of the nearest row or column
("clamp"): no extrapolation. A rectilinear target's weights are the
Kronecker product of a latitude matrix and a longitude matrix, so they are
built from two 1-D problems.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp  # type: ignore[import-untyped]  # scipy ships no type information

from insitu_transforms.regrid.axes import LatAxis, LonAxis, to_frame
from insitu_transforms.regrid.grids import Grid

#: Fractions this close to 0 or 1 are snapped, so a target on a source centre takes exactly that
#: centre (moving a longitude by 360° may shift it by a rounding error).
_SNAP = 1e-10


def _snap(frac: np.ndarray) -> np.ndarray:
    frac = np.clip(frac, 0.0, 1.0)
    frac[frac < _SNAP] = 0.0
    frac[frac > 1.0 - _SNAP] = 1.0
    return frac


def lat_brackets(axis: LatAxis, lat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each latitude: the stored indices of the source rows below and above, and the weight of
    the one above. Beyond the outermost rows the nearest row has weight 1."""
    centres = axis.centres
    lat = np.asarray(lat, dtype=np.float64)
    if centres.size == 1:
        zero = np.zeros(lat.shape, dtype=np.int64)
        return axis.order[zero], axis.order[zero], np.zeros(lat.shape)
    k = np.clip(np.searchsorted(centres, lat, side="right") - 1, 0, centres.size - 2)
    frac = _snap((lat - centres[k]) / (centres[k + 1] - centres[k]))
    return axis.order[k], axis.order[k + 1], frac


def lon_brackets(axis: LonAxis, lon: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each longitude: the stored indices of the source columns west and east, and the weight of
    the eastern one; across the seam for a periodic axis, clamped at the edges of a regional one."""
    centres = axis.centres
    n = centres.size
    if n == 1:
        zero = np.zeros(np.shape(lon), dtype=np.int64)
        return axis.order[zero], axis.order[zero], np.zeros(np.shape(lon))
    if axis.periodic:
        x = to_frame(lon, centres[0])
        k = np.searchsorted(centres, x, side="right") - 1  # 0..n-1; n-1 means between last and first
        east = np.where(k == n - 1, 0, k + 1)
        east_value = np.where(k == n - 1, centres[0] + 360.0, centres[np.minimum(k + 1, n - 1)])
        frac = _snap((x - centres[k]) / (east_value - centres[k]))
        return axis.order[k], axis.order[east], frac
    lo, hi = axis.extent
    x = to_frame(lon, (lo + hi) / 2 - 180.0)
    k = np.clip(np.searchsorted(centres, x, side="right") - 1, 0, n - 2)
    frac = _snap((x - centres[k]) / (centres[k + 1] - centres[k]))
    return axis.order[k], axis.order[k + 1], frac


def _two_point_matrix(lower: np.ndarray, upper: np.ndarray, frac: np.ndarray, n_source: int) -> sp.csr_matrix:
    rows = np.arange(lower.size)
    m = sp.coo_matrix(
        (
            np.concatenate([1.0 - frac, frac]),
            (np.concatenate([rows, rows]), np.concatenate([lower, upper])),
        ),
        shape=(lower.size, n_source),
    ).tocsr()  # duplicates (a one-row source) are summed
    m.eliminate_zeros()
    return m


def bilinear_weights(source: Grid, target: Grid) -> sp.csr_matrix:
    """``(target.size, source.size)`` bilinear weights from a rectilinear ``source``."""
    lat_axis, lon_axis = source.lat_axis, source.lon_axis
    ny, nx = source.shape
    if not target.curvilinear:
        wlat = _two_point_matrix(*lat_brackets(lat_axis, target.lat), ny)
        wlon = _two_point_matrix(*lon_brackets(lon_axis, target.lon), nx)
        return sp.kron(wlat, wlon, format="csr")
    lat, lon = target.points()
    south, north, fy = lat_brackets(lat_axis, lat)
    west, east, fx = lon_brackets(lon_axis, lon)
    rows = np.arange(lat.size)
    corners = [(south, west, (1 - fy) * (1 - fx)), (south, east, (1 - fy) * fx)]
    corners += [(north, west, fy * (1 - fx)), (north, east, fy * fx)]
    w = sp.coo_matrix(
        (
            np.concatenate([c[2] for c in corners]),
            (np.tile(rows, 4), np.concatenate([c[0] * nx + c[1] for c in corners])),
        ),
        shape=(target.size, source.size),
    ).tocsr()
    w.eliminate_zeros()
    return w
