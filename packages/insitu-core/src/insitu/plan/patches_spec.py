"""What a patch is: its size and stride per dimension, how it is placed, and what it does at an edge.

A :class:`PatchSpec` is what the user asks for, by dimension name; resolved
against the reference array (:meth:`PatchSpec.resolve`) it becomes a
:class:`PatchGrid`: one :class:`AxisPositions` per axis of that array, each an
arithmetic rule ``origin(k)`` for the ``k``-th patch position along the axis.
A patch position is one index ``k_d`` per axis; the grid of positions is their
product, numbered in C order (:meth:`PatchGrid.origins`). No list of positions
is ever built: 4.2 million positions are two rules of 2,048 each.

Per axis of extent ``n``, with patch size ``s`` and stride ``t``::

    drop   0   t   2t  ...  (m-1)t              m = (n - s) // t + 1 complete patches
    shift  0   t   2t  ...  (m-1)t   n - s      the last patch moved inward to end at n
    pad    0   t   2t  ...  (m-1)t   m*t        runs past n; the valid extent is n - m*t
                                               (added only when it starts before n: with
                                               t > s the gaps may leave it out)

``shift`` (the default) and ``pad`` cover every element (when ``t <= s``);
``drop`` leaves the last ``n - (m-1)t - s`` elements out and must be asked for.
A patch larger than its dimension is an error under ``shift`` and ``drop``; under
``pad`` it is one patch, padded (its valid extent is the dimension). A stride
larger than the size leaves gaps between patches, by request.

Dimensions the patch does not name keep their whole extent (one position, the
patch is the axis), except the sample dimension, whose patches are one index
(size 1, stride 1: every sample is a position) unless named. So today's samples
are the patch ``{}``.

``"random"`` sampling draws positions uniformly from the same grid; its stride
defaults to 1 (every origin where the patch fits) rather than to the size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitu.arrays.geometry import ArrayGeometry, is_integer
from insitu.errors import ConfigError

EDGES = ("shift", "pad", "drop")
SAMPLINGS = ("grid", "random")
#: Keeps every position count, and every product of them, exact in int64.
_MAX_EXTENT = 2**62


@dataclass(frozen=True)
class AxisPositions:
    """The patch positions along one axis: ``origin(k) = start + k * stride``, and under
    ``shift`` at most ``stop - size`` (the last patch moved inward).

    ``length`` is the array's extent along the axis (what a padded patch is valid up to);
    ``[start, stop)`` bounds where patches are placed (the whole axis, or the anchors a window
    leaves on the sample axis).
    """

    length: int
    size: int
    stride: int
    count: int
    start: int
    stop: int
    shifted: bool = False

    @property
    def clamp(self) -> int | None:
        """The largest offset of an origin from ``start`` under ``shift``; None otherwise."""
        return self.stop - self.start - self.size if self.shifted else None

    @classmethod
    def of(
        cls, length: int, size: int, stride: int, edge: str, span: tuple[int, int] | None = None
    ) -> AxisPositions:
        """The positions of patches of ``size`` every ``stride`` inside ``span`` (default: the
        whole axis of ``length``) under the edge policy ``edge``; see the module docstring."""
        start, stop = span if span is not None else (0, length)
        n = stop - start
        if n <= 0:
            return cls(length, size, stride, 0, start, stop)
        if size > n:  # only "pad" gets here (resolve refuses the others): one padded patch
            return cls(length, size, stride, 1, start, stop)
        complete = (n - size) // stride + 1
        if edge == "drop":
            return cls(length, size, stride, complete, start, stop)
        if edge == "shift":
            extra = (complete - 1) * stride + size < n
            return cls(length, size, stride, complete + extra, start, stop, shifted=True)
        # pad: up to the first patch that reaches the end, never one starting past it (gaps)
        count = min(-(-(n - size) // stride) + 1, -(-n // stride))
        return cls(length, size, stride, count, start, stop)

    def origins(self, k: np.ndarray) -> np.ndarray:
        """The first element of positions ``k`` (int64)."""
        rel = np.asarray(k, dtype=np.int64) * self.stride
        clamp = self.clamp
        if clamp is not None:
            rel = np.minimum(rel, clamp)
        return rel + self.start

    def all_origins(self) -> np.ndarray:
        """The origins of every position, in order (``count`` of them; monotone non-decreasing)."""
        return self.origins(np.arange(self.count, dtype=np.int64))

    def count_below(self, x: np.ndarray) -> np.ndarray:
        """How many positions have their origin before element ``x`` (for each ``x``): the
        positions a region ``[x0, x1)`` holds are ``count_below(x0) .. count_below(x1)``."""
        rel = np.asarray(x, dtype=np.int64) - self.start
        below = np.minimum(np.maximum(-(-rel // self.stride), 0), self.count)
        clamp = self.clamp
        if clamp is not None:  # the shifted last position sits at clamp, before its k * stride
            below = np.where(rel > clamp, self.count, below)
        return below

    def valid_extent(self, origins: np.ndarray) -> np.ndarray:
        """Elements of each patch inside the array, or the part of it patches are placed in
        (``size`` but where ``pad`` runs past the end)."""
        return np.minimum(self.size, self.stop - np.asarray(origins, dtype=np.int64))

    @property
    def whole(self) -> bool:
        """Whether the one patch is the whole axis (a dimension the patch does not name, or a
        patch as long as it): regions then span the axis too."""
        return self.count == 1 and self.size >= self.length and self.start == 0


@dataclass(frozen=True)
class PatchGrid:
    """Every patch position of one reference array: the product of its axes' positions.

    A position is numbered in C order over ``counts``; :meth:`origins` turns numbers into
    origins (one row per patch, one column per axis of the array), which is what a batch carries
    as ``patch_origins``.
    """

    shape: tuple[int, ...]
    axes: tuple[AxisPositions, ...]
    dims: tuple[str | None, ...]
    sample_axis: int
    edge: str
    named: tuple[int, ...]  # the axes the patch names, in the user's order
    #: Per axis, the source indices a patch reads when a list selection picks them along an axis
    #: the patch does not name (None: the run of the patch's box).
    picks: tuple[np.ndarray | None, ...] = ()
    dropped: tuple[int, ...] = ()  # axes an integer selection drops from the delivered patch

    @property
    def ndim(self) -> int:
        """Number of axes of the reference array."""
        return len(self.axes)

    @property
    def counts(self) -> tuple[int, ...]:
        """Positions per axis."""
        return tuple(a.count for a in self.axes)

    @property
    def n_positions(self) -> int:
        """Number of patch positions (the product of :attr:`counts`)."""
        return math.prod(self.counts)

    @property
    def patch_shape(self) -> tuple[int, ...]:
        """Shape of one patch over every axis of the reference array (1 along an unnamed sample axis)."""
        return tuple(a.size for a in self.axes)

    @property
    def delivered_axes(self) -> tuple[int, ...]:
        """The axes a batch row of a patch holds: every axis but the sample axis, which only when
        the patch names it."""
        keep = self.sample_axis in self.named
        return tuple(d for d in range(self.ndim) if (d != self.sample_axis or keep) and d not in self.dropped)

    @property
    def read_shape(self) -> tuple[int, ...]:
        """What a patch reads on every axis: :attr:`patch_shape`, but the picked indices' count
        along an axis a list selection picks."""
        picks = self.picks or (None,) * self.ndim
        return tuple(a.size if p is None else len(p) for a, p in zip(self.axes, picks, strict=True))

    @property
    def delivered_shape(self) -> tuple[int, ...]:
        """The shape of a batch row of a patch: :attr:`read_shape` over :attr:`delivered_axes`."""
        read = self.read_shape
        return tuple(read[d] for d in self.delivered_axes)

    def unravel(self, positions: np.ndarray) -> tuple[np.ndarray, ...]:
        """The per-axis indices ``k_d`` of position numbers."""
        return tuple(np.unravel_index(np.asarray(positions, dtype=np.int64), self.counts))

    def origins(self, positions: np.ndarray) -> np.ndarray:
        """The origins of position numbers: int64, shape ``(len(positions), ndim)``."""
        ks = self.unravel(positions)
        out = np.empty((len(ks[0]), self.ndim), dtype=np.int64)
        for d, (axis, k) in enumerate(zip(self.axes, ks, strict=True)):
            out[:, d] = axis.origins(k)
        return out

    def valid_extent(self, origins: np.ndarray) -> np.ndarray:
        """Per patch and axis, the elements inside the array: the mask a ``pad`` patch carries is
        ``index < valid_extent`` along each axis. Equal to :attr:`patch_shape` but for ``pad``."""
        origins = np.asarray(origins, dtype=np.int64)
        out = np.empty_like(origins)
        for d, axis in enumerate(self.axes):
            out[:, d] = axis.valid_extent(origins[:, d])
        return out


@dataclass(frozen=True)
class PatchSpec:
    """A patch as the user gives it, validated: sizes and strides by dimension name (or axis number).

    ``size`` maps dimensions to patch sizes; dimensions not named keep their whole extent and
    the sample dimension has size 1 unless named. ``stride`` (default: the size, no overlap;
    1 for ``"random"``) may name only dimensions that ``size`` names. ``sampling`` is ``"grid"``
    (every position once per epoch) or ``"random"`` (``patches_per_epoch`` positions drawn
    uniformly; by default as many as the non-overlapping grid has). ``edge`` is ``"shift"``,
    ``"pad"`` or ``"drop"`` (see the module docstring). Every bad value is a
    :class:`~insitu.errors.ConfigError` naming it.
    """

    size: Mapping[str | int, int]
    stride: Mapping[str | int, int] | None = None
    sampling: str = "grid"
    patches_per_epoch: int | None = None
    edge: str = "shift"

    def __post_init__(self) -> None:
        object.__setattr__(self, "size", _sizes("patch", self.size))
        if self.stride is not None:
            stride = _sizes("patch_stride", self.stride)
            unknown = [d for d in stride if d not in self.size]
            if unknown:
                raise ConfigError(
                    f"patch_stride names {unknown}, which the patch does not (patch dimensions: "
                    f"{list(self.size)}); a dimension the patch does not name has one position"
                )
            object.__setattr__(self, "stride", stride)
        if self.sampling not in SAMPLINGS:
            raise ConfigError(f"patch_sampling={self.sampling!r}; expected one of {list(SAMPLINGS)}")
        if self.edge not in EDGES:
            raise ConfigError(f"patch_edge={self.edge!r}; expected one of {list(EDGES)}")
        if self.patches_per_epoch is not None:
            if self.sampling != "random":
                raise ConfigError(
                    f"patches_per_epoch={self.patches_per_epoch!r} needs patch_sampling='random' "
                    f"(got {self.sampling!r}): a grid delivers each of its positions once per epoch"
                )
            n = self.patches_per_epoch
            if not is_integer(n) or n < 1 or n > _MAX_EXTENT:
                raise ConfigError(f"patches_per_epoch must be a positive integer, got {n!r}")
            object.__setattr__(self, "patches_per_epoch", int(n))

    def stride_of(self, dim: str | int) -> int:
        """The stride along a named dimension: as given, else the size (grid) or 1 (random)."""
        if self.stride is not None and dim in self.stride:
            return self.stride[dim]
        return self.size[dim] if self.sampling == "grid" else 1

    def resolve(self, geom: ArrayGeometry, *, sample_span: tuple[int, int] | None = None) -> PatchGrid:
        """The positions of this patch on ``geom`` (the reference array).

        ``sample_span`` (half-open) bounds the origins along the sample axis, for the anchors a
        window leaves (:func:`insitu.plan.anchors.anchor_range`); a patch longer than one sample
        along it must fit inside the span too. A selection of ``geom`` bounds the others: a run
        of indices (a ``slice``, a coordinate range) places patches inside it on an axis the patch
        names, and is the patch's whole extent on one it does not; a list of indices or one index
        (dropped) is read as picked on an axis the patch does not name. Origins stay indices of
        the stored array.
        """
        names = _dimension_names(geom)
        spans, picks, dropped = _selection_spans(geom, self.size, names)
        axes_of: dict[int, str | int] = {}
        for dim in self.size:
            axis = _axis_of(geom, names, dim)
            if axis in axes_of:
                raise ConfigError(f"patch names axis {axis} twice ({axes_of[axis]!r} and {dim!r})")
            axes_of[axis] = dim
        axes = []
        for d, n in enumerate(geom.shape):
            span = sample_span if d == geom.sample_axis else spans.get(d)
            if d in axes_of:
                dim = axes_of[d]
                size, stride = self.size[dim], self.stride_of(dim)
                room = n if span is None else span[1] - span[0]
                if size > room and self.edge != "pad":
                    where = "" if span is None else f" (its origins are bounded to {list(span)})"
                    raise ConfigError(
                        f"patch size {size} along {_label(dim, names, d)} is larger than the dimension "
                        f"({room} of array {geom.name!r}{where}); give patch_edge='pad' to pad it, or a "
                        f"smaller patch"
                    )
            elif d == geom.sample_axis:
                size, stride = 1, 1
            elif span is not None:  # the selected run (or the runs spanning picked indices) whole
                size = stride = span[1] - span[0]
            else:
                size, stride = n, n
            axes.append(AxisPositions.of(n, size, stride, self.edge, span))
        named = tuple(axes_of)
        return PatchGrid(
            tuple(geom.shape), tuple(axes), names, geom.sample_axis, self.edge, named, picks, dropped
        )

    def epoch_draws(self, grid: PatchGrid, positions: int | None = None) -> int:
        """Patches a random epoch draws: ``patches_per_epoch``, or by default the number of
        positions of the non-overlapping grid over the same array (one epoch ~ the array once),
        in proportion to the ``positions`` of the grid a split holds (default: all of them), so a
        validation split of a quarter of the array draws a quarter as many."""
        if self.patches_per_epoch is not None:
            return self.patches_per_epoch
        per_axis = [max(1, (a.stop - a.start) // a.size) if a.count else 0 for a in grid.axes]
        whole = max(1, math.prod(per_axis))
        if positions is None or grid.n_positions == 0:
            return whole
        return max(1, -(-whole * positions // grid.n_positions))


def _selection_spans(
    geom: ArrayGeometry, size: Mapping[str | int, int], names: tuple[str | None, ...]
) -> tuple[dict[int, tuple[int, int]], tuple[np.ndarray | None, ...], tuple[int, ...]]:
    """Per axis of ``geom`` with a selection: the span patches are placed in, the indices picked
    (list selections) and the axes dropped (one index). A patch named along an axis it cannot be
    placed on as one run is refused by name."""
    spans: dict[int, tuple[int, int]] = {}
    picks: list[np.ndarray | None] = [None] * len(geom.shape)
    dropped = []
    named_axes = {_axis_of(geom, names, d) for d in size}
    for d in range(len(geom.shape)):
        chosen = geom.axis_selection(d)
        if chosen is None or d == geom.sample_axis:
            continue
        idx = chosen.array
        run = bool((np.diff(idx) == 1).all())
        if d in named_axes and (not chosen.keep or not run):
            what = "one index" if not chosen.keep else "a list of indices that is not one ascending run"
            raise ConfigError(
                f"array {geom.name!r} selects {what} along {_label(names[d] or d, names, d)}, which the patch names; "
                "a patch is placed inside a run of indices: select a range there (a slice), or do "
                "not name that dimension in patch="
            )
        spans[d] = (int(idx.min()), int(idx.max()) + 1)
        if not run:
            picks[d] = idx
        if not chosen.keep:
            dropped.append(d)
    return spans, tuple(picks), tuple(dropped)


def _sizes(what: str, given: Any) -> dict[str | int, int]:
    if not isinstance(given, Mapping):
        raise ConfigError(
            f"{what} must map dimension names to sizes, e.g. {{'y': 256, 'x': 256}}; got {given!r}"
        )
    out: dict[str | int, int] = {}
    for dim, value in given.items():
        if not (isinstance(dim, str) or is_integer(dim)):
            raise ConfigError(f"{what} keys must be dimension names or axis numbers, got {dim!r}")
        if not is_integer(value) or value < 1 or value > _MAX_EXTENT:
            raise ConfigError(f"{what}[{dim!r}] must be a positive integer, got {value!r}")
        out[dim if isinstance(dim, str) else int(dim)] = int(value)
    return out


def _dimension_names(geom: ArrayGeometry) -> tuple[str | None, ...]:
    names = geom.dimension_names
    return tuple(names) if names and len(names) == len(geom.shape) else (None,) * len(geom.shape)


def _axis_of(geom: ArrayGeometry, names: tuple[str | None, ...], dim: str | int) -> int:
    if isinstance(dim, int):
        if not -len(names) <= dim < len(names):
            raise ConfigError(f"patch names axis {dim}, but array {geom.name!r} has {len(names)} axes")
        return dim % len(names)
    if dim not in names:
        known = [n for n in names if n is not None]
        have = (
            f"dimensions: {known}"
            if known
            else f"it does not name its dimensions; use axis numbers 0..{len(names) - 1}"
        )
        raise ConfigError(f"patch names dimension {dim!r}, which array {geom.name!r} does not have ({have})")
    return names.index(dim)


def _label(dim: str | int, names: tuple[str | None, ...], axis: int) -> str:
    return (
        repr(dim) if isinstance(dim, str) else f"axis {axis}" + (f" ({names[axis]!r})" if names[axis] else "")
    )
