"""First-order conservative weights between rectilinear grids, exact on the sphere.

A latitude-longitude cell's area on the unit sphere is
``(sin(lat_hi) - sin(lat_lo)) * (lon_hi - lon_lo)`` (longitude in radians),
and the overlap of two such cells is again such a cell: the overlap of their
bands in ``sin(lat)`` times the overlap of their longitude intervals (taken
modulo 360). Both factors are separable, so the 2-D weights are the
Kronecker product of a latitude matrix and a longitude matrix, each row
normalised by the part of the target cell that source cells cover. Where the
source covers a target cell whole (always, between global grids) that is the
target cell's area, and the area-weighted sum over the sphere is preserved.
Polar cells need no special case: their edge is clipped at ±90°.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp  # type: ignore[import-untyped]  # scipy ships no type information

from insitu_transforms.regrid.axes import LatAxis, LonAxis
from insitu_transforms.regrid.grids import Grid

#: Longitude overlaps below this many degrees are rounding noise from moving an interval by 360°
#: (about 1e-13°), not a real overlap; real cells are many orders of magnitude wider.
_LON_NOISE = 1e-9


def _candidate_pairs(
    source_edges: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Every (target, source) pair whose intervals may overlap, for ascending ``source_edges`` and
    target intervals ``[lo, hi]``: a range of source cells per target, expanded without a loop."""
    n = source_edges.size - 1
    first = np.clip(np.searchsorted(source_edges, lo, side="right") - 1, 0, n - 1)
    stop = np.clip(np.searchsorted(source_edges, hi, side="left"), 0, n)
    counts = np.maximum(stop - first, 0)
    rows = np.repeat(np.arange(lo.size), counts)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    cols = first[rows] + (np.arange(rows.size) - starts)
    return rows, cols


def _normalised(
    rows: np.ndarray, cols: np.ndarray, overlap: np.ndarray, shape: tuple[int, int]
) -> sp.csr_matrix:
    keep = overlap > 0
    m = sp.coo_matrix((overlap[keep], (rows[keep], cols[keep])), shape=shape).tocsr()
    covered = np.asarray(m.sum(axis=1)).ravel()
    # Divided rather than scaled by a reciprocal: a cell alone in its row gets exactly 1.
    m.data = m.data / np.repeat(covered, np.diff(m.indptr))
    return m


def lat_overlaps(source: LatAxis, target: LatAxis) -> sp.csr_matrix:
    """``(n_target, n_source)``: the share of each target band's covered area in each source band."""
    s = np.sin(np.radians(source.edges))
    t = np.sin(np.radians(target.edges))
    rows, cols = _candidate_pairs(s, t[:-1], t[1:])
    overlap = np.minimum(t[1:][rows], s[1:][cols]) - np.maximum(t[:-1][rows], s[:-1][cols])
    m = _normalised(rows, cols, overlap, (target.centres.size, source.centres.size))
    return _stored_order(m, target.order, source.order)


def lon_overlaps(source: LonAxis, target: LonAxis) -> sp.csr_matrix:
    """``(n_target, n_source)``: the share of each target interval's covered length in each source
    interval, modulo 360."""
    n = source.centres.size
    edges = source.edges
    lo, hi = target.edges[:-1], target.edges[1:]
    if source.periodic:
        # Each target interval moved to start within [edges[0], edges[0] + 360), against the source
        # laid out twice round: every overlap is then found once.
        shift = 360.0 * np.floor((lo - edges[0]) / 360.0)
        lo, hi = lo - shift, hi - shift
        laid = np.concatenate([edges[:-1], edges[:-1] + 360.0, edges[-1:] + 360.0])
    else:
        # Each target interval moved so its middle lies within 180° of the source's middle.
        middle = (edges[0] + edges[-1]) / 2
        shift = 360.0 * np.floor(((lo + hi) / 2 - middle + 180.0) / 360.0)
        lo, hi = lo - shift, hi - shift
        laid = edges
    rows, cols = _candidate_pairs(laid, lo, hi)
    overlap = np.minimum(hi[rows], laid[1:][cols]) - np.maximum(lo[rows], laid[:-1][cols])
    overlap[overlap < _LON_NOISE] = 0.0
    m = _normalised(rows, cols % n, overlap, (target.centres.size, n))
    return _stored_order(m, target.order, source.order)


def _stored_order(m: sp.csr_matrix, target_order: np.ndarray, source_order: np.ndarray) -> sp.csr_matrix:
    """Rows and columns moved from ascending positions to the grids' stored indices."""
    coo = m.tocoo()
    out = sp.coo_matrix((coo.data, (target_order[coo.row], source_order[coo.col])), shape=m.shape).tocsr()
    out.sort_indices()
    return out


def conservative_weights(source: Grid, target: Grid) -> sp.csr_matrix:
    """``(target.size, source.size)`` area-conservative weights between rectilinear grids (a
    curvilinear grid is refused by :func:`~.weights.check_pair` first)."""
    wlat = lat_overlaps(source.lat_axis, target.lat_axis)
    wlon = lon_overlaps(source.lon_axis, target.lon_axis)
    return sp.kron(wlat, wlon, format="csr")
