"""Chunk transforms: applied once per decoded block, before it enters the pool and the cache.

Each is a callable ``(label, block) -> block`` (the block has the sample axis
first) with a ``fingerprint()`` that the cache keys include, so changing a
transform never serves blocks made by the old one. A transform that changes
the dtype declares it with ``out_spec`` so the pool's slots hold its output.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import DTypeLike


def _labels(labels: Iterable[str] | None) -> frozenset[str] | None:
    return None if labels is None else frozenset(labels)


@dataclass(frozen=True, init=False)
class Cast:
    """Convert blocks to ``dtype`` (for example float16 to halve pool memory, or float32 for a
    model that wants it). ``labels`` limits it to some labels; by default it applies to all."""

    dtype: np.dtype
    labels: frozenset[str] | None = None

    def __init__(self, dtype: DTypeLike, labels: Iterable[str] | None = None) -> None:
        object.__setattr__(self, "dtype", np.dtype(dtype))
        object.__setattr__(self, "labels", _labels(labels))

    def __call__(self, label: str, block: np.ndarray) -> np.ndarray:
        """``block`` as ``dtype`` (no copy when it already is); blocks of other labels pass through."""
        if self.labels is not None and label not in self.labels:
            return block
        return block.astype(self.dtype, copy=False)

    def out_spec(
        self, shape: tuple[int, ...], dtype: np.dtype, *, name: str
    ) -> tuple[tuple[int, ...], np.dtype]:
        """As a chunk transform: the pool holds ``dtype`` for the arrays this cast applies to."""
        return shape, (self.dtype if self.labels is None or name in self.labels else np.dtype(dtype))

    def fingerprint(self) -> str:
        """``Cast(<dtype>;<labels>)``, stable across runs."""
        labels = "*" if self.labels is None else ",".join(sorted(self.labels))
        return f"Cast({self.dtype.str};{labels})"


@dataclass(frozen=True, init=False)
class FillNaN:
    """Replace NaN with ``value`` (ocean-only or land-only fields carry NaN where undefined,
    and one NaN poisons a whole gradient). Blocks without NaN are returned as they are;
    integer blocks cannot hold NaN and pass through. ``labels`` limits it to some arrays."""

    value: float
    labels: frozenset[str] | None = None

    def __init__(self, value: float = 0.0, labels: Iterable[str] | None = None) -> None:
        object.__setattr__(self, "value", float(value))
        object.__setattr__(self, "labels", _labels(labels))

    @property
    def fill(self) -> float:
        """The replacement value (the name ``NanToNum`` gave it)."""
        return self.value

    def __call__(self, label: str, block: np.ndarray) -> np.ndarray:
        """``block`` with NaN replaced by ``value`` in a new array; a block without NaN, an integer block
        or a block of another label is returned as it is (never modified)."""
        if self.labels is not None and label not in self.labels:
            return block
        if not np.issubdtype(block.dtype, np.inexact):
            return block
        missing = np.isnan(block)
        if not missing.any():
            return block
        # A new array rather than writing in place: the block may be shared with a cache tier.
        return np.where(missing, block.dtype.type(self.value), block)

    def fingerprint(self) -> str:
        """``NanToNum(<value>;<labels>)``, stable across runs.

        Kept under the transform's first name: FillNaN and NanToNum make the same
        blocks, so caches persisted under that name stay valid."""
        labels = "*" if self.labels is None else ",".join(sorted(self.labels))
        return f"NanToNum({self.value!r};{labels})"


class NanToNum(FillNaN):
    """The first name of :class:`FillNaN`, whose value was called ``fill``: ``NanToNum(fill=0.0)``."""

    def __init__(self, fill: float = 0.0, labels: Iterable[str] | None = None) -> None:
        super().__init__(fill, labels)


__all__ = ["Cast", "FillNaN", "NanToNum"]
