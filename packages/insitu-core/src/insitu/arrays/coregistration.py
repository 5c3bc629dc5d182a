"""Arrays at other resolutions than the reference array: how their indices map onto its indices.

An image and its labels often live at different resolutions (OME-NGFF
``multiscales`` pyramids: labels at scale 2 or 4). Each array carries the
physical size of one index per axis (:attr:`ArrayGeometry.spacing`, 1 when not
given); the *index scale* of an array against the reference is
``reference spacing / array spacing`` per axis, as an exact fraction: 1/2 for
labels at half the resolution, 2 for a mask at twice it. A patch placed at
reference origin ``o`` with size ``s`` reads, in an array of index scale ``k``,
the box ``floor(o * k) .. floor(o * k) + s * k``: labels at half resolution
give a half-size patch at half the origin.

An array is on the reference's grid when its length along each axis is the
reference's length times its scale, rounded either way (pyramids round odd
lengths up or down), and its scale along the sample axis is 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from insitu.arrays.geometry import ArrayGeometry
from insitu.errors import ConfigError

Scale = tuple[Fraction, ...]

__all__ = ["Scale", "check_on_grid", "index_scale", "scale_extent", "scale_origins"]

#: Spacings are decimal numbers in metadata (0.1625 micrometres): exact ratios of them are
#: fractions with denominators far below this.
_MAX_DENOMINATOR = 10**6


def index_scale(reference: ArrayGeometry, geom: ArrayGeometry) -> Scale:
    """Indices of ``geom`` per index of ``reference``, per axis (1 where neither gives a spacing)."""
    ndim = len(geom.shape)
    ref = reference.spacing or (1.0,) * len(reference.shape)
    own = geom.spacing or (1.0,) * ndim
    if len(ref) != ndim:
        return (Fraction(1),) * ndim  # another number of axes: refused by check_on_grid
    return tuple(
        (Fraction(str(r)) / Fraction(str(a))).limit_denominator(_MAX_DENOMINATOR)
        for r, a in zip(ref, own, strict=True)
    )


def check_on_grid(reference: ArrayGeometry, geom: ArrayGeometry) -> Scale:
    """The index scale of ``geom``, after refusing (naming the array, its shape and spacing) an
    array that is not on the reference's grid at that scale."""
    scale = index_scale(reference, geom)
    same_axes = len(geom.shape) == len(reference.shape) and geom.sample_axis == reference.sample_axis
    fits = same_axes and all(
        n in (math.floor(r * k), math.ceil(r * k))
        for n, r, k in zip(geom.shape, reference.shape, scale, strict=True)
    )
    if not fits or (same_axes and scale[reference.sample_axis] != 1):
        spacing = (
            ""
            if geom.spacing is None and reference.spacing is None
            else (f" (spacing {list(geom.spacing or ())} against {list(reference.spacing or ())})")
        )
        raise ConfigError(
            f"array {geom.name!r} (shape {tuple(geom.shape)}, sample axis {geom.sample_axis}) is not on the "
            f"grid of {reference.name!r} (shape {tuple(reference.shape)}, sample axis {reference.sample_axis})"
            f"{spacing}; arrays sampled together in patches must have the same shape, or one scaled by their "
            "spacing (geom.with_spacing(y=2, x=2) for labels at half the resolution; OME-NGFF levels carry "
            "theirs), and the same sample axis at the same spacing"
        )
    return scale


def scale_origins(origins: np.ndarray, scale: Scale) -> np.ndarray:
    """Reference origins (one row per patch) as origins in an array of index scale ``scale``."""
    if all(k == 1 for k in scale):
        return origins
    out = origins.copy()
    for d, k in enumerate(scale):
        if k != 1:
            out[:, d] = (origins[:, d] * k.numerator) // k.denominator
    return out


def scale_extent(extent: Sequence[int] | np.ndarray, scale: Scale) -> np.ndarray:
    """Lengths in reference indices as lengths in an array of index scale ``scale``, rounded up
    (a partly valid element is valid)."""
    arr = np.asarray(extent, dtype=np.int64)
    out = arr.copy()
    for d, k in enumerate(scale):
        if k != 1:
            out[..., d] = -((-arr[..., d] * k.numerator) // k.denominator)
    return out
