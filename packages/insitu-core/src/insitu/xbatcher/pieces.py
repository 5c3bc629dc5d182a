"""xbatcher's batches as xarray objects, built from the boxes the engine read.

A piece takes its coordinates, attributes and layout from a *frame*: the user's Dataset (or
DataArray) with its coordinates in memory and each data variable replaced by a placeholder of
its shape that holds no memory (a zero-strided view), so that selecting a piece of the frame
costs no read and yields exactly what selecting it on the user's object would. The engine's
values then replace the placeholders. xbatcher's shaping follows:

- other dimensions than the input ones, when there are two or more, are stacked into
  ``sample``, which comes first, followed by the input dimensions;
- with ``concat_input_dims``, each input dimension ``d`` of a piece is renamed ``d_input`` (its
  coordinate keeps the name ``d``) and the pieces are concatenated along ``input_batch`` before
  that stacking.

xarray is imported only inside functions.
"""

from __future__ import annotations

import importlib
from collections.abc import Hashable, Mapping
from typing import Any

import numpy as np

from insitu.batch import Batch
from insitu.xbatcher.layout import ArgumentTypeError

#: The dimensions xbatcher makes: ``lat`` of a concatenated piece becomes ``lat_input``, pieces are
#: concatenated along ``input_batch``, and other dimensions are stacked into ``sample``.
INPUT_SUFFIX = "_input"
CONCAT_DIM = "input_batch"
SAMPLE_DIM = "sample"


def _xarray() -> Any:
    # Imported as a plain module: xarray is optional, and its objects are typed loosely here.
    return importlib.import_module("xarray")


def sizes_of(ds: Any) -> dict[Hashable, int]:
    """The dimension sizes of an ``xr.Dataset`` or ``xr.DataArray``; anything else is refused."""
    xr = _xarray()
    if not isinstance(ds, (xr.Dataset, xr.DataArray)):
        raise ArgumentTypeError(
            f"expected an xarray Dataset or DataArray opened from Zarr, got {type(ds).__name__}"
        )
    return dict(ds.sizes)


def frame_of(ds: Any) -> Any:
    """``ds`` with its coordinates loaded and placeholders for its data variables."""

    def blank(var: Any) -> np.ndarray:
        return np.broadcast_to(np.zeros((), dtype=var.dtype), var.shape)

    if hasattr(ds, "data_vars"):
        frame = ds.copy(data={name: blank(var) for name, var in ds.data_vars.items()})
    else:
        frame = ds.copy(data=blank(ds))
    return frame.load()


def piece(
    frame: Any, batch: Batch, box: Mapping[str, int], start: Mapping[str, int], size: Mapping[str, int]
) -> Any:
    """The piece of ``size`` at ``start`` (per cut dimension, indices of the frame) out of the
    engine's batch of one box that starts at ``box``. A piece past the end of a dimension (a
    padded box) has missing coordinates there (NaN, NaT), and the engine's fill values."""
    within, pad = {}, {}
    for dim, first in start.items():
        length = frame.sizes[dim]
        stop = first + size[dim]
        within[dim] = slice(first, min(stop, length))
        if stop > length:
            pad[dim] = (0, stop - length)
    region = frame.isel(within)
    if pad:
        region = region.pad(pad)
    values = {}
    for name, dims in _variables(frame).items():
        cut = tuple(
            slice(start[d] - box[d], start[d] - box[d] + size[d]) if d in start else slice(None) for d in dims
        )
        values[name] = batch[name][0][cut]
    return region.copy(data=values if hasattr(frame, "data_vars") else next(iter(values.values())))


def stacked(obj: Any, inputs: tuple[str, ...]) -> Any:
    """Two or more dimensions besides ``inputs`` stacked into ``sample``, first, then ``inputs``;
    ``obj`` as it is otherwise."""
    others = [d for d in obj.sizes if d not in inputs]
    if len(others) < 2:
        return obj
    return obj.stack({SAMPLE_DIM: others}).transpose(SAMPLE_DIM, *inputs)


def concatenated(parts: list[Any], inputs: tuple[str, ...]) -> Any:
    """Pieces along ``input_batch``, each input dimension renamed ``<dim>_input`` (its coordinate
    kept under its own name along it), then stacked. A DataArray's pieces are joined as a
    Dataset's are: each piece keeps its own values and coordinates."""
    xr = _xarray()
    name = None if hasattr(parts[0], "data_vars") else parts[0].name
    renamed = []
    for part in parts:
        one = part if name is None else part.to_dataset()
        for dim in inputs:
            if dim in one.indexes:
                one = one.drop_indexes(dim)
            one = one.rename_dims({dim: dim + INPUT_SUFFIX})
        renamed.append(one)
    # xarray's defaults at the time of writing, which it has announced it will change, spelled out.
    # Pieces share every index left (their input dimensions have none), so "exact" holds.
    joined = xr.concat(
        renamed, dim=CONCAT_DIM, data_vars="all", coords="different", compat="equals", join="exact"
    )
    out = stacked(joined, tuple(d + INPUT_SUFFIX for d in inputs))
    return out if name is None else out[name]


def _variables(frame: Any) -> dict[str, tuple[str, ...]]:
    """``{name: dims}`` of the frame's data variables (a DataArray: itself)."""
    if hasattr(frame, "data_vars"):
        return {str(name): tuple(map(str, var.dims)) for name, var in frame.data_vars.items()}
    return {str(frame.name): tuple(map(str, frame.dims))}
