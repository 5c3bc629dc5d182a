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
        if not self.applies_to(name):
            return block
        plan = self._plan(name, block.shape[1:])
        if not plan:
            return block
        # Trim, then split each coarsened axis n into (n // f, f): the block of cells becomes an axis
        # of its own, and one reduction over those axes does every block at once.
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
        cells = block[tuple(trim)].reshape(shape)
        axes = tuple(reduce_axes)
        out_dtype = self._out_dtype(block.dtype)
        if self.how == "max":
            # fmax ignores NaN unless every value is NaN: nanmax without its all-NaN warning.
            reduced = np.fmax.reduce(cells, axis=axes) if block.dtype.kind in "fc" else cells.max(axis=axes)
            return np.asarray(reduced, dtype=out_dtype)
        if block.dtype.kind in "fc":
            missing = np.isnan(cells)
            if missing.any():
                total = np.where(missing, 0, cells).sum(
                    axis=axes, dtype=np.result_type(block.dtype, np.float64)
                )
                count = np.count_nonzero(~missing, axis=axes)
                with np.errstate(invalid="ignore", divide="ignore"):  # 0 / 0: an all-NaN block is NaN
                    return np.asarray(total / count, dtype=out_dtype)
        return np.asarray(
            cells.mean(axis=axes, dtype=np.result_type(block.dtype, np.float64)), dtype=out_dtype
        )

    def fingerprint(self) -> str:
        """``Coarsen(<factors>;<how>;<boundary>;<dims>;<labels>)``, stable across runs."""
        factors = ",".join(f"{k!r}={f}" for k, f in self.factors)
        dims = self.dims.describe() if self.dims is not None else "-"
        labels = "*" if self.labels is None else ",".join(sorted(self.labels))
        return f"Coarsen({factors};{self.how};{self.boundary};{dims};{labels})"


__all__ = ["Coarsen"]
