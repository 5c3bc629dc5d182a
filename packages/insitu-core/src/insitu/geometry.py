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

#: Largest shift either way: far beyond any sample count, and keeps numpy's int64 index arithmetic exact.
MAX_OFFSET = 2**62


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
    #: Decoded coordinate values by dimension name (whole axis, before any selection); CF time as
    #: ``datetime64[ns]``. Empty when the store has no coordinate arrays.
    coords: Mapping[str, np.ndarray] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self) -> None:
        what = f"array {self.path or self.name!r}"
        object.__setattr__(self, "shape", _sizes(what, "shape", self.shape, smallest=0))
        object.__setattr__(self, "chunk_shape", _sizes(what, "chunk shape", self.chunk_shape, smallest=1))
        ndim = len(self.shape)
        if ndim == 0:
            raise ConfigError(f"{what} is zero-dimensional; it has no sample axis")
        if not is_integer(self.sample_axis):
            raise ConfigError(
                f"sample_axis must be an integer axis number, got {self.sample_axis!r} ({what})"
            )
        if not -ndim <= self.sample_axis < ndim:
            raise ConfigError(f"sample_axis={self.sample_axis} is out of range for {what} with {ndim} dims")
        object.__setattr__(self, "sample_axis", int(self.sample_axis) % ndim)
        if len(self.chunk_shape) != ndim:
            raise ConfigError(f"{what}: chunk shape {self.chunk_shape} does not match shape {self.shape}")
        if self.shape[self.sample_axis] == 0:
            # Caught here, where the array is first described, rather than as an empty split later.
            raise ConfigError(
                f"{what} has no samples: its sample axis ({self._axis_name()}) has length 0 "
                f"(shape {self.shape})"
            )
        if 0 in self.shape:  # an empty axis besides the sample axis: every sample holds no values
            raise ConfigError(
                f"{what} has empty samples: axis {self.shape.index(0)} has length 0 (shape {self.shape})"
            )
        if not is_integer(self.offset) or abs(self.offset) > MAX_OFFSET:
            raise ConfigError(
                f"offset must be an integer number of samples within 2**62 either way, "
                f"got {self.offset!r} ({what})"
            )
        object.__setattr__(self, "offset", int(self.offset))

    @property
    def sample_dim(self) -> str | None:
        """Name of the sample axis's dimension, when the array names its dimensions."""
        names = self.dimension_names
        if names and len(names) == len(self.shape):
            return names[self.sample_axis]
        return None

    def _axis_name(self) -> str:
        axis = f"axis {self.sample_axis}"
        names = self.dimension_names
        if names and len(names) == len(self.shape) and names[self.sample_axis]:
            return f"{axis}, {names[self.sample_axis]!r}"
        return axis

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
        if not is_integer(k):
            raise ConfigError(f"shift must be an integer number of samples, got {k!r}")
        if abs(self.offset + int(k)) > MAX_OFFSET:
            raise ConfigError(f"shift({k!r}) is too far: offsets are at most 2**62 samples either way")
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


def is_integer(value: Any) -> bool:
    """An integer, numpy's included; not a bool (True is not axis 1) and not a float (1.5 is not 1).

    The check for every count, index and axis number a user passes in.
    """
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _sizes(what: str, name: str, values: Any, *, smallest: int) -> tuple[int, ...]:
    """``values`` as a tuple of ints, each at least ``smallest``, else a ConfigError naming them."""
    try:
        sizes = tuple(values)
    except TypeError:
        sizes = None
    if sizes is None or not all(is_integer(v) and v >= smallest for v in sizes):
        kind = "non-negative" if smallest == 0 else "positive"
        raise ConfigError(f"{what}: {name} must be a sequence of {kind} integers, got {values!r}")
    return tuple(int(v) for v in sizes)


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
