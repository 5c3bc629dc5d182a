"""Array geometry: what the engine needs to know about one array, read from zarr metadata.

The sample axis is a role, not dimension 0: ERA5 samples ``time``, an OME-NGFF
volume samples ``z``. A *slab* is every stored (or inner, for sharded arrays)
chunk that shares one chunk index along the sample axis; decoded, it holds
``chunk_len`` samples with the sample axis moved to the front.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from insitu.errors import ConfigError


@dataclass(frozen=True)
class ArrayGeometry:
    """Shape, chunking and encoding of one array, plus its role in a dataset.

    ``label`` names the array in batches: the array name, with ``+k`` / ``-k``
    appended for a shifted (windowed) view made by :meth:`shift`, or the name
    given with :meth:`named`.
    """

    name: str
    path: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    chunk_shape: tuple[int, ...]
    sample_axis: int = 0
    offset: int = 0
    fill_value: Any = None
    zarr_format: int = 3
    shard_shape: tuple[int, ...] | None = None
    dimension_names: tuple[str | None, ...] | None = None
    alias: str | None = None  # the batch field name chosen by the user; None: derived from name and offset
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        ndim = len(self.shape)
        if ndim == 0:
            raise ConfigError(f"array {self.path!r} is zero-dimensional; it has no sample axis")
        if not -ndim <= self.sample_axis < ndim:
            raise ConfigError(
                f"sample_axis={self.sample_axis} is out of range for array {self.path!r} with {ndim} dims"
            )
        if self.sample_axis < 0:
            object.__setattr__(self, "sample_axis", self.sample_axis + ndim)
        if len(self.chunk_shape) != ndim:
            raise ConfigError(
                f"array {self.path!r}: chunk shape {self.chunk_shape} does not match shape {self.shape}"
            )

    # -- labels and windows -------------------------------------------------
    @property
    def label(self) -> str:
        """Key of this array in a batch: ``name`` or ``name+k`` when shifted."""
        if self.alias is not None:
            return self.alias
        return self.name if self.offset == 0 else f"{self.name}{self.offset:+d}"

    def named(self, label: str) -> ArrayGeometry:
        """The same read, delivered in batches under ``label``."""
        if not isinstance(label, str) or not label:
            raise ConfigError(f"a label must be a non-empty string, got {label!r}")
        return replace(self, alias=label)

    def shift(self, k: int) -> ArrayGeometry:
        """The same array read ``k`` samples ahead (negative: behind). Shifts compose; the
        result is labelled from the name and offset (a name given by :meth:`named` is dropped)."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise ConfigError(f"shift must be an integer number of samples, got {k!r}")
        return replace(self, offset=self.offset + int(k), alias=None)

    def with_sample_axis(self, axis: int) -> ArrayGeometry:
        """The same array with another axis playing the sample role."""
        return replace(self, sample_axis=axis)

    # -- derived sizes ------------------------------------------------------
    @cached_property
    def n_samples(self) -> int:
        """Length of the sample axis."""
        return self.shape[self.sample_axis]

    @cached_property
    def sample_shape(self) -> tuple[int, ...]:
        """Shape of one sample: the array shape without the sample axis."""
        return self.shape[: self.sample_axis] + self.shape[self.sample_axis + 1 :]

    @cached_property  # read per chunk by the engine; the geometry is immutable
    def chunk_len(self) -> int:
        """Samples per decoded chunk (inner chunk for sharded arrays)."""
        return self.chunk_shape[self.sample_axis]

    @cached_property
    def n_slabs(self) -> int:
        """Number of chunk indices along the sample axis."""
        return math.ceil(self.n_samples / self.chunk_len)

    @cached_property
    def slab_shape(self) -> tuple[int, ...]:
        """Shape of one decoded slab, sample axis first."""
        return (self.chunk_len, *self.sample_shape)

    @cached_property
    def sample_nbytes(self) -> int:
        """Bytes of one decoded sample."""
        return int(np.prod(self.sample_shape, dtype=np.int64)) * self.dtype.itemsize

    @cached_property
    def slab_nbytes(self) -> int:
        """Bytes of one decoded slab (the pool's slot size for this array)."""
        return self.chunk_len * self.sample_nbytes

    @property
    def is_sharded(self) -> bool:
        return self.shard_shape is not None

    def describe(self) -> dict[str, Any]:
        """A JSON-able description, used in cache fingerprints and manifests."""
        return {
            "path": self.path,
            "shape": list(self.shape),
            "dtype": self.dtype.str,
            "chunk_shape": list(self.chunk_shape),
            "shard_shape": list(self.shard_shape) if self.shard_shape else None,
            "sample_axis": self.sample_axis,
            "zarr_format": self.zarr_format,
            "metadata": _jsonable(self.metadata),
        }


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.generic,)):
        return obj.item()
    if isinstance(obj, float) and math.isnan(obj):
        return "NaN"
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return repr(obj)
