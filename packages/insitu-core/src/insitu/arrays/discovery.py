"""Read array geometries from a Zarr store (v2 or v3, sharded or not)."""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections import Counter
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import replace
from typing import Any, TypeGuard, TypeVar

import numpy as np
import zarr
import zarr.api.asynchronous as zarr_async
from zarr.abc.store import Store

from insitu.arrays.geometry import ArrayGeometry, is_integer
from insitu.arrays.lazycoords import LazyCoords
from insitu.errors import ConfigError, MetadataError, StoreTimeoutError
from insitu.store.capabilities import RetriesItself
from insitu.store.loop import run_sync, submit
from insitu.store.metadata import blame_metadata, is_metadata_failure
from insitu.store.opener import redact_urls
from insitu.store.retry import RetryPolicy

# zarr's "no such node" errors: NodeNotFoundError subclasses FileNotFoundError on 3.1 and 3.4.
_NOT_FOUND = (FileNotFoundError, KeyError, zarr.errors.NodeTypeValidationError)
# Opening a group where an array is (or the reverse) raises one of these.
_NOT_A_GROUP = (*_NOT_FOUND, zarr.errors.ContainsArrayError)

SampleAxis = int | str
logger = logging.getLogger("insitu")
T = TypeVar("T")


class Geometries(dict[str, ArrayGeometry]):
    """``{name: ArrayGeometry}`` as :func:`open_geometries` found it, with what it decided.

    ``sample_dim`` is the sample dimension's name (None when the arrays do not
    name their dimensions); ``skipped`` maps each array left out to why;
    ``coords`` holds the decoded coordinate values found in the store.
    """

    sample_dim: str | None = None
    chosen_by_default: bool = False
    skipped: dict[str, str]
    coords: Mapping[str, np.ndarray]

    def report(self) -> str:
        """One paragraph saying which sample dimension was used and what was left out, and why."""
        parts = []
        if self.sample_dim is not None:
            how = "as given"
            if self.chosen_by_default:
                # Not waited for here: a report must not hold up opening the store.
                ready = not isinstance(self.coords, LazyCoords) or self.coords.ready
                axis = self.coords.get(self.sample_dim) if ready else None
                kind = "the time axis" if axis is not None and axis.dtype.kind == "M" else "the dimension"
                how = f"chosen by default: {kind} leading the data variables; pass sample_dim= to choose"
            parts.append(f"sample dimension {self.sample_dim!r} ({how})")
        statics = [n for n, g in self.items() if g.static]
        parts.append(f"arrays {list(self)}" + (f", of which static {statics}" if statics else ""))
        if self.skipped:
            parts.append("skipped: " + "; ".join(f"{n} ({why})" for n, why in self.skipped.items()))
        return ", ".join(parts)


def open_geometries(
    store: Store,
    variables: Iterable[str] | None = None,
    sample_axis: SampleAxis | Mapping[str, SampleAxis] | None = None,
    *,
    sample_dim: SampleAxis | Mapping[str, SampleAxis] | None = None,
    path: str = "",
    include_static: bool = False,
    sel: Mapping[str, Any] | None = None,
    isel: Mapping[str, Any] | None = None,
    retry: RetryPolicy | None = None,
    cf_decode: Any = None,
) -> Geometries:
    """Describe the arrays of a Zarr group: ``{name: ArrayGeometry}``.

    ``sample_dim`` is the sample dimension's name (``"time"``), an axis number
    for arrays that do not name their dimensions, or a mapping from array
    name to either; a name no array has is an error listing the dimensions
    that exist. ``sample_axis=`` is its former spelling (deprecated, same
    meaning). ``None`` (the default): when the arrays
    name their dimensions (zarr v3 ``dimension_names`` or xarray's
    ``_ARRAY_DIMENSIONS``), the dimension that is the first dimension of most
    data variables (ties: the one most variables have), logged and recorded in
    ``.sample_dim``; otherwise axis 0.

    With ``variables=None`` every numeric data variable with at least two
    dimensions is included: coordinate arrays (named like a dimension, or
    listed in a ``coordinates`` attribute) are not data. An array without the
    sample dimension is *static* (read once, delivered whole with every
    batch): included when named in ``variables`` or with
    ``include_static=True``, otherwise skipped. What was skipped, and why, is
    in ``.skipped`` and in :meth:`Geometries.report` (logged at INFO).

    Coordinate arrays of the chosen arrays' dimensions are read and decoded
    (CF time to ``datetime64[ns]``) into each geometry's ``coords``, for
    :meth:`ArrayGeometry.sel`, :func:`split_by_coord` and ``Batch.coords``.
    ``sel`` / ``isel`` select on non-sample dimensions of every array having
    them (see :func:`select`).

    Reading the metadata is bounded by ``retry`` (default: the store's own policy when it retries
    by itself, else ``RetryPolicy()``): a store that does not answer within
    :meth:`RetryPolicy.longest_call_s` raises :class:`StoreTimeoutError` naming the store and the
    limit, whoever built the store (a store's own, shorter timeout raises the same error with its
    limit). The background read of the coordinates is bounded the same
    way; its failure is raised where the values are first used (``geom.coords``, ``sel``, a date
    split, ``batch.coords``).

    Geometries describe the stored arrays; CF decoding happens when a dataset
    reads them, so ``cf_decode`` is an option of :class:`InSituDataset` and
    ``from_xarray`` (passing it here raises a ConfigError saying so).

    Raises ConfigError naming the bad value for a malformed ``variables`` or
    ``sample_dim`` (a mapping naming an array that is not read included, a
    dimension no array has), and naming the array and its shape for one
    whose sample axis is empty.
    """
    if cf_decode is not None:
        raise ConfigError(
            f"cf_decode={cf_decode!r} is an option of InSituDataset(...) and from_xarray(...), not of "
            "open_geometries: geometries describe the stored arrays, the dataset decodes what it reads"
        )
    sample_axis = _sample_dim_argument(sample_dim, sample_axis)
    wanted = _variable_names(variables)
    explicit = wanted is not None
    if sample_axis is not None:
        _check_sample_axis(sample_axis)
    if not isinstance(path, str):
        raise ConfigError(f"path must be a string (a group inside the store), got {path!r}")
    broken: dict[str, str] = {}  # arrays default discovery could not describe, and why
    policy = retry or _own_policy(store)
    chosen = _open_arrays_sync(store, path, wanted, sample_axis, broken, policy)
    dims = {name: _dimension_names(arr, arr.metadata.to_dict()) for name, arr in chosen.items()}
    skipped: dict[str, str] = dict(broken)
    if not explicit:
        chosen = _data_variables(chosen, dims, skipped)
    by_default = sample_axis is None
    # Coordinates are read in the background (two round trips on object storage); whatever needs
    # their values waits for them: a selection by value, a date split, batch.coords.
    all_dims = sorted({d for n in chosen for d in (dims[n] or ()) if _can_be_node(d)})
    reading = _bounded(
        _read_coordinates(store, path, all_dims), store, policy, "reading the coordinate arrays"
    )
    coords, coord_attrs = LazyCoords.pair(submit(reading))
    if sample_axis is None:
        sample_axis = _default_sample_axis({n: dims[n] for n in chosen}, coords)
    elif isinstance(sample_axis, str):
        _check_dimension_exists(sample_axis, {n: dims[n] for n in chosen})
    out = _geometries(chosen, sample_axis, explicit, include_static, skipped, variables, broken)
    for name, geom in out.items():
        out[name] = replace(geom, coords=coords, coord_attrs=coord_attrs)
    out.sample_dim = sample_axis if isinstance(sample_axis, str) else None
    out.chosen_by_default = by_default and out.sample_dim is not None
    out.skipped = skipped
    out.coords = coords
    if sel or isel:
        out.update(select(out, sel=sel, isel=isel))
    if logger.isEnabledFor(logging.INFO):
        logger.info("open_geometries: %s", out.report())
    return out


def _open_arrays_sync(
    store: Store,
    path: str,
    wanted: list[str] | None,
    sample_axis: SampleAxis | Mapping[str, SampleAxis] | None,
    broken: dict[str, str],
    policy: RetryPolicy,
) -> dict[str, zarr.Array]:
    """The arrays of the group (``wanted``, or every one), checked against a ``sample_axis`` mapping;
    members whose metadata zarr cannot read go to ``broken``, with why; the reads bounded by
    ``policy``'s longest call."""
    # Opened on the engine's loop; zarr.Array wraps each AsyncArray for its metadata (no IO).
    opening = _open_arrays(store, path, wanted, broken)
    try:
        opened = run_sync(_bounded(opening, store, policy, "opening the arrays' metadata"))
    except Exception as exc:
        if not is_metadata_failure(exc):
            raise
        raise run_sync(blame_metadata(store, path, exc)) from exc
    chosen = {name: zarr.Array(a) for name, a in opened.items()}
    if isinstance(sample_axis, Mapping):
        unknown = sorted(set(sample_axis) - set(chosen))
        if unknown:
            raise ConfigError(
                f"sample_dim names unknown array(s) {unknown}; the arrays read are {sorted(chosen)}"
            )
    return chosen


def _default_sample_axis(
    chosen_dims: Mapping[str, tuple[str | None, ...] | None], coords: Mapping[str, np.ndarray]
) -> SampleAxis:
    """The dimension leading most data variables (a time axis among several), else axis 0."""
    leading = {names[0] for names in chosen_dims.values() if names and names[0]}
    # Several dimensions lead some array: the one that is a time axis wins, so look.
    times = {d for d, v in coords.items() if v.dtype.kind == "M"} if len(leading) > 1 else set()
    return _default_sample_dim(chosen_dims, times) or 0


def _geometries(
    chosen: Mapping[str, zarr.Array],
    sample_axis: SampleAxis | Mapping[str, SampleAxis],
    explicit: bool,
    include_static: bool,
    skipped: dict[str, str],
    variables: Iterable[str] | None,
    broken: dict[str, str],
) -> Geometries:
    """One geometry per chosen array along ``sample_axis`` (those left out recorded in ``skipped``;
    those whose metadata is impossible or unreadable, in ``broken`` too, each logged at WARNING)."""
    out = Geometries()
    for name, arr in chosen.items():
        axis_spec: SampleAxis = sample_axis.get(name, 0) if isinstance(sample_axis, Mapping) else sample_axis
        try:
            geom = _geometry_or_none(arr, name, axis_spec, explicit, include_static, skipped)
        except MetadataError as exc:
            if explicit:
                raise
            broken[name] = skipped[name] = f"impossible metadata: {exc}"
            continue
        except ConfigError as exc:
            if explicit:
                raise
            # The user did not name this array (default discovery picked it): say how to skip it.
            raise ConfigError(f"{exc}; name the arrays to read with variables=[...]") from None
        if geom is not None:
            out[name] = geom
    for name, why in broken.items():  # said even when other arrays are read: data left out
        logger.warning("open_geometries: skipped array %r: %s", name, why)
    if not out:
        raise ConfigError(
            f"no array in the store matches variables={variables!r}, sample_dim={sample_axis!r}"
            + (f" (skipped: {skipped})" if skipped else "")
        )
    return out


def select(
    geometries: Mapping[str, ArrayGeometry],
    *,
    sel: Mapping[str, Any] | None = None,
    isel: Mapping[str, Any] | None = None,
) -> dict[str, ArrayGeometry]:
    """Apply ``sel`` (by coordinate value) and ``isel`` (by position) to every geometry having each
    dimension, as ``xr.Dataset.sel`` does: ``select(geoms, sel={"level": [500, 850]})``.

    A dimension no geometry has is an error naming it; the sample dimension is
    refused (choose samples with a split)."""
    out = dict(geometries)
    for kind, indexers in (("isel", isel), ("sel", sel)):
        if not indexers:
            continue
        if not isinstance(indexers, Mapping):
            raise ConfigError(f"{kind} must be a mapping {{dimension: selection}}, got {indexers!r}")
        for dim, key in indexers.items():
            having = [n for n, g in out.items() if g.dimension_names and dim in g.dimension_names]
            if not having:
                known = sorted({d for g in out.values() for d in (g.dimension_names or ()) if d})
                raise ConfigError(f"{kind}: no array has a dimension {dim!r} (dimensions: {known})")
            for n in having:
                g = out[n]
                out[n] = g.isel({dim: key}) if kind == "isel" else g.sel({dim: key})
    return out


def _variable_names(variables: Iterable[str] | None) -> list[str] | None:
    """``variables`` as a list of names; a bare string is refused (it would read as its letters)."""
    if variables is None:
        return None
    if isinstance(variables, str):
        raise ConfigError(f"variables must be a list of array names, got the string {variables!r}")
    try:
        names = list(variables)
    except TypeError:
        raise ConfigError(f"variables must be a list of array names, got {variables!r}") from None
    bad = [v for v in names if not isinstance(v, str) or not v]
    if bad or not names:
        raise ConfigError(f"variables must be non-empty array names, got {variables!r}")
    return names


def _sample_dim_argument(sample_dim: Any, sample_axis: Any) -> Any:
    """``sample_dim``, or the deprecated ``sample_axis`` standing in for it (not both)."""
    if sample_axis is None:
        return sample_dim
    if sample_dim is not None:
        raise ConfigError(
            f"pass the sample dimension once: sample_dim={sample_dim!r} (sample_axis={sample_axis!r} "
            "is its deprecated spelling)"
        )
    warnings.warn(
        "open_geometries(sample_axis=...) is deprecated: pass sample_dim= (the dimension's name, "
        "or an axis number for arrays without names)",
        DeprecationWarning,
        stacklevel=3,
    )
    return sample_axis


def _check_dimension_exists(dim: str, dims: Mapping[str, tuple[str | None, ...] | None]) -> None:
    """A sample dimension named by the user is one some array has: otherwise every array would
    quietly become static."""
    known = sorted({d for names in dims.values() if names for d in names if d})
    # Arrays that do not name their dimensions get their own error, per array, further on.
    if known and dim not in known:
        raise ConfigError(
            f"sample_dim {dim!r} is not a dimension of the arrays read ({sorted(dims)}); "
            f"their dimensions are {known}"
        )


def _check_sample_axis(sample_axis: Any) -> None:
    """An axis number, a dimension name, or a mapping from array name to either."""
    specs = sample_axis.items() if isinstance(sample_axis, Mapping) else [(None, sample_axis)]
    for name, spec in specs:
        if not (is_integer(spec) or (isinstance(spec, str) and spec)):
            where = "" if name is None else f" for array {name!r}"
            raise ConfigError(f"sample_dim must be a dimension name or an axis number{where}, got {spec!r}")


def _own_policy(store: Store) -> RetryPolicy:
    """The policy a store that retries by itself runs under (its calls can take that long), else
    the default one."""
    return store.insitu_retry_policy if isinstance(store, RetriesItself) else RetryPolicy()


async def _bounded(reading: Coroutine[Any, Any, T], store: Store, policy: RetryPolicy, what: str) -> T:
    """``reading`` under the policy's longest call: a hung store that insitu did not build (a zarr
    ``FsspecStore`` over HTTP) would otherwise keep discovery waiting forever. A store's own
    timeout that fires first is raised as it came (it names its own limit)."""
    limit = policy.longest_call_s()
    deadline = asyncio.timeout(limit)
    try:
        async with deadline:
            return await reading
    except StoreTimeoutError:
        raise
    except TimeoutError as exc:
        name = str(getattr(store, "url", None) or store)
        if deadline.expired():
            raise StoreTimeoutError(name, None, limit, f"{what} (all requests together)") from None
        # The store's own timeout fired first: the same error type, its limit and key kept.
        own_limit = getattr(exc, "limit_s", None)
        key = getattr(exc, "key", None)
        raise StoreTimeoutError(name, key if isinstance(key, str) else None, own_limit, what) from exc


async def _open_arrays(
    store: Store, path: str, wanted: list[str] | None, broken: dict[str, str] | None = None
) -> dict[str, Any]:
    """The arrays to describe, by name, opened with as few sequential metadata reads as possible.

    Named variables are opened directly and concurrently (one round trip,
    which on object storage is most of the startup); otherwise the group and
    then all its members' metadata (two). Only when that fails is the store
    listed, to name what it does have.
    """
    prefix = f"{path.rstrip('/')}/" if path else ""
    if wanted is not None:
        opened = await asyncio.gather(
            *(zarr_async.open_array(store=store, path=prefix + v, mode="r") for v in wanted),
            return_exceptions=True,
        )
        if not any(isinstance(a, BaseException) for a in opened):
            return dict(zip(wanted, opened, strict=True))
        for v, a in zip(wanted, opened, strict=True):
            if isinstance(a, BaseException) and not isinstance(a, _NOT_FOUND):
                raise MetadataError(f"array {prefix + v!r} has metadata zarr cannot read: {a}") from a
        members = await _members(store, path)
        missing = [v for v in wanted if v not in members]
        if missing:
            raise ConfigError(f"unknown variable(s) {missing}; the store has {sorted(members)}")
        return {v: members[v] for v in wanted}
    return await _members(store, path, broken)


async def _members(store: Store, path: str, broken: dict[str, str] | None = None) -> dict[str, Any]:
    """Every array at ``path``: the group's members (name order), or the array itself. Members
    whose metadata zarr cannot read are left out, each with why in ``broken``."""
    broken = {} if broken is None else broken
    try:
        group = await zarr_async.open_group(store=store, path=path, mode="r")
    except _NOT_A_GROUP as exc:
        try:
            arr = await zarr_async.open_array(store=store, path=path, mode="r")
        except _NOT_FOUND:
            message = f"no Zarr array or group at {store!r} path {path!r}: {exc}"
            shown = redact_urls(message)  # a store built elsewhere may show its URL's password
            raise MetadataError(shown) from (exc if shown == message else None)
        return {arr.basename or "data": arr}
    try:
        found = [item async for item in group.arrays()]
    except _NOT_FOUND:
        raise
    except Exception:  # one member's metadata is broken: open them one by one
        found = await _members_one_by_one(store, path, broken)
    # Sorted: listing order differs between stores and even between processes, and label
    # order is part of a dataset's identity (resume state, batch key order).
    return dict(sorted(found, key=lambda item: item[0]))


async def _members_one_by_one(store: Store, path: str, broken: dict[str, str]) -> list[tuple[str, Any]]:
    """The arrays at ``path`` that open, each on its own; the others go to ``broken`` with zarr's
    reason (subgroups and other non-arrays are left out silently, as the group listing does)."""
    prefix = f"{path.rstrip('/')}/" if path else ""
    names = sorted({n async for n in store.list_dir(prefix)} - {"zarr.json", ".zgroup", ".zattrs", ".zarray"})
    opened = await asyncio.gather(
        *(zarr_async.open_array(store=store, path=prefix + n, mode="r") for n in names),
        return_exceptions=True,
    )
    found = []
    for name, a in zip(names, opened, strict=True):
        if not isinstance(a, BaseException):
            found.append((name, a))
        elif not isinstance(a, (*_NOT_A_GROUP, zarr.errors.ContainsGroupError)):
            broken[name] = f"its metadata cannot be read: {a}"
    return found


def _data_variables(
    arrays: dict[str, zarr.Array], dims: Mapping[str, tuple[str | None, ...] | None], skipped: dict[str, str]
) -> dict[str, zarr.Array]:
    """The arrays default discovery reads: not coordinates, numeric, at least two dimensions."""
    dim_names = {d for names in dims.values() if names for d in names}
    listed: dict[str, str] = {}  # non-index coordinates, named in a variable's ``coordinates`` attribute
    for name, arr in arrays.items():
        for c in str(arr.attrs.get("coordinates", "")).split():
            listed.setdefault(c, name)
    out = {}
    for name, arr in arrays.items():
        if name in dim_names and dims[name] is not None and tuple(dims[name] or ()) == (name,):
            skipped[name] = "coordinate"
        elif name in listed:
            skipped[name] = f"coordinate of {listed[name]!r}"
        elif np.dtype(arr.dtype).kind not in "biufc":
            skipped[name] = f"dtype {arr.dtype} is not numeric"
        elif arr.ndim < 2:
            skipped[name] = "one-dimensional: name it in variables= to read it"
        else:
            out[name] = arr
    return out


def _default_sample_dim(dims: Mapping[str, tuple[str | None, ...] | None], times: set[str]) -> str | None:
    """The dimension leading the arrays, as CF and xarray lay data out (time first).

    Among the dimensions that lead some array: a time axis (datetime
    coordinate) first, then the one leading the most arrays, then the one
    leading the array with the most dimensions (a static field leads with
    latitude but has fewer dimensions than the fields sampled in time), then
    the name first in order."""
    named = [names for names in dims.values() if names and names[0]]
    if not named:
        return None
    leading = Counter(names[0] for names in named)
    widest = {d: max(len(names) for names in named if names[0] == d) for d in leading}
    ranked = sorted(leading, key=lambda d: (d not in times, -leading[d], -widest[d], d))
    return ranked[0]


def _geometry_or_none(
    arr: zarr.Array,
    name: str,
    axis_spec: SampleAxis,
    explicit: bool,
    include_static: bool,
    skipped: dict[str, str],
) -> ArrayGeometry | None:
    meta = arr.metadata.to_dict()
    dims = _dimension_names(arr, meta)
    dtype = np.dtype(arr.dtype)
    if dtype.kind not in "biufc":
        if explicit:
            raise ConfigError(f"array {name!r} has dtype {dtype}; only numeric arrays can be batched")
        skipped[name] = f"dtype {dtype} is not numeric"
        return None
    static = False
    axis = 0
    if isinstance(axis_spec, str):
        if dims is None:
            if explicit:
                raise ConfigError(
                    f"array {name!r} does not name its dimensions, so it has no dimension {axis_spec!r}; "
                    "give sample_dim as an axis number for it"
                )
            skipped[name] = f"its dimensions are unnamed (no {axis_spec!r})"
            return None
        if axis_spec in dims:
            axis = dims.index(axis_spec)
        elif explicit or include_static:
            static = True
        else:
            skipped[name] = (
                f"no {axis_spec!r} dimension (dimensions {list(dims)}): static; name it in "
                "variables= or pass include_static=True to deliver it with every batch"
            )
            return None
    else:
        axis = int(axis_spec)
    shards = getattr(arr, "shards", None)
    return ArrayGeometry(
        name=name,
        path=arr.path,
        shape=tuple(arr.shape),
        dtype=dtype.newbyteorder("=") if not dtype.isnative else dtype,
        chunk_shape=tuple(arr.chunks),
        sample_axis=axis,
        fill_value=_scalar(arr.fill_value),
        zarr_format=int(meta.get("zarr_format", 3)),  # type: ignore[arg-type]  # JSON value, an int here
        shard_shape=tuple(shards) if shards is not None else None,
        dimension_names=dims,
        metadata=meta,
        static=static,
    )


async def _read_coordinates(
    store: Store, path: str, wanted: Iterable[str]
) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
    """Decoded values and attributes of the coordinate arrays (a 1-D array named like its dimension)
    of the dimensions ``wanted``, read concurrently; a dimension without one is left out."""
    from insitu.arrays.cf import decode_coordinate

    prefix = f"{path.rstrip('/')}/" if path else ""

    async def one(dim: str) -> tuple[str, np.ndarray, dict[str, Any]] | None:
        try:
            arr = await zarr_async.open_array(store=store, path=prefix + dim, mode="r")
        except (*_NOT_FOUND, zarr.errors.ContainsGroupError):
            return None
        if arr.ndim != 1:
            return None
        attrs = dict(arr.attrs)
        names = arr.metadata.to_dict().get("dimension_names") or attrs.get("_ARRAY_DIMENSIONS")
        if names is not None and list(names) != [dim]:  # type: ignore[arg-type]  # a JSON list
            return None
        raw = np.asarray(await arr.getitem(slice(None)))
        fill = _scalar(arr.metadata.fill_value) if arr.metadata.zarr_format == 2 else None
        values = decode_coordinate(raw, attrs, name=dim, fill_value=fill)
        return dim, values, attrs

    found = await asyncio.gather(*(one(d) for d in wanted))
    coords = {f[0]: f[1] for f in found if f is not None}
    attrs = {f[0]: f[2] for f in found if f is not None}
    return coords, attrs


def _can_be_node(dim: Any) -> TypeGuard[str]:
    """True when a dimension name can also name a coordinate array: ``..``, ``a/b`` or a non-string
    cannot (looking one up would be a path outside the group), so such a dimension has none."""
    return isinstance(dim, str) and dim not in ("", ".", "..") and "/" not in dim and "\\" not in dim


def _dimension_names(arr: zarr.Array, meta: Mapping[str, Any]) -> tuple[str | None, ...] | None:
    names = meta.get("dimension_names")
    if names is None:
        names = arr.attrs.get("_ARRAY_DIMENSIONS")  # xarray's convention for Zarr v2
    return tuple(names) if names is not None else None  # type: ignore[arg-type]  # a JSON list of names


def _scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value
