"""Read array geometries from a Zarr store (v2 or v3, sharded or not)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import zarr
import zarr.api.asynchronous as zarr_async
from zarr.abc.store import Store

from insitu.errors import ConfigError
from insitu.geometry import ArrayGeometry, is_integer
from insitu.loop import run_sync
from insitu.stores import redact_urls

# zarr's "no such node" errors: NodeNotFoundError subclasses FileNotFoundError on 3.1 and 3.4.
_NOT_FOUND = (FileNotFoundError, KeyError, zarr.errors.NodeTypeValidationError)
# Opening a group where an array is (or the reverse) raises one of these.
_NOT_A_GROUP = (*_NOT_FOUND, zarr.errors.ContainsArrayError)

SampleAxis = int | str


def open_geometries(
    store: Store,
    variables: Iterable[str] | None = None,
    sample_axis: SampleAxis | Mapping[str, SampleAxis] = 0,
    *,
    path: str = "",
) -> dict[str, ArrayGeometry]:
    """Describe the arrays of a Zarr group: ``{name: ArrayGeometry}``.

    ``sample_axis`` is an axis number, a dimension name (``"time"``), or a
    mapping from array name to either. With ``variables=None`` every numeric
    array with at least two dimensions (and, for a named sample axis, that
    dimension) is included; name 1-D arrays explicitly to read them.

    Raises ConfigError naming the bad value for a malformed ``variables`` or
    ``sample_axis`` (a mapping naming an array that is not read included),
    and naming the array and its shape for one whose sample axis is empty.
    """
    wanted = _variable_names(variables)
    explicit = wanted is not None
    _check_sample_axis(sample_axis)
    if not isinstance(path, str):
        raise ConfigError(f"path must be a string (a group inside the store), got {path!r}")
    # Opened on the engine's loop; zarr.Array wraps each AsyncArray for its metadata (no IO).
    chosen = {name: zarr.Array(a) for name, a in run_sync(_open_arrays(store, path, wanted)).items()}
    if isinstance(sample_axis, Mapping):
        unknown = sorted(set(sample_axis) - set(chosen))
        if unknown:
            raise ConfigError(
                f"sample_axis names unknown array(s) {unknown}; the arrays read are {sorted(chosen)}"
            )
    out: dict[str, ArrayGeometry] = {}
    for name, arr in chosen.items():
        axis_spec: SampleAxis = sample_axis.get(name, 0) if isinstance(sample_axis, Mapping) else sample_axis
        try:
            geom = _geometry_or_none(arr, name, axis_spec, explicit)
        except ConfigError as exc:
            if explicit:
                raise
            # The user did not name this array (default discovery picked it): say how to skip it.
            raise ConfigError(f"{exc}; name the arrays to read with variables=[...]") from None
        if geom is not None:
            out[name] = geom
    if not out:
        raise ConfigError(
            f"no array in the store matches variables={variables!r}, sample_axis={sample_axis!r}"
        )
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


def _check_sample_axis(sample_axis: Any) -> None:
    """An axis number, a dimension name, or a mapping from array name to either."""
    specs = sample_axis.items() if isinstance(sample_axis, Mapping) else [(None, sample_axis)]
    for name, spec in specs:
        if not (is_integer(spec) or (isinstance(spec, str) and spec)):
            where = "" if name is None else f" for array {name!r}"
            raise ConfigError(f"sample_axis must be an axis number or a dimension name{where}, got {spec!r}")


async def _open_arrays(store: Store, path: str, wanted: list[str] | None) -> dict[str, Any]:
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
        members = await _members(store, path)
        missing = [v for v in wanted if v not in members]
        if missing:
            raise ConfigError(f"unknown variable(s) {missing}; the store has {sorted(members)}")
        return {v: members[v] for v in wanted}
    return await _members(store, path)


async def _members(store: Store, path: str) -> dict[str, Any]:
    """Every array at ``path``: the group's members (name order), or the array itself."""
    try:
        group = await zarr_async.open_group(store=store, path=path, mode="r")
    except _NOT_A_GROUP as exc:
        try:
            arr = await zarr_async.open_array(store=store, path=path, mode="r")
        except _NOT_FOUND:
            message = f"no Zarr array or group at {store!r} path {path!r}: {exc}"
            shown = redact_urls(message)  # a store built elsewhere may show its URL's password
            raise ConfigError(shown) from (exc if shown == message else None)
        return {arr.basename or "data": arr}
    # Sorted: listing order differs between stores and even between processes, and label
    # order is part of a dataset's identity (resume state, batch key order).
    return dict(sorted([item async for item in group.arrays()], key=lambda item: item[0]))


def _geometry_or_none(
    arr: zarr.Array, name: str, axis_spec: SampleAxis, explicit: bool
) -> ArrayGeometry | None:
    meta = arr.metadata.to_dict()
    dims = _dimension_names(arr, meta)
    dtype = np.dtype(arr.dtype)
    if dtype.kind not in "biufc":
        if explicit:
            raise ConfigError(f"array {name!r} has dtype {dtype}; only numeric arrays can be batched")
        return None
    if not explicit and arr.ndim < 2:  # coordinates (time, lat, lon): name them to read them
        return None
    if isinstance(axis_spec, str):
        if dims is None or axis_spec not in dims:
            if explicit:
                raise ConfigError(f"array {name!r} has no dimension named {axis_spec!r} (dimensions: {dims})")
            return None
        axis = dims.index(axis_spec)
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
    )


def _dimension_names(arr: zarr.Array, meta: Mapping[str, Any]) -> tuple[str | None, ...] | None:
    names = meta.get("dimension_names")
    if names is None:
        names = arr.attrs.get("_ARRAY_DIMENSIONS")  # xarray's convention for Zarr v2
    return tuple(names) if names is not None else None  # type: ignore[arg-type]  # a JSON list of names


def _scalar(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    return value
