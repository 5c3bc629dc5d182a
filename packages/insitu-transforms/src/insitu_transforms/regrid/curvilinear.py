"""Curvilinear sources (2-D latitude and longitude): finding target points among the source cells.

Bilinear: the source's quadrilaterals are the cells between four
neighbouring points ``(i, j), (i, j+1), (i+1, j+1), (i+1, j)`` (across the
seam too when the grid is periodic). A k-d tree of quad centres (3-D unit
vectors) proposes candidates; each is tested by inverting its bilinear map
in longitude-latitude degrees measured from the target point (longitudes
folded into ±180°, so the seam needs no care). The weights then reproduce any
field linear in latitude and longitude exactly, whatever the quad's shape.

A point in no quad (between the outer row of points and the edge of the
grid's last cells, or in a hole such as the pole of a grid that converges
there) takes an inverse-distance-squared average of the 4 nearest source
points, if it is *near* the source: within one local grid spacing (the
largest distance from the nearest source point to its grid neighbours) of a
source point. Farther points are outside the source's domain: an error.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp  # type: ignore[import-untyped]  # scipy ships no type information
from scipy.spatial import cKDTree  # type: ignore[import-untyped]  # scipy ships no type information

from insitu.plugin_api import ConfigError
from insitu_transforms.regrid.axes import wrap180
from insitu_transforms.regrid.grids import Grid
from insitu_transforms.regrid.sphere import chord_to_degrees, unit_vectors

#: Quad candidates tried per target point, nearest centre first.
_CANDIDATES = 8
#: Target points handled per vectorised step (bounds the temporary arrays).
_BATCH = 1 << 16
#: Slack on the bilinear parameters (u, v in [0, 1]): a point on a shared edge belongs to either quad.
_EPS = 1e-9


class SourcePoints:
    """The points of a curvilinear grid, searchable, with the spacing that defines "near"."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        self.tree = cKDTree(unit_vectors(*grid.points()))
        self.spacing = _local_spacing(grid)

    def check_near(self, lat: np.ndarray, lon: np.ndarray) -> None:
        """Raise ConfigError naming the first point farther than one local spacing from every source
        point (outside the source's domain)."""
        if lat.size == 0:
            return
        chord, idx = self.tree.query(unit_vectors(lat, lon), k=1)
        angle = chord_to_degrees(chord)
        far = angle > self.spacing[idx] * (1 + 1e-9) + 1e-9
        if far.any():
            at = int(np.flatnonzero(far)[0])
            raise ConfigError(
                f"target point (latitude {float(lat[at]):g}, longitude {float(lon[at]):g}) lies outside the "
                f"curvilinear source grid {self.grid.name}: the nearest source point is {float(angle[at]):.3g}° "
                f"away, farther than the grid's spacing there ({float(self.spacing[idx[at]]):.3g}°); crop the "
                "target to the source's region"
            )

    def inverse_distance(self, lat: np.ndarray, lon: np.ndarray, rows: np.ndarray) -> sp.coo_matrix:
        """Weights ``1/d²`` over the 4 nearest source points, normalised; a point on a source point
        takes it alone."""
        k = min(4, self.grid.size)
        chord, idx = self.tree.query(unit_vectors(lat, lon), k=k)
        chord, idx = chord.reshape(lat.size, k), idx.reshape(lat.size, k)
        exact = chord[:, :1] <= 1e-12
        with np.errstate(divide="ignore"):
            w = np.where(exact, np.arange(k) == 0, 1.0 / np.maximum(chord, 1e-300) ** 2)
        w = w / w.sum(axis=1, keepdims=True)
        return sp.coo_matrix(
            (w.ravel(), (np.repeat(rows, k), idx.ravel())),
            shape=(int(rows.max(initial=0)) + 1, self.grid.size),
        )


def _local_spacing(grid: Grid) -> np.ndarray:
    """Per source point, the largest great-circle distance (degrees) to its grid neighbours."""
    xyz = unit_vectors(grid.lat, grid.lon).reshape(*grid.shape, 3)
    spacing = np.zeros(grid.shape)
    along_i = chord_to_degrees(np.linalg.norm(xyz[1:] - xyz[:-1], axis=-1))
    spacing[1:] = np.maximum(spacing[1:], along_i)
    spacing[:-1] = np.maximum(spacing[:-1], along_i)
    shifted = np.roll(xyz, -1, axis=1)
    along_j = chord_to_degrees(np.linalg.norm(shifted - xyz, axis=-1))  # column j to j+1 (last: to 0)
    if not grid.periodic:
        along_j[:, -1] = 0.0
    spacing = np.maximum(spacing, along_j)
    spacing = np.maximum(spacing, np.roll(along_j, 1, axis=1))
    return spacing.ravel()


def _quads(grid: Grid) -> np.ndarray:
    """``(n_quads, 4)`` flat indices of each quad's corners, in order round the quad."""
    ny, nx = grid.shape
    rows, cols = np.meshgrid(np.arange(ny - 1), np.arange(nx if grid.periodic else nx - 1), indexing="ij")
    i, j = rows.ravel(), cols.ravel()
    j1 = (j + 1) % nx
    return np.stack([i * nx + j, i * nx + j1, (i + 1) * nx + j1, (i + 1) * nx + j], axis=-1)


def _cross(ax: np.ndarray, ay: np.ndarray, bx: np.ndarray, by: np.ndarray) -> np.ndarray:
    return ax * by - ay * bx


def inverse_bilinear(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Parameters ``(u, v)`` of the origin in the quads with corners ``x[:, k], y[:, k]`` (k = 0..3
    round the quad), and whether it lies inside: ``P(u, v) = A + u e + v f + u v g = 0``.

    Eliminating ``u`` leaves ``k2 v² + k1 v + k0 = 0``; its roots come from the
    cancellation-free form of the quadratic formula, which also covers
    ``k2 = 0`` (a parallelogram, where the equation is linear). ``u`` is then
    the least-squares solution along ``e + v g``, well defined whichever way
    the quad is oriented.
    """
    ax, ay = x[:, 0], y[:, 0]
    ex, ey = x[:, 1] - ax, y[:, 1] - ay
    fx, fy = x[:, 3] - ax, y[:, 3] - ay
    gx, gy = ax - x[:, 1] + x[:, 2] - x[:, 3], ay - y[:, 1] + y[:, 2] - y[:, 3]
    hx, hy = -ax, -ay
    k2 = _cross(gx, gy, fx, fy)
    k1 = _cross(ex, ey, fx, fy) + _cross(hx, hy, gx, gy)
    k0 = _cross(hx, hy, ex, ey)
    size = np.maximum(np.hypot(ex, ey), np.hypot(fx, fy))
    best_u, best_v = np.full(ax.shape, np.nan), np.full(ax.shape, np.nan)
    found = np.zeros(ax.shape, dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        disc = k1 * k1 - 4.0 * k0 * k2
        root = np.sqrt(np.where(disc >= 0, disc, np.nan))
        q = -0.5 * (k1 + np.copysign(root, k1))
        for v in (k0 / q, q / k2):
            mx, my = ex + v * gx, ey + v * gy
            u = ((hx - v * fx) * mx + (hy - v * fy) * my) / (mx * mx + my * my)
            rx = u * ex + v * fx + u * v * gx - hx
            ry = u * ey + v * fy + u * v * gy - hy
            ok = (
                ~found
                & (u >= -_EPS)
                & (u <= 1 + _EPS)
                & (v >= -_EPS)
                & (v <= 1 + _EPS)
                & (np.hypot(rx, ry) <= 1e-9 * size)
            )
            best_u, best_v = np.where(ok, u, best_u), np.where(ok, v, best_v)
            found |= ok
    return np.clip(best_u, 0.0, 1.0), np.clip(best_v, 0.0, 1.0), found


def curvilinear_bilinear_weights(source: Grid, target: Grid) -> sp.csr_matrix:
    """``(target.size, source.size)`` bilinear weights from a curvilinear ``source``."""
    if min(source.shape) < 2:
        raise ConfigError(
            f"bilinear regridding from a curvilinear grid needs at least 2x2 points; {source.name} has "
            f"{source.describe_shape()} (use method='nearest')"
        )
    quads = _quads(source)
    lat_flat, lon_flat = source.lat.ravel(), source.lon.ravel()
    centres = unit_vectors(lat_flat, lon_flat)[quads].mean(axis=1)
    tree = cKDTree(centres)
    k = min(_CANDIDATES, len(quads))
    tlat, tlon = target.points()
    parts_rows, parts_cols, parts_w = [], [], []
    missing = []
    for start in range(0, tlat.size, _BATCH):
        lat, lon = tlat[start : start + _BATCH], tlon[start : start + _BATCH]
        _, cand = tree.query(unit_vectors(lat, lon), k=k)
        cand = np.asarray(cand).reshape(lat.size, k)
        todo = np.arange(lat.size)
        for r in range(k):  # a few candidate ranks, each vectorised over every unresolved point
            if todo.size == 0:
                break
            corners = quads[cand[todo, r]]
            x = wrap180(lon_flat[corners] - lon[todo, None])
            y = lat_flat[corners] - lat[todo, None]
            u, v, ok = inverse_bilinear(x, y)
            hit = todo[ok]
            u, v, corners = u[ok], v[ok], corners[ok]
            w = np.stack([(1 - u) * (1 - v), u * (1 - v), u * v, (1 - u) * v], axis=-1)
            parts_rows.append(np.repeat(start + hit, 4))
            parts_cols.append(corners.ravel())
            parts_w.append(w.ravel())
            todo = todo[~ok]
        missing.append(start + todo)
    weights = sp.coo_matrix(
        (np.concatenate(parts_w), (np.concatenate(parts_rows), np.concatenate(parts_cols))),
        shape=(target.size, source.size),
    ).tocsr()
    left = np.concatenate(missing)
    if left.size:
        points = SourcePoints(source)
        points.check_near(tlat[left], tlon[left])
        fallback = points.inverse_distance(tlat[left], tlon[left], left).tocsr()
        fallback.resize((target.size, source.size))
        weights = weights + fallback
    weights = sp.csr_matrix(weights)
    weights.eliminate_zeros()
    return weights
