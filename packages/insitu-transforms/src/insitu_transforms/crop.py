"""Crops: a fixed region (:class:`Crop`, a chunk transform) and a random window per sample
(:class:`RandomCrop`, a batch transform).

A fixed crop is the same for every chunk, so it runs once per decoded chunk
and the pool holds only the region. A random crop must not: chunk results are
cached across epochs (in the pool and on disk), so a window drawn there would
be drawn once and reused for ever. :class:`RandomCrop` draws each row's window
per batch instead, from a stream keyed by (seed, epoch, sample index).
"""

from __future__ import annotations

import copy
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitu.plugin_api import ArrayGeometry, Batch, ConfigError, by_value, is_integer, is_periodic_longitude
from insitu_transforms.dims import (
    DimKey,
    DimsSource,
    DimTable,
    base_label,
    bound_table,
    check_keys,
    needs_table,
    resolve_axes,
)


def _labels(labels: Iterable[str] | None, what: str) -> frozenset[str] | None:
    if labels is None:
        return None
    if isinstance(labels, str):  # "t2m" would otherwise be the labels "t", "2" and "m"
        raise ConfigError(f"{what}: labels must be a list of names, got the string {labels!r}")
    return frozenset(labels)


def _show(key: DimKey) -> str:
    return key if isinstance(key, str) else f"axis {key}"


# -- Crop ----------------------------------------------------------------------------------------
@dataclass(frozen=True, init=False)
class Crop:
    """Keep a fixed region of each sample: ``Crop(latitude=slice(10, 40), longitude=slice(0, 64))``,
    or by axis position, ``Crop({0: slice(10, 40)})`` (0 is the first axis after the sample axis).

    A chunk transform: it runs once per decoded chunk and declares its output
    shape (``out_spec``), so the pool holds only the region. Slices take
    integer (or negative, from the end) bounds and no step; a ``[start,
    stop]`` pair is read as a slice (for configurations). ``labels`` limits
    the crop to some arrays (by array name, as with
    :class:`~insitu_transforms.chunk.Cast`). :meth:`by_value` crops by
    coordinate value.

    Dimension names are resolved with each array's own names: given to an
    ``InSituDataset``, the crop is bound to every array's geometry
    (:meth:`bind`), and an array lacking a named dimension is an error (limit
    the crop with ``labels``). ``dims=`` gives the names instead (see
    :mod:`insitu_transforms.dims`), for use outside a dataset or after a
    transform that renamed axes; then an array without any of the named
    dimensions passes through, one with some of them is cropped on those,
    and a name no array has is an error.

    To read less, select instead: ``geom.sel(latitude=slice(60, 30))`` or
    ``geom.isel(...)`` (docs/real-data.md) fetches and decodes only the
    chunks the region touches, where a Crop decodes whole chunks and cuts
    them. Use Crop after another chunk transform (the region of a regridded
    field), or where a transform is what you want to configure.

    A region larger than the field is an error at dataset construction
    (``out_spec``), naming the bound and the array's sample shape.
    """

    region: tuple[tuple[DimKey, int | None, int | None], ...]
    dims: DimTable | None = None
    labels: frozenset[str] | None = None

    def __init__(
        self,
        region: Mapping[DimKey, slice | Sequence[int | None]] | None = None,
        /,
        *,
        dims: DimsSource | None = None,
        labels: Iterable[str] | None = None,
        **by_name: slice | Sequence[int | None],
    ) -> None:
        given: dict[Any, Any] = dict(region or {})
        both = sorted(set(map(str, given)) & set(by_name))
        if both:
            raise ConfigError(f"Crop: dimension(s) {both} given twice")
        given.update(by_name)
        if not given:
            raise ConfigError(
                "Crop needs a region, e.g. Crop(latitude=slice(10, 40), longitude=slice(0, 64))"
            )
        keys = check_keys(given, "Crop")
        parts = []
        for k, s in zip(keys, given.values(), strict=True):
            if isinstance(s, (list, tuple)) and len(s) == 2:  # [start, stop]: what JSON and YAML can say
                s = slice(*s)
            if not isinstance(s, slice):
                raise ConfigError(f"Crop {_show(k)}={s!r}: a crop is a slice(start, stop) of indices")
            for bound in (s.start, s.stop):
                if bound is not None and not is_integer(bound):
                    raise ConfigError(
                        f"Crop {_show(k)}={s!r}: bounds are integer indices; crop by coordinate value "
                        "with Crop.by_value(geom, ...)"
                    )
            if s.step not in (None, 1):
                raise ConfigError(f"Crop {_show(k)}={s!r}: a crop takes no step (Coarsen reduces resolution)")
            parts.append(
                (k, None if s.start is None else int(s.start), None if s.stop is None else int(s.stop))
            )
        object.__setattr__(self, "region", tuple(parts))
        # Without dims, names wait for bind(geom): the dataset binds each array's geometry.
        object.__setattr__(
            self, "dims", None if dims is None else needs_table(keys, dims, key="name", what="Crop")
        )
        object.__setattr__(self, "labels", _labels(labels, "Crop"))

    @classmethod
    def by_value(
        cls,
        source: ArrayGeometry | Mapping[str, Any] | Sequence[ArrayGeometry],
        /,
        *,
        dims: DimsSource | None = None,
        labels: Iterable[str] | None = None,
        **bounds: slice,
    ) -> Crop:
        """A crop given by coordinate values: ``Crop.by_value(geoms, latitude=slice(60, 30))``.

        ``source`` gives the coordinates: a geometry or the geometries (each
        dimension's delivered coordinate; arrays sharing a dimension must agree
        on it), or a mapping of dimension name to coordinate values (then
        ``dims=`` names the axes). Slices include both ends and may run in
        either direction of a descending axis, as in ``geom.sel``; the values
        must select one contiguous run of indices (a longitude box across the
        seam of a 0-360 grid does not: select it with ``geom.sel``, which
        reorders). The coordinates must be those of the grid the crop sees:
        after a regridder, pass the target grid's.
        """
        if not bounds:
            raise ConfigError("Crop.by_value needs bounds, e.g. Crop.by_value(geoms, latitude=slice(60, 30))")
        coords, attrs, table_source = _coordinates(source, list(bounds))
        region: dict[DimKey, slice] = {}
        for dim, key in bounds.items():
            what = f"Crop.by_value {dim}={key!r}"
            if not isinstance(key, slice):
                raise ConfigError(f"{what}: a crop by value is a slice(lo, hi) of coordinate values")
            coord = coords[dim]
            chosen = by_value(
                what, coord, key, periodic=is_periodic_longitude(dim, attrs.get(dim, {}), coord)
            )
            idx = chosen.indices
            if idx[-1] - idx[0] != len(idx) - 1 or list(idx) != sorted(idx):
                raise ConfigError(
                    f"{what} selects indices that are not one contiguous run ({idx[0]}..{idx[-1]} with a "
                    "wrap or a gap, as for a longitude box across the seam); select it with geom.sel(...), "
                    "which reads and orders them"
                )
            region[dim] = slice(idx[0], idx[-1] + 1)
        return cls(region, dims=dims if dims is not None else table_source, labels=labels)

    def _plan(self, name: str, sample_shape: tuple[int, ...]) -> list[tuple[int, int, int]]:
        """``(axis, start, stop)`` of each cropped axis of ``name``, bounds checked against the field."""
        keys = [k for k, _, _ in self.region]
        axes = resolve_axes(keys, self.dims, name, len(sample_shape), what="Crop")
        plan = []
        for k, start, stop in self.region:
            if k not in axes:
                continue
            axis = axes[k]
            n = sample_shape[axis]
            shown = f"Crop {_show(k)}=slice({start}, {stop})"
            if (start is not None and not -n <= start < n) or (stop is not None and not -n <= stop <= n):
                raise ConfigError(
                    f"{shown} is larger than the field: array {name!r} has sample shape {sample_shape} "
                    f"({_show(k)} has {n})"
                )
            a, b, _ = slice(start, stop).indices(n)
            if b <= a:
                raise ConfigError(
                    f"{shown} selects nothing from array {name!r} (sample shape {sample_shape})"
                )
            plan.append((axis, a, b))
        return plan

    def applies_to(self, name: str) -> bool:
        """Whether the crop cuts array ``name`` (``labels``)."""
        return self.labels is None or name in self.labels

    def bind(self, geom: ArrayGeometry) -> Crop:
        """This crop for one array: dimension names taken from ``geom`` when ``dims`` was not given
        (``InSituDataset`` calls it once per array). Raises ConfigError when the array lacks a
        named dimension."""
        named = [k for k, _, _ in self.region if isinstance(k, str)]
        if self.dims is not None or not named or not self.applies_to(geom.name):
            return self
        bound = copy.copy(self)
        object.__setattr__(bound, "dims", bound_table(named, geom, what="Crop"))
        return bound

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        """The region of ``block`` (sample axis first), as a view; blocks of arrays it does not apply to
        pass through."""
        if not self.applies_to(name):
            return block
        plan = self._plan(name, block.shape[1:])
        if not plan:
            return block
        index: list[slice] = [slice(None)] * block.ndim
        for axis, a, b in plan:
            index[axis + 1] = slice(a, b)
        # A view: the engine copies it into its pool slot, so cutting costs no copy of its own.
        return block[tuple(index)]

    def out_spec(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], *, name: str
    ) -> tuple[tuple[int, ...], np.dtype[Any]]:
        """The cropped shape; raises (naming the bound and the shape) when the region does not fit."""
        if not self.applies_to(name):
            return shape, dtype
        out = list(shape)
        for axis, a, b in self._plan(name, tuple(shape[1:])):
            out[axis + 1] = b - a
        return tuple(out), dtype

    def fingerprint(self) -> str:
        """``Crop(<region>;<dims>;<labels>)``, stable across runs."""
        region = ",".join(f"{k!r}={a}:{b}" for k, a, b in self.region)
        dims = self.dims.describe() if self.dims is not None else "-"
        labels = "*" if self.labels is None else ",".join(sorted(self.labels))
        return f"Crop({region};{dims};{labels})"


def _coordinates(
    source: Any, dims: list[str]
) -> tuple[dict[str, np.ndarray], dict[str, Mapping[str, Any]], Any]:
    """Coordinates (and their attributes) of ``dims`` from ``source``, and what names the axes."""
    if isinstance(source, ArrayGeometry):
        geoms: list[ArrayGeometry] | None = [source]
    elif (
        isinstance(source, Mapping) and source and all(isinstance(g, ArrayGeometry) for g in source.values())
    ):
        geoms = list(source.values())
    elif isinstance(source, Sequence) and source and all(isinstance(g, ArrayGeometry) for g in source):
        geoms = list(source)
    else:
        geoms = None
    if geoms is None:
        if not isinstance(source, Mapping):
            raise ConfigError(
                "Crop.by_value: the source is a geometry, geometries, or a mapping of dimension name to "
                f"coordinate values, got {type(source).__name__}"
            )
        missing = [d for d in dims if d not in source]
        if missing:
            raise ConfigError(f"Crop.by_value: no coordinate values for {missing}; given {sorted(source)}")
        return {d: np.asarray(source[d]) for d in dims}, {}, None
    coords: dict[str, np.ndarray] = {}
    attrs: dict[str, Mapping[str, Any]] = {}
    owner: dict[str, str] = {}
    for g in geoms:
        for d in dims:
            if d not in g.delivered_dims:
                continue
            values = g.coord(d)
            if values is None:
                continue
            if d in coords and not np.array_equal(coords[d], values):
                raise ConfigError(
                    f"Crop.by_value: arrays {owner[d]!r} and {g.name!r} have different {d!r} coordinates; "
                    "crop them separately (labels=...)"
                )
            coords.setdefault(d, np.asarray(values))
            attrs.setdefault(d, g.coord_attrs.get(d, {}))
            owner.setdefault(d, g.name)
    missing = [d for d in dims if d not in coords]
    if missing:
        have = sorted({n for g in geoms for n in g.delivered_dims if n is not None})
        raise ConfigError(
            f"Crop.by_value: no coordinate values for dimension(s) {missing} in the geometries "
            f"(their dimensions: {have}); pass a mapping of coordinate values, or crop by index"
        )
    return coords, attrs, source


# -- RandomCrop ----------------------------------------------------------------------------------
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _splitmix(z: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser on uint64 arrays: every input bit flips about half the output bits."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def uniform_draws(seed: int, epoch: int, samples: np.ndarray, stream: int) -> np.ndarray:
    """One float in [0, 1) per sample index, a pure function of (seed, epoch, sample, stream).

    A counter-based draw: the stream's key comes from numpy's SeedSequence of
    (seed, epoch, stream) and each sample index is hashed with it, so a row's
    value depends on nothing else (not its batch, position or rank) and all
    rows are drawn at once, without a generator per sample."""
    key = np.random.SeedSequence([seed, epoch, stream]).generate_state(1, dtype=np.uint64)
    z = np.asarray(samples).astype(np.uint64) * _GOLDEN + key
    z = _splitmix(_splitmix(z) ^ key)  # two rounds: neighbouring indices give unrelated values
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


@dataclass(frozen=True, init=False)
class RandomCrop:
    """A random window of ``size`` per sample, redrawn each epoch: ``RandomCrop({"latitude": 32,
    "longitude": 32}, dims=geoms)``; keys may be axis positions (0: the first after the sample axis).

    A batch transform, ``InSituDataset(..., batch_transforms=[RandomCrop(...)])``.
    It cannot be a chunk transform: chunk results are cached across epochs.

    **Which window.** Row ``i`` of a batch gets the offset
    ``floor(u * (n - size + 1))`` along each dimension, with ``u`` drawn by
    :func:`uniform_draws` from (``seed``, ``batch.epoch``, the row's sample
    index ``batch.sample_indices[i]``, the dimension). So a sample gets the
    same window in the same epoch whatever the shuffle, batch size, rank or
    view, another in the next epoch (``per_epoch=False``: the same window every
    epoch, e.g. for validation), and every valid offset is equally likely.
    Every label of a row shares its draw: an input and its shifted target
    (``"t2m"``, ``"t2m+24"``) get the same window when their fields have the
    same extent (a field of another extent gets the window at the same
    relative position). ``independent=True`` draws per label instead.

    **Which labels.** ``labels`` (a label also covers its shifted labels), by
    default every label; a label whose arrays have none of the dimensions
    passes through. Names need ``dims=`` (see :mod:`insitu_transforms.dims`).

    **Static fields** (batch arrays ``(1, ...)``, labels absent from
    ``batch.read_indices``) are left alone by default; ``statics=True`` crops
    each row's window out of them, giving ``(B, ...)`` aligned with the rows.
    A batch built without ``read_indices`` is taken to hold no static field.

    The batch has no field for the offsets: :meth:`offsets` recomputes them,
    exactly, from the batch (and, for a batch already cut, the uncut sample
    shapes). A window larger than a field is an error naming the size and the
    label's sample shape.
    """

    size: tuple[tuple[DimKey, int], ...]
    seed: int = 0
    dims: DimTable | None = None
    labels: frozenset[str] | None = None
    independent: bool = False
    statics: bool = False
    per_epoch: bool = True

    def __init__(
        self,
        size: Mapping[DimKey, int],
        *,
        seed: int = 0,
        dims: DimsSource | None = None,
        labels: Iterable[str] | None = None,
        independent: bool = False,
        statics: bool = False,
        per_epoch: bool = True,
    ) -> None:
        if not isinstance(size, Mapping) or not size:
            raise ConfigError(
                f"RandomCrop: size is a mapping of dimension to window length, e.g. {{'latitude': 32}}, got {size!r}"
            )
        keys = check_keys(size, "RandomCrop")
        parts = []
        for k, n in zip(keys, size.values(), strict=True):
            if not is_integer(n) or n < 1:
                raise ConfigError(f"RandomCrop size {_show(k)}={n!r}: a window length is a positive integer")
            parts.append((k, int(n)))
        if not is_integer(seed) or seed < 0:
            raise ConfigError(f"RandomCrop: seed must be a non-negative integer, got {seed!r}")
        for flag, value in (("independent", independent), ("statics", statics), ("per_epoch", per_epoch)):
            if not isinstance(value, (bool, np.bool_)):
                raise ConfigError(f"RandomCrop: {flag} must be True or False, got {value!r}")
        object.__setattr__(self, "size", tuple(parts))
        object.__setattr__(self, "seed", int(seed))
        object.__setattr__(self, "dims", needs_table(keys, dims, key="label", what="RandomCrop"))
        object.__setattr__(self, "labels", _labels(labels, "RandomCrop"))
        object.__setattr__(self, "independent", bool(independent))
        object.__setattr__(self, "statics", bool(statics))
        object.__setattr__(self, "per_epoch", bool(per_epoch))

    def _applies(self, batch: Batch, label: str) -> bool:
        if self.labels is not None and label not in self.labels and base_label(label) not in self.labels:
            return False
        return self.statics or not _is_static(batch, label)

    def _windows(
        self, batch: Batch, shapes: Mapping[str, tuple[int, ...]] | None = None
    ) -> dict[str, dict[DimKey, tuple[int, int, np.ndarray]]]:
        """Per cropped label, ``{dim: (axis, size, offsets)}`` with one offset per row; ``shapes``
        gives sample shapes to use instead of the arrays'."""
        rows = batch.size
        epoch = batch.epoch if self.per_epoch else 0
        samples = np.asarray(batch.sample_indices, dtype=np.int64)
        draws: dict[int, np.ndarray] = {}
        out: dict[str, dict[DimKey, tuple[int, int, np.ndarray]]] = {}
        for label, array in batch.items():
            if not self._applies(batch, label):
                continue
            static = _is_static(batch, label)
            if not static and array.shape[:1] != (rows,):
                raise ConfigError(
                    f"RandomCrop: label {label!r} has {array.shape[0] if array.ndim else 0} rows, but the batch "
                    f"has {rows} samples"
                )
            sample_shape = tuple(shapes[label]) if shapes is not None and label in shapes else array.shape[1:]
            axes = resolve_axes(
                [k for k, _ in self.size], self.dims, label, len(sample_shape), what="RandomCrop"
            )
            if not axes:
                continue
            chosen: dict[DimKey, tuple[int, int, np.ndarray]] = {}
            for k, size in self.size:
                if k not in axes:
                    continue
                n = sample_shape[axes[k]]
                if size > n:
                    raise ConfigError(
                        f"RandomCrop size {_show(k)}={size} is larger than the field: label {label!r} has "
                        f"sample shape {sample_shape} ({_show(k)} has {n})"
                    )
                name = f"dim:{k!r}" + (f"|label:{label}" if self.independent else "")
                stream = zlib.crc32(name.encode())
                u = draws.get(stream)
                if u is None:
                    u = draws[stream] = uniform_draws(self.seed, epoch, samples, stream)
                choices = n - size + 1
                # min(): u * choices can round up to choices when u is within 2**-53 of 1.
                offsets = np.minimum((u * choices).astype(np.int64), choices - 1)
                chosen[k] = (axes[k], size, offsets)
            out[label] = chosen
        return out

    def offsets(
        self, batch: Batch, sample_shapes: Mapping[str, tuple[int, ...]] | None = None
    ) -> dict[str, dict[DimKey, np.ndarray]]:
        """``{label: {dim: offsets}}``: the first index of each row's window, as ``__call__`` uses
        them for ``batch``. A pure function of the batch's sample indices, epoch and the fields'
        extents: given a batch the crop already cut, pass the uncut sample shapes
        (``ds.train.pooled_sample_shapes``: before batch transforms) as ``sample_shapes``."""
        windows = self._windows(batch, sample_shapes)
        return {label: {k: o for k, (_, _, o) in w.items()} for label, w in windows.items()}

    def __call__(self, batch: Batch) -> Batch:
        """A new batch with each covered label cut to its rows' windows (dtype kept)."""
        windows = self._windows(batch)
        if not windows:
            return batch
        data = dict(batch.items())
        for label, chosen in windows.items():
            data[label] = _gather_windows(data[label], batch.size, chosen, static=_is_static(batch, label))
        return batch.replace(data)

    def fingerprint(self) -> str:
        """``RandomCrop(<size>;seed;<dims>;<options>)``, stable across runs."""
        size = ",".join(f"{k!r}={n}" for k, n in self.size)
        dims = self.dims.describe() if self.dims is not None else "-"
        labels = "*" if self.labels is None else ",".join(sorted(self.labels))
        flags = f"independent={self.independent},statics={self.statics},per_epoch={self.per_epoch}"
        return f"RandomCrop({size};seed={self.seed};{dims};{labels};{flags})"


def _is_static(batch: Batch, label: str) -> bool:
    """A static field's label is absent from ``read_indices`` (when the batch records them)."""
    return bool(batch.read_indices) and label not in batch.read_indices


def _gather_windows(
    array: np.ndarray, rows: int, chosen: Mapping[DimKey, tuple[int, int, np.ndarray]], *, static: bool
) -> np.ndarray:
    """Every row's window in one fancy-indexing gather (no loop over rows).

    Each axis gets an index array shaped to broadcast: the row number on axis 0
    (0 for every row of a static field), ``offset[row] + arange(size)`` on a
    cropped axis, ``arange(n)`` elsewhere. They broadcast to the output shape,
    ``(rows, *window shape)``."""
    ndim = array.ndim
    by_axis = {axis + 1: (size, offsets) for axis, size, offsets in chosen.values()}
    index: list[np.ndarray] = []
    for ax in range(ndim):
        shape = [1] * ndim
        if ax == 0:
            shape[0] = rows
            index.append(
                (np.zeros(rows, np.intp) if static else np.arange(rows, dtype=np.intp)).reshape(shape)
            )
        elif ax in by_axis:
            size, offsets = by_axis[ax]
            shape[0], shape[ax] = rows, size
            window = offsets.astype(np.intp)[:, None] + np.arange(size, dtype=np.intp)[None, :]
            index.append(window.reshape(shape))
        else:
            shape[ax] = array.shape[ax]
            index.append(np.arange(array.shape[ax], dtype=np.intp).reshape(shape))
    return array[tuple(index)]


__all__ = ["Crop", "RandomCrop", "uniform_draws"]
