"""Horizontal grids: what a field's last two axes mean on the sphere.

A :class:`Grid` is either *rectilinear* (1-D latitude × 1-D longitude, any
spacing, either direction: regular, Gaussian, a regional box) or
*curvilinear* (2-D latitude and longitude arrays of one shape: rotated-pole,
tripolar, swaths). Values are in degrees; cells are stored in C order, the
latitude (or first) axis before the longitude (or second) axis.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from insitu.plugin_api import ConfigError
from insitu_transforms.regrid.axes import LatAxis, LonAxis, lat_axis, lon_axis
from insitu_transforms.regrid.sphere import unit_vectors

if TYPE_CHECKING:
    from insitu.plugin_api import ArrayGeometry

#: Dimension names recognised as latitude and longitude, in order of preference.
LAT_NAMES = ("latitude", "lat")
LON_NAMES = ("longitude", "lon")

_RESOLUTION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(?:deg|degrees?|°)?\s*$", re.IGNORECASE)


def parse_resolution(resolution: str | float) -> float:
    """Degrees from ``"1.5deg"``, ``"5.625deg"``, ``"1°"``, ``"0.25"`` or a number; the spacing must
    divide 180° into whole rows."""
    if isinstance(resolution, str):
        found = _RESOLUTION.match(resolution)
        if found is None:
            raise ConfigError(f"bad grid resolution {resolution!r}: give degrees, like '1.5deg' or 0.25")
        res = float(found.group(1))
    elif isinstance(resolution, (int, float, np.integer, np.floating)) and not isinstance(resolution, bool):
        res = float(resolution)
    else:
        raise ConfigError(f"bad grid resolution {resolution!r}: give degrees, like '1.5deg' or 0.25")
    if not math.isfinite(res) or res <= 0 or res > 180:
        raise ConfigError(f"bad grid resolution {resolution!r}: it must be more than 0° and at most 180°")
    rows = 180.0 / res
    if abs(rows - round(rows)) > 1e-9 * rows:
        raise ConfigError(
            f"bad grid resolution {resolution!r}: {res}° does not divide 180° into whole rows "
            f"(180 / {res} = {rows:.6g}); choose one that does, like 1.5, 1.40625 or 5.625"
        )
    return res


class Grid:
    """A horizontal grid. Build one with :meth:`regular`, :meth:`from_coords` or :meth:`from_geometry`.

    ``periodic`` says whether the longitude (for a curvilinear grid, the second
    axis) wraps round the globe; ``None`` detects it from the spacing. The
    grid is immutable; its :attr:`digest` names it in weight caches and
    transform fingerprints.
    """

    lat: np.ndarray
    lon: np.ndarray
    curvilinear: bool
    periodic: bool
    name: str

    def __init__(
        self,
        lat: Any,
        lon: Any,
        *,
        lat_bounds: Any = None,
        lon_bounds: Any = None,
        periodic: bool | None = None,
        name: str | None = None,
    ) -> None:
        lat_arr, lon_arr = np.asarray(lat), np.asarray(lon)
        self._lat_axis: LatAxis | None = None
        self._lon_axis: LonAxis | None = None
        if lat_arr.ndim == 1 and lon_arr.ndim == 1:
            self._lat_axis = lat_axis(lat_arr, lat_bounds)
            self._lon_axis = lon_axis(lon_arr, lon_bounds, periodic)
            self.lat, self.lon = self._lat_axis.values, self._lon_axis.values
            self.curvilinear, self.periodic = False, self._lon_axis.periodic
        elif lat_arr.ndim == 2 and lon_arr.ndim == 2:
            if lat_bounds is not None or lon_bounds is not None:
                raise ConfigError("cell bounds are taken for 1-D latitude and longitude only")
            self.lat, self.lon = _curvilinear_coords(lat_arr, lon_arr)
            self.curvilinear = True
            self.periodic = _curvilinear_periodic(self.lat, self.lon) if periodic is None else bool(periodic)
        else:
            raise ConfigError(
                "latitude and longitude must both be 1-D (a rectilinear grid) or both 2-D of one shape "
                f"(a curvilinear grid), got shapes {lat_arr.shape} and {lon_arr.shape}"
            )
        self.name = name or f"{'curvilinear' if self.curvilinear else 'rectilinear'} {self.describe_shape()}"
        self._digest = self._compute_digest()

    # -- constructors ---------------------------------------------------------------------------
    @classmethod
    def regular(
        cls,
        resolution: str | float,
        *,
        poles: bool = False,
        descending: bool = False,
        lon_start: float = 0.0,
    ) -> Grid:
        """A global regular latitude-longitude grid of ``resolution`` degrees (``"1deg"``,
        ``"1.5deg"``, ``"5.625deg"``, or a number).

        ``poles=False`` (default) gives cell centres: latitudes from
        ``-90 + res/2`` to ``90 - res/2`` (``180/res`` rows; WeatherBench2's
        "equiangular without poles", e.g. 32x64 at 5.625°), cells tiling the
        sphere from pole to pole. ``poles=True`` puts rows on the poles:
        ``-90, -90 + res, ..., 90`` (``180/res + 1`` rows, e.g. ERA5's 721 at
        0.25°, WeatherBench2's 121x240 at 1.5°), the polar cells half as tall.
        Longitudes are ``lon_start, lon_start + res, ...`` (``360/res``
        columns; ``lon_start=-180`` for -180–180). ``descending=True`` lists
        latitudes north to south, as ERA5 does.
        """
        res = parse_resolution(resolution)
        rows = round(180.0 / res)
        # linspace keeps the edges exact multiples of the spacing, without accumulated rounding.
        lat_edges = np.linspace(-90.0, 90.0, rows + 1)
        if poles:
            lat, lat_bounds = lat_edges, None
        else:
            lat, lat_bounds = (lat_edges[:-1] + lat_edges[1:]) / 2, lat_edges
        if descending:
            lat = lat[::-1]
            lat_bounds = None if lat_bounds is None else lat_bounds[::-1]
        lon = float(lon_start) + np.linspace(0.0, 360.0, 2 * rows + 1)[:-1]
        label = f"regular {res:g}deg{', poles' if poles else ''}{', north first' if descending else ''}"
        return cls(lat, lon, lat_bounds=lat_bounds, periodic=True, name=label)

    @classmethod
    def from_coords(
        cls,
        lat: Any,
        lon: Any,
        *,
        lat_bounds: Any = None,
        lon_bounds: Any = None,
        periodic: bool | None = None,
        name: str | None = None,
    ) -> Grid:
        """A grid from coordinate values in degrees.

        1-D ``lat`` and ``lon`` make a rectilinear grid of shape
        ``(len(lat), len(lon))``: latitudes strictly monotonic (any spacing:
        Gaussian, irregular; north-first or south-first), longitudes monotonic
        modulo 360 (0–360, -180–180, or a box across the antimeridian). Cell
        edges default to midpoints (see :func:`~.axes.lat_axis`); give
        ``lat_bounds`` / ``lon_bounds`` as ``n + 1`` edges or CF ``(n, 2)``
        pairs to override. 2-D ``lat`` and ``lon`` of one shape make a
        curvilinear grid (bilinear and nearest only).
        """
        return cls(lat, lon, lat_bounds=lat_bounds, lon_bounds=lon_bounds, periodic=periodic, name=name)

    @classmethod
    def from_geometry(cls, geom: ArrayGeometry, dims: tuple[str, str] | None = None) -> Grid:
        """The grid of an array, from its coordinate values as delivered (selections applied).

        ``dims`` names the latitude and longitude dimensions; by default the
        first delivered dimensions called ``latitude``/``lat`` and
        ``longitude``/``lon``.
        """
        lat_dim, lon_dim = dims if dims is not None else find_lat_lon_dims(geom)
        values = []
        for dim in (lat_dim, lon_dim):
            if dim not in geom.delivered_dims:
                raise ConfigError(
                    f"array {geom.name!r} delivers no dimension {dim!r} (delivered: {list(geom.delivered_dims)})"
                )
            coord = geom.coord(dim)
            if coord is None:
                raise ConfigError(
                    f"array {geom.name!r} has no coordinate values for {dim!r} in its store; "
                    "build the grid with Grid.from_coords(lat, lon)"
                )
            values.append(coord)
        return cls(values[0], values[1], name=f"{geom.name!r} ({lat_dim}, {lon_dim})")

    # -- description -----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        """The grid's shape: ``(n_lat, n_lon)``, or the 2-D coordinates' shape."""
        if self.curvilinear:
            ny, nx = self.lat.shape
            return int(ny), int(nx)
        return int(self.lat.size), int(self.lon.size)

    @property
    def size(self) -> int:
        """Number of cells."""
        ny, nx = self.shape
        return ny * nx

    @property
    def digest(self) -> str:
        """A hex digest of the coordinates, bounds and periodicity: equal grids, equal digests, in
        every process."""
        return self._digest

    @property
    def lat_axis(self) -> LatAxis:
        """The latitude axis of a rectilinear grid."""
        if self._lat_axis is None:
            raise ConfigError(f"grid {self.name} is curvilinear: it has no 1-D latitude axis")
        return self._lat_axis

    @property
    def lon_axis(self) -> LonAxis:
        """The longitude axis of a rectilinear grid."""
        if self._lon_axis is None:
            raise ConfigError(f"grid {self.name} is curvilinear: it has no 1-D longitude axis")
        return self._lon_axis

    def describe_shape(self) -> str:
        """``"32x64"``."""
        ny, nx = self.shape
        return f"{ny}x{nx}"

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """Latitude and longitude of every cell centre, flattened in C order."""
        if self.curvilinear:
            return self.lat.ravel(), self.lon.ravel()
        lat, lon = np.meshgrid(self.lat, self.lon, indexing="ij")
        return lat.ravel(), lon.ravel()

    def _compute_digest(self) -> str:
        h = hashlib.sha256()
        h.update(f"grid/1|{'curvilinear' if self.curvilinear else 'rectilinear'}|{self.shape}|".encode())
        h.update(f"periodic={self.periodic}|".encode())
        h.update(np.ascontiguousarray(self.lat, dtype="<f8").tobytes())
        h.update(np.ascontiguousarray(self.lon, dtype="<f8").tobytes())
        if not self.curvilinear:
            # Edges decide conservative weights; explicit bounds make another grid than midpoints.
            h.update(np.ascontiguousarray(self.lat_axis.edges, dtype="<f8").tobytes())
            h.update(np.ascontiguousarray(self.lon_axis.edges, dtype="<f8").tobytes())
        return h.hexdigest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Grid) and other._digest == self._digest

    def __hash__(self) -> int:
        return hash(self._digest)

    def __repr__(self) -> str:
        scope = "global" if self.periodic else "regional"
        return f"Grid({self.name}: {self.describe_shape()}, {scope} in longitude)"


def find_lat_lon_dims(geom: ArrayGeometry) -> tuple[str, str]:
    """The delivered latitude and longitude dimension names of an array (``latitude``/``lat``,
    ``longitude``/``lon``, any case)."""
    dims = [d for d in geom.delivered_dims if d is not None]
    found = []
    for names in (LAT_NAMES, LON_NAMES):
        hit = next((d for n in names for d in dims if d.lower() == n), None)
        if hit is None:
            raise ConfigError(
                f"array {geom.name!r} delivers no dimension named {' or '.join(names)} "
                f"(delivered: {list(geom.delivered_dims)}); name them with dims=(lat_dim, lon_dim)"
            )
        found.append(hit)
    return found[0], found[1]


def _curvilinear_coords(lat: np.ndarray, lon: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if lat.shape != lon.shape:
        raise ConfigError(f"2-D latitude {lat.shape} and longitude {lon.shape} must have one shape")
    out = []
    for name, arr in (("latitude", lat), ("longitude", lon)):
        values = np.array(arr, dtype=np.float64)
        if not np.isfinite(values).all():
            raise ConfigError(
                f"curvilinear {name} holds a non-finite value ({values[~np.isfinite(values)][0]})"
            )
        values.flags.writeable = False
        out.append(values)
    if np.abs(out[0]).max() > 90 + 1e-6:
        raise ConfigError(f"latitude {out[0].flat[np.argmax(np.abs(out[0]))]} lies beyond the poles (±90)")
    return out[0], out[1]


def _curvilinear_periodic(lat: np.ndarray, lon: np.ndarray) -> bool:
    """Whether the second axis wraps round: in every row, the step from the last column back to the
    first is no longer than 1.5 times the steps beside it."""
    if lat.shape[1] < 3:
        return False
    xyz = unit_vectors(lat, lon).reshape(*lat.shape, 3)
    seam = np.linalg.norm(xyz[:, -1] - xyz[:, 0], axis=-1)
    beside = np.maximum(
        np.linalg.norm(xyz[:, 1] - xyz[:, 0], axis=-1), np.linalg.norm(xyz[:, -1] - xyz[:, -2], axis=-1)
    )
    return bool((seam <= 1.5 * beside + 1e-12).all())
