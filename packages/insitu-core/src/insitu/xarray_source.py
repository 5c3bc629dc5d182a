"""Open an ``xr.Dataset`` read from Zarr as an insitu dataset: same store, arrays, dims and coords.

xarray stays optional: this module imports it only inside functions. A
Dataset opened with ``xr.open_zarr`` (``chunks=None``, or dask-backed) is
mapped back to the zarr store and array paths it reads, without loading
data. Positional and label selections already applied to it on dimensions
other than the sample dimension (``ds.sel(level=[500, 850])``,
``ds.isel(latitude=slice(0, 90))``) are kept, as insitu selections: only
the chunks they touch are read. CF decoding is done by insitu's own chunk
transform, on unless the Dataset was opened with ``decode_cf=False`` or
``mask_and_scale=False``. A Dataset not backed by Zarr (computed, in
memory, netCDF) is refused with a message saying so.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store

from insitu.arrays.discovery import Geometries, open_geometries, select
from insitu.arrays.geometry import ArrayGeometry
from insitu.errors import ConfigError
from insitu.plan.splits import SplitManifest, split_by_chunk

_CF_ATTRS = ("scale_factor", "add_offset", "_FillValue", "missing_value", "_Unsigned")


def geometries_from_xarray(
    ds: Any,
    *,
    sample_dim: str | None = None,
    variables: Sequence[str] | None = None,
    sel: Mapping[str, Any] | None = None,
    isel: Mapping[str, Any] | None = None,
) -> tuple[Store, Geometries, dict[str, bool]]:
    """``(store, geometries, cf_decode)`` for the data variables of ``ds`` (or ``variables``).

    ``sample_dim`` defaults to the dimension leading most variables (see
    :func:`insitu.open_geometries`); a variable without it is static.
    ``sel`` / ``isel`` select on other dimensions (see :func:`insitu.select`).
    ``cf_decode`` says, per array, whether insitu should CF-decode it (False
    where the Dataset shows the raw encoding)."""
    dataset = _as_dataset(ds)
    names = list(dataset.data_vars) if variables is None else _names(variables, dataset)
    if not names:
        raise ConfigError("the Dataset has no data variables to read")
    backing = {name: _backing(name, dataset[name]) for name in names}
    stores = {id(arr.store): arr.store for arr, _ in backing.values()}
    if len(stores) > 1:
        raise ConfigError(
            f"the variables {names} come from {len(stores)} different Zarr stores; open one store per dataset"
        )
    store = next(iter(stores.values()))
    paths = {name: arr.path for name, (arr, _) in backing.items()}
    group = _common_group(paths)
    relative = [p[len(group) + 1 :] if group else p for p in paths.values()]
    geoms = open_geometries(store, relative, sample_dim=sample_dim, path=group)  # None: discovery's default
    renamed = Geometries()
    for name, rel in zip(names, relative, strict=True):
        g = geoms[rel]
        g = _with_xarray_selection(g, dataset[name], backing[name][1])
        renamed[name] = g if g.name == name else g.named(name)
    renamed.sample_dim, renamed.skipped, renamed.coords = geoms.sample_dim, geoms.skipped, geoms.coords
    renamed.chosen_by_default = geoms.chosen_by_default
    if sel or isel:
        renamed.update(select(renamed, sel=sel, isel=isel))
    cf_decode = {renamed[n].name: not any(k in dataset[n].attrs for k in _CF_ATTRS) for n in names}
    return store, renamed, cf_decode


def from_xarray(
    ds: Any,
    manifest: SplitManifest | None = None,
    *,
    sample_dim: str | None = None,
    variables: Sequence[str] | None = None,
    sel: Mapping[str, Any] | None = None,
    isel: Mapping[str, Any] | None = None,
    splits: Mapping[str, tuple[Any, Any]] | Sequence[float] = (0.8, 0.1, 0.1),
    **dataset_options: Any,
) -> Any:
    """An :class:`~insitu.InSituDataset` reading the Zarr store behind ``ds`` in place.

    ``ds`` is an ``xr.Dataset`` (or ``DataArray``) opened from Zarr, or a
    path/URL of a Zarr store (opened without xarray). ``splits`` is either
    ``{"train": ("1979", "2015"), "val": ("2016", "2017")}`` (coordinate
    ranges on the sample dimension, see :func:`insitu.split_by_coord`) or
    chunk fractions (see :func:`insitu.split_by_chunk`); ``manifest``
    overrides both. ``sample_dim``, ``variables``, ``sel`` and ``isel`` choose
    the arrays as :func:`geometries_from_xarray` does (default: every data
    variable). Other keywords (``dataset_options``) go to
    :class:`~insitu.InSituDataset`.
    """
    from insitu.dataset import InSituDataset

    if isinstance(ds, (str, os.PathLike)):
        from insitu.store.opener import open_store

        store = open_store(ds)
        geoms = open_geometries(store, variables, sample_dim=sample_dim)
        geoms = Geometries(select(geoms, sel=sel, isel=isel)) if (sel or isel) else geoms
        cf_decode: Any = dataset_options.pop("cf_decode", True)
    else:
        store, geoms, found = geometries_from_xarray(
            ds, sample_dim=sample_dim, variables=variables, sel=sel, isel=isel
        )
        cf_decode = dataset_options.pop("cf_decode", found)
    sampled = [g for g in geoms.values() if not g.static]
    if not sampled:
        raise ConfigError(f"no variable has the sample dimension {sample_dim!r}; every one is static")
    if manifest is None:
        manifest = _manifest(sampled[0], splits)
    return InSituDataset(store, manifest, geoms, cf_decode=cf_decode, **dataset_options)


def register_xarray_accessor() -> None:
    """Register ``ds.insitu`` on ``xr.Dataset``: ``ds.insitu.dataset(...)`` is :func:`from_xarray`
    and ``ds.insitu.geometries(...)`` the geometries of :func:`geometries_from_xarray`.

    Done by ``import insitu`` when xarray is already imported; call it when
    xarray is imported after insitu. Idempotent."""
    # Imported as a plain module: xarray is optional, and its accessor API is untyped.
    xr: Any = importlib.import_module("xarray")
    if getattr(xr.Dataset, "_insitu_accessor", False):
        return

    class InSituAccessor:
        """``ds.insitu``: train on this Dataset's Zarr store in place."""

        def __init__(self, ds: Any) -> None:
            self._ds = ds

        def dataset(self, manifest: SplitManifest | None = None, **options: Any) -> Any:
            """:func:`insitu.from_xarray` on this Dataset."""
            return from_xarray(self._ds, manifest, **options)

        def geometries(self, **options: Any) -> Geometries:
            """The geometries :func:`insitu.geometries_from_xarray` maps this Dataset to."""
            return geometries_from_xarray(self._ds, **options)[1]

    xr.register_dataset_accessor("insitu")(InSituAccessor)
    xr.Dataset._insitu_accessor = True


def _manifest(ref: ArrayGeometry, splits: Any) -> SplitManifest:
    if isinstance(splits, Mapping):
        from insitu.plan.splits import split_by_coord

        return split_by_coord(ref, splits)
    return split_by_chunk(ref, splits)


# -- finding the zarr arrays behind a Dataset --------------------------------------------------------
def _as_dataset(ds: Any) -> Any:
    if hasattr(ds, "data_vars") and hasattr(ds, "dims"):
        return ds
    if hasattr(ds, "to_dataset") and hasattr(ds, "variable"):  # a DataArray
        if ds.name is None:
            raise ConfigError("a DataArray without a name cannot be mapped to a Zarr array; give it its name")
        return ds.to_dataset()
    raise ConfigError(
        f"expected an xarray Dataset opened from Zarr (xr.open_zarr) or a store path, got {type(ds).__name__}"
    )


def _names(variables: Sequence[str], dataset: Any) -> list[str]:
    if isinstance(variables, str):
        raise ConfigError(f"variables must be a list of names, got the string {variables!r}")
    names = list(variables)
    unknown = [n for n in names if n not in dataset.data_vars]
    if unknown:
        raise ConfigError(f"unknown variable(s) {unknown}; the Dataset has {list(dataset.data_vars)}")
    return names


def _backing(name: str, var: Any) -> tuple[zarr.Array, tuple[Any, ...] | None]:
    """The zarr array a variable reads, and the composed indexer xarray applies to it (None: whole)."""
    found = _walk(var.variable._data)
    if found is None:
        found = _from_dask_graph(var.variable._data)
        if found is not None:
            arr, key = found
            if key is not None or tuple(arr.shape) != tuple(var.shape):
                raise ConfigError(
                    f"variable {name!r} is a dask array sliced after opening; insitu cannot recover the "
                    "slice: pass the whole Dataset and choose samples with splits= (date ranges, e.g. "
                    "splits={'train': ('2020-01', '2020-06')}), other dimensions with sel=/isel= (or "
                    "open with xr.open_zarr(..., chunks=None))"
                )
    if found is None:
        raise ConfigError(
            f"variable {name!r} is not backed by a Zarr store (in memory, computed, or from another "
            "format); insitu reads Zarr in place: write it with to_zarr() and open it with xr.open_zarr()"
        )
    return found


def _from_dask_graph(data: Any) -> tuple[zarr.Array, tuple[Any, ...] | None] | None:
    """For a dask-backed variable: the lazy zarr array xarray put in the graph when it opened it."""
    layers = getattr(getattr(data, "dask", None), "layers", None)
    for layer in (layers or {}).values():
        for value in dict(layer).values():
            found = _walk(value)
            if found is not None:
                return found
    return None


def _walk(obj: Any) -> tuple[zarr.Array, tuple[Any, ...] | None] | None:
    """Follow xarray's lazy wrappers down to the zarr array, keeping the last lazy indexer."""
    key: tuple[Any, ...] | None = None
    for _ in range(32):  # a bounded walk: wrappers nest a handful deep
        inner = getattr(obj, "_array", None)
        if isinstance(inner, zarr.Array):
            return inner, key
        if isinstance(obj, zarr.Array):
            return obj, key
        k = getattr(obj, "key", None)
        if key is None and k is not None and hasattr(k, "tuple"):
            whole = all(isinstance(i, slice) and i == slice(None) for i in k.tuple)
            key = None if whole else tuple(k.tuple)
        nxt = getattr(obj, "array", None)
        if nxt is None or nxt is obj:
            return None
        obj = nxt
    return None


def _common_group(paths: Mapping[str, str]) -> str:
    parents = {p.rpartition("/")[0] for p in paths.values()}
    if len(parents) != 1:
        raise ConfigError(f"the variables live in different groups: {sorted(parents)}")
    return parents.pop()


def _with_xarray_selection(g: ArrayGeometry, var: Any, key: tuple[Any, ...] | None) -> ArrayGeometry:
    """``g`` with the selection xarray applies to the variable (positions in the stored array)."""
    if key is None:
        return g
    by_axis: dict[str | int, Any] = {}
    for axis, k in enumerate(key):
        if isinstance(k, slice) and k == slice(None):
            continue
        if not g.static and axis == g.sample_axis:
            raise ConfigError(
                f"variable {var.name!r} is sliced along the sample dimension {g.sample_dim!r}; choose "
                "samples with splits={'train': (start, stop), ...} instead of selecting them on the Dataset"
            )
        by_axis[axis] = list(np.asarray(k).tolist()) if isinstance(k, np.ndarray) else k
    return g.isel(by_axis) if by_axis else g
