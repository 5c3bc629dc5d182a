"""Read array geometries from a Zarr store (v2 or v3, sharded or not)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store

from insitu.errors import ConfigError
from insitu.geometry import ArrayGeometry

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
    """
    node = _open_node(store, path)
    if isinstance(node, zarr.Array):
        members = {node.basename or "data": node}
    else:
        # Sorted: listing order differs between stores and even between processes, and label
        # order is part of a dataset's identity (resume state, batch key order).
        members = dict(sorted(node.arrays(), key=lambda item: item[0]))
    if variables is not None:
        wanted = list(variables)
        missing = [v for v in wanted if v not in members]
        if missing:
            raise ConfigError(f"unknown variable(s) {missing}; the store has {sorted(members)}")
        chosen = {v: members[v] for v in wanted}
        explicit = True
    else:
        chosen = members
        explicit = False

    out: dict[str, ArrayGeometry] = {}
    for name, arr in chosen.items():
        axis_spec = (
            sample_axis[name] if isinstance(sample_axis, Mapping) and name in sample_axis else sample_axis
        )
        if isinstance(axis_spec, Mapping):
            axis_spec = 0
        geom = _geometry_or_none(arr, name, axis_spec, explicit)
        if geom is not None:
            out[name] = geom
    if not out:
        raise ConfigError(
            f"no array in the store matches variables={variables!r}, sample_axis={sample_axis!r}"
        )
    return out


def _open_node(store: Store, path: str) -> zarr.Array | zarr.Group:
    try:
        return zarr.open(store=store, mode="r", path=path)
    except (FileNotFoundError, KeyError, zarr.errors.NodeTypeValidationError) as exc:
        # zarr's NodeNotFoundError subclasses FileNotFoundError on 3.1 and 3.4
        raise ConfigError(f"no Zarr array or group at {store!r} path {path!r}: {exc}") from exc


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
