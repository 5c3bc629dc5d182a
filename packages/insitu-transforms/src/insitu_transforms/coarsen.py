"""Coarsen: block means (or maxima) over integer factors, as a chunk transform.

Run once per decoded chunk, so the pool holds the coarse field: a 0.25°
archive trains at 1° with a sixteenth of the memory, and the reduction is not
repeated per epoch.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitu.plugin_api import ArrayGeometry, ConfigError, is_integer
from insitu_transforms.dims import (
    DimKey,
    DimsSource,
    DimTable,
    bound_table,
    check_keys,
    needs_table,
    resolve_axes,
)

_HOW = ("mean", "max")
_BOUNDARY = ("exact", "trim")


def _show(key: DimKey) -> str:
    return key if isinstance(key, str) else f"axis {key}"


@dataclass(frozen=True, init=False)
class Coarsen:
    """Reduce blocks of ``factors`` cells to one: ``Coarsen({"latitude": 4, "longitude": 4})``
    (keys may be axis positions, 0 being the first after the sample axis).

    ``how="mean"`` ignores NaN as ``np.nanmean`` does (a block of NaN only
    gives NaN, without a warning); ``how="max"`` likewise (``np.nanmax``).
    Float fields keep their dtype (sums accumulate in float64); the mean of an
    integer field is float32, its max keeps the dtype.

    ``boundary="exact"`` (the default) requires every factor to divide its
    axis, and is an error at dataset construction naming the shape and the
    factor otherwise; ``"trim"`` drops the trailing cells that do not fill a
    block. ``labels`` limits it to some arrays (by array name). A chunk
    transform that declares its output (``out_spec``).

    Dimension names are resolved as for :class:`~insitu_transforms.crop.Crop`:
    bound to each array's geometry by an ``InSituDataset`` (an array lacking
    a named dimension is an error), or given with ``dims=`` (an array without
    any of them passes through; a name no array has is an error).
    """

    factors: tuple[tuple[DimKey, int], ...]
    how: str = "mean"
    boundary: str = "exact"
    dims: DimTable | None = None
    labels: frozenset[str] | None = None

    def __init__(
        self,
        factors: Mapping[DimKey, int],
        *,
        how: str = "mean",
        boundary: str = "exact",
        dims: DimsSource | None = None,
        labels: Iterable[str] | None = None,
    ) -> None:
        if not isinstance(factors, Mapping) or not factors:
            raise ConfigError(
                f"Coarsen: factors is a mapping of dimension to integer factor, e.g. {{'latitude': 4}}, got {factors!r}"
            )
        keys = check_keys(factors, "Coarsen")
        parts = []
        for k, f in zip(keys, factors.values(), strict=True):
            if not is_integer(f) or f < 1:
                raise ConfigError(f"Coarsen factor {_show(k)}={f!r}: a factor is a positive integer")
            parts.append((k, int(f)))
        if how not in _HOW:
            raise ConfigError(f"Coarsen: how must be one of {list(_HOW)}, got {how!r}")
        if boundary not in _BOUNDARY:
            raise ConfigError(f"Coarsen: boundary must be one of {list(_BOUNDARY)}, got {boundary!r}")
        if isinstance(labels, str):
            raise ConfigError(f"Coarsen: labels must be a list of names, got the string {labels!r}")
        object.__setattr__(self, "factors", tuple(parts))
        object.__setattr__(self, "how", how)
        object.__setattr__(self, "boundary", boundary)
        # Without dims, names wait for bind(geom): the dataset binds each array's geometry.
        object.__setattr__(
            self, "dims", None if dims is None else needs_table(keys, dims, key="name", what="Coarsen")
        )
        object.__setattr__(self, "labels", None if labels is None else frozenset(labels))

    def _plan(self, name: str, sample_shape: tuple[int, ...]) -> dict[int, int]:
        """``{axis: factor}`` for ``name``, checked against its sample shape."""
        axes = resolve_axes([k for k, _ in self.factors], self.dims, name, len(sample_shape), what="Coarsen")
        plan = {}
        for k, f in self.factors:
            if k not in axes:
                continue
            n = sample_shape[axes[k]]
            if f > n:
                raise ConfigError(
                    f"Coarsen factor {_show(k)}={f} is larger than the field: array {name!r} has sample "
                    f"shape {sample_shape} ({_show(k)} has {n})"
                )
            if n % f and self.boundary == "exact":
                raise ConfigError(
                    f"Coarsen factor {_show(k)}={f} does not divide {n}, the length of {_show(k)} in array "
                    f"{name!r} (sample shape {sample_shape}); pass boundary='trim' to drop the last {n % f} "
                    "cell(s), or select a region whose length it divides"
                )
            plan[axes[k]] = f
        return plan

    def _out_dtype(self, dtype: np.dtype[Any]) -> np.dtype[Any]:
        if self.how == "mean" and dtype.kind not in "fc":
            return np.dtype(np.float32)
        return dtype

    def applies_to(self, name: str) -> bool:
        """Whether array ``name`` is coarsened (``labels``)."""
        return self.labels is None or name in self.labels

    def bind(self, geom: ArrayGeometry) -> Coarsen:
        """This transform for one array: dimension names taken from ``geom`` when ``dims`` was not
        given (``InSituDataset`` calls it once per array). Raises ConfigError when the array lacks a
        named dimension."""
        named = [k for k, _ in self.factors if isinstance(k, str)]
        if self.dims is not None or not named or not self.applies_to(geom.name):
            return self
        bound = copy.copy(self)
        object.__setattr__(bound, "dims", bound_table(named, geom, what="Coarsen"))
        return bound

    def out_spec(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], *, name: str
    ) -> tuple[tuple[int, ...], np.dtype[Any]]:
        """The coarse shape and dtype; raises (naming the shape and factor) when a factor does not fit."""
        if not self.applies_to(name):
            return shape, dtype
        plan = self._plan(name, tuple(shape[1:]))
        if not plan:
            return shape, dtype
        if self.how == "max" and np.dtype(dtype).kind == "c":
            raise ConfigError(f"Coarsen how='max' on array {name!r}: complex values have no maximum")
        out = list(shape)
        for axis, f in plan.items():
            out[axis + 1] = shape[axis + 1] // f
        return tuple(out), self._out_dtype(np.dtype(dtype))

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        """``block`` (sample axis first) with each coarsened axis reduced by its factor (``how``);
        blocks of arrays it does not apply to pass through."""
        return self.reduce(np, name, block)

    def reduce(self, xp: Any, name: str, block: Any) -> Any:
        """What calling it gives, computed with the array module ``xp``: ``numpy`` on the host, ``cupy``
        for a block on a GPU (the device stage of insitu-gpu calls this with its device arrays)."""
        if not self.applies_to(name):
            return block
        plan = self._plan(name, tuple(int(n) for n in block.shape[1:]))
        if not plan:
            return block
        return block_reduce(xp, block, plan, self.how, self._out_dtype(np.dtype(block.dtype)))

    def fingerprint(self) -> str:
        """``Coarsen(<factors>;<how>;<boundary>;<dims>;<labels>)``, stable across runs."""
        factors = ",".join(f"{k!r}={f}" for k, f in self.factors)
        dims = self.dims.describe() if self.dims is not None else "-"
        labels = "*" if self.labels is None else ",".join(sorted(self.labels))
        return f"Coarsen({factors};{self.how};{self.boundary};{dims};{labels})"


def block_reduce(xp: Any, block: Any, plan: Mapping[int, int], how: str, out_dtype: np.dtype[Any]) -> Any:
    """``block`` (sample axis first) with each axis of ``plan`` (``{axis after the sample axis:
    factor}``) trimmed to a multiple of its factor and its blocks of cells reduced to one value.

    ``how="mean"`` leaves NaN out (an all-NaN block is NaN) and sums in
    float64; ``how="max"`` ignores NaN unless the whole block is NaN. The
    result is cast to ``out_dtype``. Written against the array module ``xp``
    (``numpy`` or ``cupy``) with no branch on the values: on a GPU each such
    test would wait for the device, so host and device run this same code.
    """
    # Trim, then split each coarsened axis n into (n // f, f): the cells of a block get axes of their
    # own, and one reduction over those axes does every block at once.
    trim: list[slice] = [slice(None)] * block.ndim
    shape: list[int] = []
    reduce_axes: list[int] = []
    for ax, n in enumerate(block.shape):
        f = plan.get(ax - 1) if ax > 0 else None
        if f is None:
            shape.append(n)
            continue
        trim[ax] = slice(0, n - n % f)
        shape += [n // f, f]
        reduce_axes.append(len(shape) - 1)
    cells = xp.reshape(block[tuple(trim)], tuple(shape))
    axes = tuple(reduce_axes)
    floating = np.dtype(block.dtype).kind in "fc"
    if how == "max":
        # fmax ignores NaN unless both operands are NaN: folding a block's cells with it is nanmax
        # without its all-NaN warning, and needs neither a mask nor a look at the values. astype
        # copies: with every factor 1 the fold is a view of the block, which the caller may reuse.
        return _fold(xp.fmax if floating else xp.maximum, cells, axes).astype(out_dtype)
    wide = np.result_type(np.dtype(block.dtype), np.float64)
    if not floating:
        return xp.asarray(xp.mean(cells, axis=axes, dtype=wide), dtype=out_dtype)
    missing = xp.isnan(cells)
    total = xp.sum(xp.where(missing, xp.asarray(0, dtype=cells.dtype), cells), axis=axes, dtype=wide)
    # Counts are exact in any order, so they fold slice by slice (numpy's reduction over several
    # short axes costs as much as the sum itself).
    count = _fold(lambda a, b: xp.add(a, b, dtype=np.int64), ~missing, axes)
    with np.errstate(invalid="ignore", divide="ignore"):  # 0 / 0: an all-NaN block is NaN
        return xp.asarray(total / count, dtype=out_dtype)


def _fold(binary: Any, cells: Any, axes: tuple[int, ...]) -> Any:
    """``cells`` reduced over ``axes`` by applying the elementwise ``binary`` to one slice after another:
    a pass over the data, where a reduction over several short, strided axes is many small loops."""
    out = cells
    for removed, axis in enumerate(sorted(axes)):
        at = axis - removed  # each reduction removes an axis before the next
        index: list[Any] = [slice(None)] * out.ndim
        index[at] = 0
        acc = out[tuple(index)]
        for j in range(1, out.shape[at]):
            index[at] = j
            acc = binary(acc, out[tuple(index)])
        out = acc
    return out


__all__ = ["Coarsen", "block_reduce"]
