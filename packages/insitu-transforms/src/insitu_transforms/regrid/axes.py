"""One axis of a rectilinear (1-D latitude × 1-D longitude) grid: its order, cell edges and extent.

Weights are built on axes sorted ascending (unwrapped across the longitude
seam) and mapped back to the stored order through ``order``, so a descending
latitude or a longitude box that crosses the antimeridian needs no special
case in the methods.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from insitu.plugin_api import ConfigError

#: Degrees by which a target may stray outside a source's extent and still count as inside:
#: coordinates written as float32 or rounded in text files miss by about this much.
DOMAIN_TOL = 1e-6


@dataclass(frozen=True, eq=False)
class LatAxis:
    """Latitudes of a rectilinear grid, in degrees north."""

    values: np.ndarray  # as stored, float64
    order: np.ndarray  # stored index of each ascending position
    centres: np.ndarray  # values[order], strictly ascending
    edges: np.ndarray  # len(centres) + 1 ascending cell edges within [-90, 90]

    @property
    def extent(self) -> tuple[float, float]:
        """Southern and northern edge of the grid's cells."""
        return float(self.edges[0]), float(self.edges[-1])


@dataclass(frozen=True, eq=False)
class LonAxis:
    """Longitudes of a rectilinear grid, in degrees east, unwrapped to an ascending sequence."""

    values: np.ndarray  # as stored, float64
    order: np.ndarray  # stored index of each ascending position
    centres: np.ndarray  # values[order] + a multiple of 360 each, strictly ascending, span < 360
    edges: np.ndarray  # len(centres) + 1 ascending; periodic: edges[-1] == edges[0] + 360
    periodic: bool  # the cells go round the globe: the seam joins the last cell to the first

    @property
    def extent(self) -> tuple[float, float]:
        """Western and eastern edge of the grid's cells, unwrapped (east > west)."""
        return float(self.edges[0]), float(self.edges[-1])


def _as_1d(name: str, values: object) -> np.ndarray:
    arr = np.array(values, dtype=np.float64)  # a copy: the grid must not change under the caller
    if arr.ndim != 1 or arr.size == 0:
        raise ConfigError(f"{name} must be a non-empty 1-D sequence of degrees, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        bad = arr[~np.isfinite(arr)][0]
        raise ConfigError(f"{name} holds a non-finite value ({bad})")
    arr.flags.writeable = False
    return arr


def _edges_from_bounds(name: str, bounds: object, n: int, ascending: bool) -> np.ndarray:
    """Bounds as ``n + 1`` edges or CF-style ``(n, 2)`` pairs, as ascending edges."""
    b = np.asarray(bounds, dtype=np.float64)
    if b.shape == (n, 2):
        lo, hi = np.minimum(b[:, 0], b[:, 1]), np.maximum(b[:, 0], b[:, 1])
        if not ascending:
            lo, hi = lo[::-1], hi[::-1]
        if not np.allclose(hi[:-1], lo[1:], rtol=0, atol=1e-9):
            raise ConfigError(f"{name} bounds leave gaps or overlaps between neighbouring cells")
        b = np.concatenate([lo, hi[-1:]])
    elif b.shape == (n + 1,):
        b = b if b[-1] >= b[0] else b[::-1]
    else:
        raise ConfigError(f"{name} bounds must have shape ({n + 1},) or ({n}, 2), got {b.shape}")
    if not np.isfinite(b).all() or not (np.diff(b) > 0).all():
        raise ConfigError(f"{name} bounds must be finite and strictly monotonic")
    return b


def lat_axis(values: object, bounds: object = None) -> LatAxis:
    """A latitude axis: strictly monotonic (either direction), any spacing (Gaussian, irregular).

    Without ``bounds``, cell edges are the midpoints between centres. The
    outermost edge is extended by half the neighbouring spacing, or to the
    pole when the outermost centre lies within one spacing of it (so a
    Gaussian grid, whose first row sits just short of the pole, covers the
    whole sphere, and a grid with a row on the pole gets a half-height polar
    cell). Edges are clipped to ±90.
    """
    lat = _as_1d("latitude", values)
    if np.abs(lat).max() > 90 + DOMAIN_TOL:
        raise ConfigError(f"latitude {lat[np.argmax(np.abs(lat))]} lies beyond the poles (±90)")
    n = lat.size
    steps = np.diff(lat)
    if n > 1 and not ((steps > 0).all() or (steps < 0).all()):
        raise ConfigError(f"latitude must be strictly increasing or decreasing, got {lat[:6].tolist()}...")
    ascending = n == 1 or bool(steps[0] > 0)
    order = np.arange(n) if ascending else np.arange(n)[::-1].copy()
    centres = lat[order]
    if bounds is not None:
        edges = _edges_from_bounds("latitude", bounds, n, ascending)
    elif n == 1:
        raise ConfigError("a latitude axis of one value needs explicit bounds (lat_bounds)")
    else:
        edges = np.empty(n + 1)
        edges[1:-1] = (centres[1:] + centres[:-1]) / 2
        first, last = centres[1] - centres[0], centres[-1] - centres[-2]
        edges[0] = -90.0 if centres[0] + 90 < first else centres[0] - first / 2
        edges[-1] = 90.0 if 90 - centres[-1] < last else centres[-1] + last / 2
    edges = np.clip(edges, -90.0, 90.0)
    if not (edges[0] <= centres[0] + DOMAIN_TOL and centres[-1] <= edges[-1] + DOMAIN_TOL):
        raise ConfigError("latitude bounds do not contain their cell centres")
    for a in (order, centres, edges):
        a.flags.writeable = False
    return LatAxis(lat, order, centres, edges)


def wrap180(deg: np.ndarray) -> np.ndarray:
    """Angles folded into [-180, 180)."""
    return (np.asarray(deg, dtype=np.float64) + 180.0) % 360.0 - 180.0


def to_frame(lon: np.ndarray, start: float) -> np.ndarray:
    """Longitudes moved by whole turns into [start, start + 360); values already there are left
    bit-for-bit as they are (so a target that equals a source centre still equals it)."""
    lon = np.asarray(lon, dtype=np.float64)
    inside = (lon >= start) & (lon < start + 360.0)
    return np.where(inside, lon, start + (lon - start) % 360.0)


def lon_axis(values: object, bounds: object = None, periodic: bool | None = None) -> LonAxis:
    """A longitude axis: monotonic modulo 360 (0–360, -180–180, or a box across the seam), any spacing.

    ``periodic=None`` detects a global axis: the gap across the seam (from the
    last centre round to the first) is no wider than the widest step between
    centres. Without ``bounds``, edges are midpoints; a periodic axis puts its
    seam edge midway across the gap, so its cells tile the circle exactly; a
    regional one extends its outer edges by half the neighbouring spacing.
    """
    lon = _as_1d("longitude", values)
    n = lon.size
    if n > 1:
        steps = wrap180(np.diff(lon))
        if not ((steps > 0).all() or (steps < 0).all()):
            raise ConfigError(
                f"longitude must be strictly increasing or decreasing (modulo 360), got {lon[:6].tolist()}..."
            )
        ascending = bool(steps[0] > 0)
    else:
        ascending = True
    order = np.arange(n) if ascending else np.arange(n)[::-1].copy()
    stored = lon[order]
    # Unwrap by whole turns counted from the first value, so each centre is its stored value plus
    # an exact multiple of 360 (a cumulative sum of steps would drift by rounding).
    turns = np.zeros(n)
    if n > 1:
        unwrapped = stored[0] + np.concatenate([[0.0], np.cumsum(wrap180(np.diff(stored)))])
        turns = np.round((unwrapped - stored) / 360.0)
    centres = stored + 360.0 * turns
    if centres[-1] - centres[0] >= 360.0 - 1e-9:
        raise ConfigError(
            f"longitude covers 360° or more ({stored[0]} to {stored[-1]}); a global grid lists each "
            "meridian once (drop a repeated seam column such as 360 when 0 is present)"
        )
    if bounds is not None:
        edges = _edges_from_bounds("longitude", bounds, n, ascending)
        edges = edges + 360.0 * np.floor((centres[0] - edges[0]) / 360.0)  # into the centres' frame
        span = edges[-1] - edges[0]
        if span > 360.0 + 1e-9:
            raise ConfigError(f"longitude bounds span {span}°, more than the globe")
        is_periodic = abs(span - 360.0) <= 1e-9 if periodic is None else periodic
        if is_periodic:
            edges[-1] = edges[0] + 360.0
    elif n == 1:
        raise ConfigError("a longitude axis of one value needs explicit bounds (lon_bounds)")
    else:
        gaps = np.diff(centres)
        seam_gap = centres[0] + 360.0 - centres[-1]
        is_periodic = bool(seam_gap <= gaps.max() * (1 + 1e-3) + 1e-9) if periodic is None else periodic
        edges = np.empty(n + 1)
        edges[1:-1] = (centres[1:] + centres[:-1]) / 2
        if is_periodic:
            edges[0] = (centres[-1] - 360.0 + centres[0]) / 2
            edges[-1] = edges[0] + 360.0
        else:
            edges[0] = centres[0] - gaps[0] / 2
            edges[-1] = centres[-1] + gaps[-1] / 2
    if not (edges[0] <= centres[0] + DOMAIN_TOL and centres[-1] <= edges[-1] + DOMAIN_TOL):
        raise ConfigError("longitude bounds do not contain their cell centres")
    for a in (order, centres, edges):
        a.flags.writeable = False
    return LonAxis(lon, order, centres, edges, bool(is_periodic))


def lat_outside(axis: LatAxis, lat: np.ndarray) -> np.ndarray:
    """Mask of latitudes outside the axis's cells."""
    lo, hi = axis.extent
    return (lat < lo - DOMAIN_TOL) | (lat > hi + DOMAIN_TOL)


def lon_outside(axis: LonAxis, lon: np.ndarray) -> np.ndarray:
    """Mask of longitudes outside the axis's cells (never, for a periodic axis)."""
    lon = np.asarray(lon, dtype=np.float64)
    if axis.periodic:
        return np.zeros(lon.shape, dtype=bool)
    lo, hi = axis.extent
    # Measured from the middle of the extent, so points just west of it are not taken for points
    # far to the east.
    mid = (lo + hi) / 2
    moved = to_frame(lon, mid - 180.0)
    return (moved < lo - DOMAIN_TOL) | (moved > hi + DOMAIN_TOL)
