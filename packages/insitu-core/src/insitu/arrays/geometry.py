"""Array geometry: what the engine needs to know about one array, read from zarr metadata.

The sample axis is a role, not dimension 0: ERA5 samples ``time``, an OME-NGFF
volume samples ``z``. A *slab* is every stored (or inner, for sharded arrays)
chunk that shares one chunk index along the sample axis; decoded, it holds
``chunk_len`` samples with the sample axis moved to the front.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Literal

import numpy as np

from insitu.arrays.selection import AxisSelection
from insitu.errors import ConfigError, MetadataError

#: Largest shift either way: far beyond any sample count, and keeps numpy's int64 index arithmetic exact.
MAX_OFFSET = 2**62
#: Most chunks along the sample axis: planning keeps ~45 bytes per chunk there (order, plan, slot
#: map), so 2**31 is ~100 GB before a sample is read; past it no host plans the array.
MAX_SLABS = 2**31
#: Most stored chunks in one slab (one chunk index along the sample axis): a slab is loaded as a
#: unit, with bookkeeping per chunk; a million chunks per slab is already minutes per sample.
MAX_CHUNKS_PER_SLAB = 2**20
#: Largest array numpy can index: its size in bytes must fit an int64.
MAX_BYTES = 2**63 - 1


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
    #: CF attributes of those coordinate arrays (units, calendar), by dimension name.
    coord_attrs: Mapping[str, Mapping[str, Any]] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )
    #: Per axis, the source indices delivered (None: the whole axis); see :mod:`insitu.arrays.selection`.
    selection: tuple[AxisSelection | None, ...] | None = None
    #: A static array has no sample axis: read once, kept resident, delivered whole in every batch.
    static: bool = False
    #: The physical size of one index along each axis (OME-NGFF ``scale``; None: 1 everywhere).
    #: Arrays sampled together in patches are co-registered by it: a label array at half the
    #: reference's resolution (twice its spacing) reads a half-size patch at half the origin.
    spacing: tuple[float, ...] | None = None

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
        if self.selection is not None:
            self._check_selection()
        if self.static:
            if self.offset:
                raise ConfigError(f"{what} is static (it has no sample axis); it cannot be shifted")
        elif self.shape[self.sample_axis] == 0:
            # Caught here, where the array is first described, rather than as an empty split later.
            raise ConfigError(
                f"{what} has no samples: its sample axis ({self._axis_name()}) has length 0 "
                f"(shape {self.shape})"
            )
        if 0 in self.shape:  # an empty axis besides the sample axis: every sample holds no values
            raise ConfigError(
                f"{what} has empty samples: axis {self.shape.index(0)} has length 0 (shape {self.shape})"
            )
        self._check_limits(what)
        if self.spacing is not None:
            object.__setattr__(self, "spacing", _spacing(what, self.spacing, ndim))
        if not is_integer(self.offset) or abs(self.offset) > MAX_OFFSET:
            raise ConfigError(
                f"offset must be an integer number of samples within 2**62 either way, "
                f"got {self.offset!r} ({what})"
            )
        object.__setattr__(self, "offset", int(self.offset))

    def _check_limits(self, what: str) -> None:
        """Sizes past what can be planned or indexed: refused here, naming the value and the limit,
        rather than as a numpy MemoryError or overflow later (hostile or broken metadata)."""
        nbytes = math.prod(self.shape) * np.dtype(self.dtype).itemsize
        if nbytes > MAX_BYTES:
            raise MetadataError(
                f"{what} holds {nbytes:,} bytes (shape {self.shape}, {self.dtype}), past the largest "
                f"array numpy can index ({MAX_BYTES:,} bytes, 2**63-1)"
            )
        per_axis = [-(-n // c) for n, c in zip(self.shape, self.chunk_shape, strict=True)]
        if not self.static:
            slabs = per_axis[self.sample_axis]
            if slabs > MAX_SLABS:
                raise MetadataError(
                    f"{what} has {slabs:,} chunks along its sample axis ({self._axis_name()}: "
                    f"{self.shape[self.sample_axis]:,} samples in chunks of {self.chunk_shape[self.sample_axis]:,}); "
                    f"at most {MAX_SLABS:,} (2**31) can be planned"
                )
            per_axis[self.sample_axis] = 1
        per_slab = math.prod(per_axis)
        if per_slab > MAX_CHUNKS_PER_SLAB:
            raise MetadataError(
                f"{what} has {per_slab:,} chunks per sample chunk (shape {self.shape}, chunks "
                f"{self.chunk_shape}); at most {MAX_CHUNKS_PER_SLAB:,} (2**20) are read as one unit"
            )

    @property
    def sample_dim(self) -> str | None:
        """Name of the sample axis's dimension, when the array names its dimensions."""
        names = self.dimension_names
        if names and len(names) == len(self.shape):
            return names[self.sample_axis]
        return None

    def _check_selection(self) -> None:
        sel = self.selection
        assert sel is not None
        if len(sel) != len(self.shape):
            raise ConfigError(f"array {self.name!r}: a selection needs one entry per axis, got {len(sel)}")
        for d, (s, n) in enumerate(zip(sel, self.shape, strict=True)):
            if s is None:
                continue
            if not self.static and d == self.sample_axis:
                raise ConfigError(
                    f"array {self.name!r}: the sample axis ({self._axis_name()}) cannot be selected; "
                    "choose samples with a split (split_by_coord, split_by_chunk(sample_range=...))"
                )
            if min(s.indices) < 0 or max(s.indices) >= n:
                raise ConfigError(f"array {self.name!r}: selection {s.describe()} is outside axis {d} of {n}")
        # Every index in order is no selection: one identity for the same read (cache keys, equality).
        whole = tuple(
            None if s is not None and s.keep and s.indices == tuple(range(n)) else s
            for s, n in zip(sel, self.shape, strict=True)
        )
        object.__setattr__(self, "selection", None if all(s is None for s in whole) else whole)

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

    def shift(self, k: int | str | np.timedelta64) -> ArrayGeometry:
        """The same array read ``k`` samples ahead (negative: behind). Shifts compose; the
        result is labelled from the name and offset in samples (a name given by :meth:`named` is
        dropped).

        ``k`` may also be a time span, ``"24h"``, ``"-6h"``, ``"2D"`` or a
        ``np.timedelta64``, when the sample coordinate is a regular time axis:
        it becomes the number of steps it spans (``"24h"`` on 6-hourly data is
        4), and must be a whole number of them."""
        if isinstance(k, (str, np.timedelta64)):
            k = self._steps(k)
        if not is_integer(k):
            raise ConfigError(f"shift must be an integer number of samples or a time span, got {k!r}")
        if abs(self.offset + int(k)) > MAX_OFFSET:
            raise ConfigError(f"shift({k!r}) is too far: offsets are at most 2**62 samples either way")
        return replace(self, offset=self.offset + int(k), alias=None)

    def _steps(self, span: str | np.timedelta64) -> int:
        """Samples spanned by a time span on this array's regular time axis."""
        delta = _timedelta(span)
        dim = self.sample_dim
        times = self.coords.get(dim) if dim is not None else None
        if times is None or times.dtype.kind != "M" or len(times) < 2:
            raise ConfigError(
                f"shift({span!r}) needs a time coordinate on the sample axis of {self.name!r}; "
                "give the shift in samples"
            )
        steps = np.diff(times)
        step = steps[0]
        if not (steps == step).all():
            at = int(np.flatnonzero(steps != step)[0])
            raise ConfigError(
                f"shift({span!r}): the {dim!r} axis of {self.name!r} is not regular (step {steps[at]} after "
                f"{times[at]}, {step} before); give the shift in samples"
            )
        count, rest = divmod(delta.astype("timedelta64[ns]").astype(np.int64), step.astype(np.int64))
        if rest:
            raise ConfigError(f"shift({span!r}) is not a whole number of {dim!r} steps of {step}")
        return int(count)

    def with_spacing(
        self, spacing: Mapping[str | int, float] | None = None, **by_name: float
    ) -> ArrayGeometry:
        """The same array with the physical size of one index given per dimension (by name or axis
        number; dimensions not given keep theirs, 1 by default): how arrays at other resolutions
        are co-registered with the reference array of a patch dataset (``labels.with_spacing(y=2,
        x=2)``: labels at half the resolution of an image of spacing 1)."""
        given: dict[str | int, float] = dict(spacing) if spacing is not None else {}
        given.update(by_name)
        values = list(self.spacing) if self.spacing is not None else [1.0] * len(self.shape)
        for dim, value in given.items():
            values[self.axis_of(dim)] = value
        return replace(self, spacing=tuple(values))

    def with_sample_axis(self, axis: int) -> ArrayGeometry:
        """The same array with another axis playing the sample role."""
        return replace(self, sample_axis=axis)

    def as_static(self) -> ArrayGeometry:
        """The array read whole, once, and delivered in every batch (for fields with no sample axis)."""
        return replace(self, static=True, offset=0, alias=self.alias)

    # -- selections -----------------------------------------------------------
    def axis_of(self, dim: str | int) -> int:
        """Axis number of a dimension given by name (or number)."""
        if is_integer(dim):
            ndim = len(self.shape)
            if not -ndim <= int(dim) < ndim:
                raise ConfigError(f"axis {dim} is out of range for array {self.name!r} with {ndim} dims")
            return int(dim) % ndim
        names = self.dimension_names or ()
        if not isinstance(dim, str) or dim not in names:
            raise ConfigError(f"array {self.name!r} has no dimension {dim!r} (dimensions: {list(names)})")
        return names.index(dim)

    def isel(self, indexers: Mapping[str | int, Any] | None = None, **by_name: Any) -> ArrayGeometry:
        """Deliver only some indices of non-sample axes: ``isel(level=[3, 7])``, ``isel(lat=slice(0, 90))``.

        An integer drops the axis, as in xarray. Only the chunks the selection
        touches are read, and the pool holds only the selected region.
        Selections compose: positions index what an earlier selection kept."""
        return self._select(_indexers(indexers, by_name), by_value=False)

    def sel(self, indexers: Mapping[str | int, Any] | None = None, **by_name: Any) -> ArrayGeometry:
        """Like :meth:`isel`, by coordinate value: ``sel(level=[500, 850], latitude=slice(60, 30))``.

        Slices include both ends; a longitude box may cross the antimeridian
        (``slice(350, 10)``). See :mod:`insitu.arrays.selection` for the rules."""
        return self._select(_indexers(indexers, by_name), by_value=True)

    def _select(self, indexers: Mapping[str | int, Any], *, by_value: bool) -> ArrayGeometry:
        from insitu.arrays.selection import by_position, compose, is_periodic_longitude
        from insitu.arrays.selection import by_value as resolve_value

        current = list(self.selection or (None,) * len(self.shape))
        for dim, key in indexers.items():
            axis = self.axis_of(dim)
            what = f"array {self.name!r}, dimension {self._dim_label(axis)}"
            before = current[axis]
            if before is not None and not before.keep:
                raise ConfigError(f"{what}: already reduced to one index by an earlier selection")
            if not by_value:
                size = self.shape[axis] if before is None else len(before.indices)
                chosen = by_position(what, size, key)
            else:
                name = self._dim_name(axis)
                coord = self.coords.get(name) if name is not None else None
                if coord is None:
                    raise ConfigError(
                        f"{what}: the store has no coordinate values for it; select by position with isel"
                    )
                if before is not None:
                    coord = coord[before.array]
                attrs = self._coord_attrs(name)
                found = resolve_value(what, coord, key, periodic=is_periodic_longitude(name, attrs, coord))
                chosen = found
            current[axis] = compose(before, chosen)
        return replace(self, selection=tuple(current))

    def _dim_name(self, axis: int) -> str | None:
        names = self.dimension_names
        return names[axis] if names and len(names) == len(self.shape) else None

    def _dim_label(self, axis: int) -> str:
        name = self._dim_name(axis)
        return repr(name) if name is not None else f"axis {axis}"

    def _coord_attrs(self, name: str | None) -> Mapping[str, Any]:
        return self.coord_attrs.get(name, {}) if name is not None else {}

    def axis_selection(self, axis: int) -> AxisSelection | None:
        """The selection of one axis (None: every index)."""
        return None if self.selection is None else self.selection[axis]

    def orthogonal_region(self, samples: slice | None = None) -> tuple[tuple[Any, ...], int]:
        """zarr's orthogonal selection reading ``samples`` (a slice of the sample axis; None: all)
        with this geometry's selection, and where the sample axis lands in the result (axes that an
        integer selection drops before it move it left). For a static array, the whole selection."""
        region: list[Any] = []
        axis = self.sample_axis
        for d in range(len(self.shape)):
            chosen = self.axis_selection(d)
            if d == self.sample_axis and not self.static:
                region.append(slice(None) if samples is None else samples)
            elif chosen is None:
                region.append(slice(None))
            elif not chosen.keep:
                region.append(chosen.indices[0])
                axis -= d < self.sample_axis
            else:
                region.append(chosen.array)
        return tuple(region), axis

    @cached_property
    def delivered_dims(self) -> tuple[str | None, ...]:
        """Dimension names of a delivered sample (static: of the delivered array)."""
        names = (
            self.dimension_names
            if self.dimension_names and len(self.dimension_names) == len(self.shape)
            else (None,) * len(self.shape)
        )
        return tuple(
            n
            for d, n in enumerate(names)
            if (self.static or d != self.sample_axis)
            and (self.axis_selection(d) is None or self.axis_selection(d).keep)  # type: ignore[union-attr]
        )

    def coord(self, dim: str) -> np.ndarray | None:
        """Coordinate values of ``dim`` as delivered (selection applied); None when the store has none."""
        values = self.coords.get(dim)
        if values is None:
            return None
        names = self.dimension_names or ()
        if dim in names:
            chosen = self.axis_selection(names.index(dim))
            if chosen is not None:
                return values[chosen.array]
        return values

    # -- derived sizes ------------------------------------------------------
    @cached_property
    def n_samples(self) -> int:
        """Length of the sample axis."""
        return self.shape[self.sample_axis]

    @cached_property
    def sample_shape(self) -> tuple[int, ...]:
        """Shape of one delivered sample: the selected shape without the sample axis (static: the
        whole selected shape)."""
        out = []
        for d, n in enumerate(self.shape):
            if d == self.sample_axis and not self.static:
                continue
            chosen = self.axis_selection(d)
            if chosen is None:
                out.append(n)
            elif chosen.keep:
                out.append(len(chosen.indices))
        return tuple(out)

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
        return bytes_per_sample(self.sample_shape, self.dtype)

    @cached_property
    def slab_nbytes(self) -> int:
        """Bytes of one decoded slab (the pool's slot size for this array)."""
        return self.chunk_len * self.sample_nbytes

    @property
    def is_sharded(self) -> bool:
        """Whether the array is stored in shards (inner chunks read by byte range through the shard index)."""
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
            "static": self.static,
            "selection": None
            if self.selection is None
            else [None if s is None else s.describe() for s in self.selection],
            "metadata": _jsonable(self.metadata),
        } | ({} if self.spacing is None else {"spacing": list(self.spacing)})


def _spacing(what: str, given: Any, ndim: int) -> tuple[float, ...]:
    """``given`` as one positive, finite physical size per axis, or a ConfigError naming it."""
    try:
        values = tuple(float(v) for v in given)
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: spacing must be one number per axis, got {given!r}") from None
    if len(values) != ndim or not all(math.isfinite(v) and v > 0 for v in values):
        raise ConfigError(f"{what}: spacing must be {ndim} positive, finite numbers, got {given!r}")
    return values


def bytes_per_sample(sample_shape: tuple[int, ...], dtype: np.dtype[Any]) -> int:
    """Bytes of one sample of ``sample_shape`` and ``dtype`` (geometries and slab specs ask here)."""
    return math.prod(sample_shape) * dtype.itemsize


def is_integer(value: Any) -> bool:
    """An integer, numpy's included; not a bool (True is not axis 1) and not a float (1.5 is not 1).

    The check for every count, index and axis number a user passes in.
    """
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


_SPAN = re.compile(r"^\s*([+-]?\d+)\s*(d|days?|h|hours?|min|minutes?|s|sec|seconds?)\s*$", re.IGNORECASE)
_SPAN_UNITS: dict[str, Literal["D", "h", "m", "s"]] = {"d": "D", "h": "h", "mi": "m", "s": "s"}


def _timedelta(span: str | np.timedelta64) -> np.timedelta64:
    """``"24h"``, ``"-6h"``, ``"2D"``, ``"30min"`` or a timedelta64, as a timedelta64[ns]."""
    if isinstance(span, np.timedelta64):
        return span.astype("timedelta64[ns]")
    found = _SPAN.match(span)
    if found is None:
        raise ConfigError(
            f"a time span is a whole number and a unit (D, h, min, s), like '24h'; got {span!r}"
        )
    word = found.group(2).lower()
    unit = _SPAN_UNITS["mi" if word.startswith("mi") else word[0]]
    return np.timedelta64(int(found.group(1)), unit).astype("timedelta64[ns]")


def _indexers(indexers: Mapping[str | int, Any] | None, by_name: Mapping[str, Any]) -> dict[str | int, Any]:
    if indexers is not None and not isinstance(indexers, Mapping):
        raise ConfigError(f"selections are given as a mapping or keywords {{dim: key}}, got {indexers!r}")
    merged: dict[str | int, Any] = dict(indexers or {})
    both = sorted(set(map(str, merged)) & set(by_name))
    if both:
        raise ConfigError(f"dimension(s) {both} selected twice")
    merged.update(by_name)
    return merged


def _sizes(what: str, name: str, values: Any, *, smallest: int) -> tuple[int, ...]:
    """``values`` as a tuple of ints, each at least ``smallest``, else a ConfigError naming them."""
    try:
        sizes = tuple(values)
    except TypeError:
        sizes = None
    if sizes is None or not all(is_integer(v) and v >= smallest for v in sizes):
        kind = "non-negative" if smallest == 0 else "positive"
        raise MetadataError(f"{what}: {name} must be a sequence of {kind} integers, got {values!r}")
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
