"""``BatchGenerator``: xbatcher's generator over boxes the patch engine reads.

Each batch is one box of the array (:mod:`insitu.xbatcher.layout`), read as one patch of an
:class:`~insitu.InSituDataset` whose patch is the box (every dimension named, the whole extent
of those xbatcher does not cut) and whose stride is the step between boxes. The engine decodes
each stored chunk once per pass for every box that touches it and delivers the boxes in chunk
order; the generator shapes each into xbatcher's batch (:mod:`insitu.xbatcher.pieces`) and
skips boxes no batch has (past the last batch xbatcher makes). ``bg[i]`` reads on from an open
pass when ``i`` is where it stands, and otherwise starts a pass at ``i`` (resume).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitu.arrays.cf import cf_transform_for
from insitu.arrays.geometry import ArrayGeometry
from insitu.batch import Batch
from insitu.dataset import InSituDataset
from insitu.errors import ConfigError
from insitu.plan.patches_split import split_by_region
from insitu.views import DatasetView, ViewIterator
from insitu.xarray_source import geometries_from_xarray
from insitu.xbatcher.layout import BatchLayout, plan_batches
from insitu.xbatcher.pieces import concatenated, frame_of, piece, sizes_of, stacked

#: Dataset options the generator sets itself from xbatcher's arguments.
_OWN_OPTIONS = ("patch", "patch_stride", "patch_edge", "patch_sampling", "patches_per_epoch", "batch_size")


class BatchGenerator:
    """xbatcher's ``BatchGenerator``, reading each stored chunk once per pass.

    ``len(bg)`` is the number of batches; ``bg[i]`` the ``i``-th of the current epoch's order,
    which iteration follows too. ``bg.dataset`` is the :class:`~insitu.InSituDataset` reading
    the boxes (``bg.dataset.stats`` counts decoded chunks). Close it (or use ``with``) to release
    the engine's threads at a known point.

    Parameters
    ----------
    ds
        An ``xr.Dataset`` or named ``xr.DataArray`` opened from Zarr (``xr.open_zarr``); its data
        variables share their dimensions (a variable without the leading one is a static field).
    input_dims
        Size of a piece per dimension, e.g. ``{"lat": 64, "lon": 64}``; pieces that would run past
        the end are left out (``edge`` changes that).
    input_overlap
        Overlap of consecutive pieces per dimension (the stride is the size minus the overlap).
    batch_dims
        Length of a batch along dimensions ``input_dims`` does not name (they are cut too); with
        ``concat_input_dims``, also along input dimensions, to group their pieces.
    concat_input_dims
        Concatenate the pieces of a batch along ``input_batch`` (input dimensions renamed
        ``<dim>_input``) instead of yielding one piece per batch.
    preload_batch
        Accepted for compatibility: batches always hold data in memory (the engine has read it).
    cache, cache_preprocess
        xbatcher's experimental batch cache: not supported (insitu's pool caches decoded chunks;
        see ``cache_budget_bytes``); anything but None is a ConfigError.
    shuffle
        insitu only: deliver the batches in a shuffled order (blocks of chunks permuted, batches
        mixed inside a block), new each epoch (:meth:`set_epoch`); False (the default) reads them
        in chunk order.
    seed
        insitu only: the shuffle seed.
    edge
        insitu only: what happens to a piece that would run past the end of a dimension:
        ``"drop"`` (xbatcher's behaviour, the default), ``"shift"`` (moved inward to end at the
        edge) or ``"pad"`` (filled with NaN, or the fill value; its coordinates NaN). Only
        ``"drop"`` with ``concat_input_dims``.
    dataset_options
        Other keywords of :class:`~insitu.InSituDataset` (``cache_budget_bytes``,
        ``block_chunks``, ``decode_threads``...); the patch options and ``batch_size`` are set here.

    """

    def __init__(
        self,
        ds: Any,
        input_dims: Mapping[str, int],
        input_overlap: Mapping[str, int] | None = None,
        batch_dims: Mapping[str, int] | None = None,
        concat_input_dims: bool = False,
        preload_batch: bool = True,
        cache: Any = None,
        cache_preprocess: Any = None,
        *,
        shuffle: bool = False,
        seed: int = 0,
        edge: str = "drop",
        **dataset_options: Any,
    ) -> None:
        if cache is not None or cache_preprocess is not None:
            raise ConfigError(
                "cache= and cache_preprocess= (xbatcher's experimental batch cache) are not supported: "
                "insitu keeps decoded chunks in its pool instead (cache_budget_bytes=)"
            )
        taken = [k for k in _OWN_OPTIONS if k in dataset_options]
        if taken:
            raise ConfigError(
                f"{taken} are set by the generator from input_dims and batch_dims; leave them out"
            )
        sizes = sizes_of(ds)
        self.layout = plan_batches(sizes, input_dims, input_overlap, batch_dims, concat_input_dims)
        if edge not in ("drop", "shift", "pad"):
            raise ConfigError(f"edge={edge!r}; expected 'drop' (xbatcher's), 'shift' or 'pad'")
        if edge != "drop" and concat_input_dims:
            raise ConfigError(
                f"edge={edge!r} with concat_input_dims=True: concatenated pieces are whole pieces "
                "(edge='drop', xbatcher's behaviour)"
            )
        self.ds = ds
        self.input_dims = dict(input_dims)
        self.input_overlap = {} if input_overlap is None else input_overlap
        self.batch_dims = {} if batch_dims is None else dict(batch_dims)
        self.concat_input_dims = bool(concat_input_dims)
        self.preload_batch = preload_batch
        self.edge = edge
        self._frame = frame_of(ds)
        self.dataset, self._axes = _open(ds, self.layout, edge, shuffle, seed, dataset_options)
        self._view: DatasetView = self.dataset.view("train")
        self._orders: dict[int, _Order] = {}
        self._lock = threading.Lock()
        self._cursor: _Cursor | None = None

    # -- xbatcher's interface -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._order().engine_index)

    def __iter__(self) -> Iterator[Any]:
        order = self._order()
        with self._lock:
            passing = iter(self._view)
        try:
            for batch in passing:
                i = order.position[batch.index]
                if i >= 0:
                    yield self._to_xarray(batch, order.which(i))
        finally:
            passing.close()

    def __getitem__(self, idx: int) -> Any:
        if not isinstance(idx, (int, np.integer)):
            raise NotImplementedError(f"{type(self).__name__}[...] takes a single integer, got {idx!r}")
        order = self._order()
        n = len(order.engine_index)
        i = int(idx) + n if idx < 0 else int(idx)
        if not 0 <= i < n:
            raise IndexError(f"batch index {idx} is out of range for {n} batches")
        return self._to_xarray(self._engine_batch(int(order.engine_index[i])), order.which(i))

    # -- insitu's additions ----------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next pass (and ``bg[i]``) follows; with ``shuffle=True``
        each epoch has its own order."""
        self.dataset.set_epoch(epoch)

    def close(self) -> None:
        """Release the engine's threads and its pool now."""
        with self._lock:
            self._drop_cursor()
        self.dataset.close()

    def __enter__(self) -> BatchGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"BatchGenerator(input_dims={self.input_dims}, input_overlap={self.input_overlap}, "
            f"batch_dims={self.batch_dims}, concat_input_dims={self.concat_input_dims}, "
            f"edge={self.edge!r}, batches={len(self)})"
        )

    # -- from engine batches to xbatcher's -----------------------------------------------------------
    def _order(self) -> _Order:
        """The batches of the current epoch, in the engine's order (planned, nothing read)."""
        epoch = self.dataset.epoch
        found = self._orders.get(epoch)
        if found is None:
            origins = self._view.patch_order()
            starts = {dim: origins[:, axis] - first for dim, (axis, first) in self._axes.items()}
            found = _order_of(self.layout, starts, len(origins), every=self.edge != "drop")
            self._orders = {epoch: found}
        return found

    def _engine_batch(self, index: int) -> Batch:
        """Batch ``index`` of the engine's pass: the next one of an open pass when that is where it
        stands (reading in order costs one pass), else a pass started there."""
        with self._lock:
            cursor = self._cursor
            epoch = self.dataset.epoch
            if cursor is None or cursor.epoch != epoch or not cursor.done <= index <= cursor.done + 8:
                self._drop_cursor()
                state = self._view.state_dict()
                state.update(epoch=epoch, batches_done=index, resumed_from=[])
                self._view.load_state_dict(state)
                cursor = self._cursor = _Cursor(iter(self._view), epoch, index)
            while True:
                batch = next(cursor.passing)
                cursor.done = batch.index + 1
                if batch.index == index:
                    return batch

    def _drop_cursor(self) -> None:
        if self._cursor is not None:
            self._cursor.passing.close()
            self._cursor = None

    def _to_xarray(self, batch: Batch, which: tuple[int, ...] | None) -> Any:
        """xbatcher's batch out of one engine batch (one box)."""
        origin = batch.patch_origins
        assert origin is not None
        box = {dim: int(origin[0, axis]) - first for dim, (axis, first) in self._axes.items()}
        if which is None:  # a box of its own (edge "shift" or "pad"): one piece, where it was placed
            starts = [{d.dim: box[d.dim] for d in self.layout.dims}]
        else:
            starts = self.layout.pieces_of(which)
        size = {d.dim: d.size for d in self.layout.dims}
        parts = [piece(self._frame, batch, box, start, size) for start in starts]
        if not self.concat_input_dims:
            return stacked(parts[0], tuple(self.input_dims))
        return concatenated(parts, tuple(self.input_dims))


@dataclass(frozen=True)
class _Order:
    """One epoch's batches: the engine batch of each (``engine_index``), the batch index per sliced
    dimension of each (``batches``, one row each; None when each box is a batch on its own), and
    per engine batch its position among them (``position``; -1 for a box that is no batch)."""

    engine_index: np.ndarray
    batches: np.ndarray | None
    position: np.ndarray

    def which(self, i: int) -> tuple[int, ...] | None:
        """Batch ``i``'s index per sliced dimension (None: its box is the batch)."""
        return None if self.batches is None else tuple(int(k) for k in self.batches[i])


@dataclass
class _Cursor:
    """An open pass that ``bg[i]`` reads on from: its iterator, epoch, and batches done."""

    passing: ViewIterator
    epoch: int
    done: int


def _order_of(layout: BatchLayout, starts: Mapping[str, np.ndarray], n: int, *, every: bool) -> _Order:
    """The batches among ``n`` boxes starting at ``starts`` (per dimension, in the engine's order)."""
    if every:  # each box a batch, wherever the edge policy put it
        index = np.arange(n, dtype=np.int64)
        batches = None
    else:
        keep = np.ones(n, dtype=bool)
        ks = []
        for d in layout.dims:
            k, off = np.divmod(starts[d.dim], d.box_stride)
            keep &= (off == 0) & (k < d.batches)
            ks.append(k)
        index = np.flatnonzero(keep)
        batches = np.stack(ks, axis=1)[index] if ks else np.zeros((len(index), 0), dtype=np.int64)
    position = np.full(n, -1, dtype=np.int64)
    position[index] = np.arange(len(index))
    return _Order(index, batches, position)


def _open(
    ds: Any, layout: BatchLayout, edge: str, shuffle: bool, seed: int, options: Mapping[str, Any]
) -> tuple[InSituDataset, dict[str, tuple[int, int]]]:
    """The dataset reading one box per batch, and per dimension of the reference variable its
    axis in the stored array and the stored index of its first element."""
    store, geoms, cf_decode = geometries_from_xarray(ds)
    sampled = [g for g in geoms.values() if not g.static]
    if not sampled:
        raise ConfigError("no data variable has the leading dimension; every one is static")
    variables = ds.data_vars if hasattr(ds, "data_vars") else {ds.name: ds}
    for label, geom in geoms.items():
        # Pieces are cut from the engine's arrays by the variables' dimensions, in stored order.
        stored = tuple(geom.dimension_names or ())
        kept = tuple(n for a, n in enumerate(stored) if (c := geom.axis_selection(a)) is None or c.keep)
        if tuple(map(str, variables[label].dims)) != kept:
            raise ConfigError(
                f"variable {label!r} has dimensions {tuple(variables[label].dims)} where its Zarr array "
                f"has {kept}; pass the variables in their stored order (not transposed after opening)"
            )
    ref = sampled[0]
    names = ref.dimension_names or ()
    dims = [str(d) for d in variables[ref.label].dims]
    missing = [d.dim for d in layout.dims if d.dim not in dims]
    if missing:
        raise ConfigError(
            f"dimension(s) {missing} are not dimensions of the data variable {ref.label!r} ({dims}); "
            "insitu cuts the data variables' dimensions"
        )
    axes = {}
    for dim in dims:
        axis = names.index(dim)
        chosen = ref.axis_selection(axis)
        axes[dim] = (axis, chosen.indices[0] if chosen is not None else 0)
    sliced = {d.dim: d for d in layout.dims}
    patch: dict[str | int, int] = {
        dim: sliced[dim].box if dim in sliced else int(ds.sizes[dim]) for dim in dims
    }
    stride: dict[str | int, int] = {
        dim: sliced[dim].box_stride if dim in sliced else int(ds.sizes[dim]) for dim in dims
    }
    if layout.concat:
        edge = "pad" if any(d.ragged for d in layout.dims) else "drop"
    # One cell over the whole array: every box is in the one split, whatever its extent in time.
    n_chunks = -(-ref.shape[ref.sample_axis] // ref.chunk_shape[ref.sample_axis])
    split = split_by_region(ref, (1.0,), dims=[ref.sample_axis], cell_chunks=n_chunks, names=["train"])
    decoding: dict[str, Any] = {}
    if "cf_decode" not in options and "chunk_transforms" not in options:
        decoding = _decoded_as_xarray(ds, geoms, cf_decode)
    dataset = InSituDataset(
        store,
        split,
        geoms,
        **({"cf_decode": cf_decode} | decoding),
        batch_size=1,
        patch=patch,
        patch_stride=stride,
        patch_edge=edge,
        shuffle=shuffle,
        seed=seed,
        **options,
    )
    return dataset, axes


def _decoded_as_xarray(
    ds: Any, geoms: Mapping[str, ArrayGeometry], cf_decode: Mapping[str, bool]
) -> dict[str, Any]:
    """``cf_decode`` and ``chunk_transforms`` that decode CF-packed variables to the dtype xarray
    gives them, as xbatcher's batches hold them (xarray: float64 for packed integers; insitu's
    default: float32 up to 16 bits)."""
    variables = ds.data_vars if hasattr(ds, "data_vars") else {ds.name: ds}
    decode = dict(cf_decode)
    transforms = {}
    for label, geom in geoms.items():
        want = np.dtype(variables[label].dtype)
        if not decode.get(geom.name) or want.kind != "f":
            continue
        decoder = cf_transform_for(geom.metadata, name=geom.name, dtype=want)
        if decoder is not None:
            decode[geom.name] = False
            transforms[geom.name] = [decoder]
    return {"cf_decode": decode, "chunk_transforms": transforms} if transforms else {}
