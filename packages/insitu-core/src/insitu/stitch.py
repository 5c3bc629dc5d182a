"""Stitched inference: model outputs for patches, blended back into one Zarr array.

A :class:`PatchStitcher` takes what a model returns for each batch of a grid
pass (one output row per patch, placed by ``Batch.patch_origins``) and writes
the blend of every patch covering an element to a Zarr array of the full size.

**Each output chunk is written once.** Before the first batch the stitcher
walks the pass's origin list (``view.patch_order()``, read in pieces) and
counts, per output chunk (per shard when the array is sharded), the patches
that touch it. A chunk gets its accumulators (value sum and weight sum,
float64) when its first patch arrives and is normalised, written with one
store write and freed when its count reaches zero. So:

- the memory held is the chunks in progress: those touched by a patch that
  has arrived and by one that has not. In the order a view delivers, that is
  about the chunks of a block and the chunks it shares with blocks still to
  come; ``progress.peak_chunks_in_progress`` reports it, plus one int64 count
  per output chunk;
- a patch arriving for a chunk already written (a patch the pass does not
  hold, or one sent twice) is refused before anything is added;
- closing before every patch arrived raises :class:`~insitu.errors.IncompleteStitchError`
  naming the chunks left, unless ``close(partial=True)`` asks for what arrived
  to be written as it is.

Blending (``blend=``) is ``"mean"``, the plain average of the patches covering
an element, or ``"taper"``, an average weighted by a separable window that
ramps linearly over each axis's overlap (:func:`taper_window`); either way the
weights are normalised per element, so a constant input stays constant and
stitching the input patches themselves gives the input back. Only the valid
part of a padded patch (``patch_edge="pad"``) contributes; elements no patch
covers (``patch_edge="drop"``, gaps between patches) hold the fill value.

numpy and zarr only; the writes run on the caller's thread, in ``add``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np
import zarr

from insitu.batch import Batch
from insitu.errors import ConfigError, IncompleteStitchError
from insitu.plan.patches_spec import PatchGrid
from insitu.plan.stitch_layout import BLENDS, StitchLayout, taper_window
from insitu.views import DatasetView

__all__ = ["BLENDS", "PatchStitcher", "StitchProgress", "taper_window"]

#: Patches per piece when the pass's origin list is counted (bounds the counting temporaries).
_COUNT_PIECE = 1 << 16


@dataclass(frozen=True)
class StitchProgress:
    """How far a stitch has come: patches added of the pass's, output chunks written of those
    its patches touch, and the chunks (and accumulator bytes) held now and at most so far."""

    patches_added: int
    patches_total: int
    chunks_written: int
    chunks_total: int
    chunks_in_progress: int
    peak_chunks_in_progress: int
    bytes_in_progress: int
    peak_bytes_in_progress: int

    @property
    def done(self) -> bool:
        """Whether every chunk the pass's patches touch is written."""
        return self.chunks_written == self.chunks_total


@dataclass
class _Pending:
    """One output chunk in progress: where it lies, and its value and weight sums."""

    start: tuple[int, ...]
    values: np.ndarray
    weights: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes + self.weights.nbytes)


class PatchStitcher:
    """Blends model outputs for the patches of one pass over ``view`` into a Zarr array
    ``name`` in ``store``, writing each output chunk once.

    Use it as a context manager (``close()`` on leaving; an exception leaving the block drops
    the chunks in progress instead), or call :meth:`close` yourself.

    Parameters
    ----------
    store
        Where the output array goes: a path or URL zarr opens, a zarr ``Store``
        (``insitu.open_store(...)`` gives one) or a zarr ``Group``.
    name
        The output array's path in the group. An existing array is refused unless
        ``overwrite=True``.
    view
        The view whose pass is stitched (``ds.all``, ``ds.val``, ``ds.view("test")``), on one
        process (an unsharded view): its patch order for the dataset's current epoch says which
        patches will come, and so when each output chunk is complete.
    blend
        ``"mean"`` (the average of the patches covering an element) or ``"taper"`` (an
        average weighted by :func:`taper_window` along each axis the patch names, with the
        overlap ``size - stride``).
    dtype
        A floating-point (or complex) dtype of the output array; the sums run in float64
        (complex128) and are cast once, when a chunk is written.
    row_shape
        The shape of one output row, ``outputs.shape[1:]``; default: the patch as the batch
        delivers it. The axes the patch names must keep their size; an axis it takes whole
        (``band`` of a ``(y, x, band)`` mosaic) may have another length (the output array gets
        that length there), and trailing axes may be added (classes, channels). Each such
        axis is stored whole.
    chunks
        The output array's chunk shape; default: the reference array's chunks along its axes,
        whole along resized or added axes.
    shards
        A shard shape (zarr v3): the shard is then the unit written once.
    fill_value
        What elements no patch covers hold; default NaN.
    dimension_names
        Default: the reference array's, ``None`` for resized or added axes.
    zarr_format
        3 (default) or 2.
    overwrite
        Replace an existing array of the same name.

    """

    def __init__(
        self,
        store: Any,
        name: str,
        *,
        view: DatasetView,
        blend: str = "mean",
        dtype: Any = "float32",
        row_shape: Sequence[int] | None = None,
        chunks: Sequence[int] | None = None,
        shards: Sequence[int] | None = None,
        fill_value: Any = None,
        dimension_names: Sequence[str | None] | None = None,
        zarr_format: int = 3,
        overwrite: bool = False,
    ) -> None:
        self.dtype = np.dtype(dtype)
        if self.dtype.kind not in "fc":
            raise ConfigError(
                f"dtype={self.dtype} cannot hold a blend of patches; stitch floating-point outputs "
                "(probabilities, logits) and take the argmax of the stitched array"
            )
        self.blend = blend
        self.grid = _patch_grid(view)
        ref = view.dataset.labels[0]
        self.layout = StitchLayout.of(self.grid, row_shape, ref.chunk_shape, chunks, shards)
        self.weight = self.layout.window(self.grid, blend)
        self.fill_value = np.nan if fill_value is None else fill_value
        # Count first, create second: a view that cannot be stitched leaves no array behind.
        self._remaining, self._patches_total = self._count(view)
        self.array = _create(
            store,
            name,
            shape=self.layout.shape,
            chunks=self.layout.chunks,
            shards=None if shards is None else self.layout.unit,
            dtype=self.dtype,
            fill_value=self.fill_value,
            dimension_names=self.layout.dimension_names(ref.dimension_names, dimension_names, zarr_format),
            zarr_format=zarr_format,
            overwrite=overwrite,
        )
        self._chunks_total = int(np.count_nonzero(self._remaining))
        self._pending: dict[int, _Pending] = {}
        self._patches_added = 0
        self._written = 0
        self._bytes = 0
        self._peak_chunks = 0
        self._peak_bytes = 0
        self.closed = False

    # -- what a user reads back --------------------------------------------------------------
    @property
    def progress(self) -> StitchProgress:
        """Patches added, chunks written and chunks (and bytes) in progress, now and at peak."""
        return StitchProgress(
            self._patches_added,
            self._patches_total,
            self._written,
            self._chunks_total,
            len(self._pending),
            self._peak_chunks,
            self._bytes,
            self._peak_bytes,
        )

    def __repr__(self) -> str:
        p = self.progress
        return (
            f"PatchStitcher({self.array.path!r}, blend={self.blend!r}, patches {p.patches_added}/"
            f"{p.patches_total}, chunks {p.chunks_written}/{p.chunks_total})"
        )

    # -- adding outputs ----------------------------------------------------------------------
    def add(self, patches: Batch | np.ndarray, outputs: Any) -> None:
        """Add the model's ``outputs`` for the patches of one batch.

        ``patches`` is the :class:`~insitu.Batch` the outputs were computed from (its padding
        rows, ``uneven="pad"``, are left out) or its ``patch_origins``. ``outputs`` is
        ``(B, *row_shape)``: one row per patch, in the layout the batch delivers it (anything
        ``np.asarray`` takes; a framework tensor must be on the CPU). The chunks this batch
        completes are written before it returns.
        """
        if self.closed:
            raise ConfigError("the stitcher is closed; make a new PatchStitcher for another pass")
        origins, valid = self._origins(patches)
        values = np.asarray(outputs)
        want = (len(origins), *self.row_shape)
        if values.shape != want:
            raise ConfigError(
                f"outputs have shape {values.shape}; expected {want}: one row per patch of the batch "
                f"({len(origins)}), each of shape {self.row_shape} (row_shape=; the patch as the batch "
                "delivers it by default)"
            )
        if valid is not None:
            origins, values = origins[valid], values[valid]
        if not len(origins):
            return
        extent = self.grid.valid_extent(origins)
        units = self.layout.touched(origins, extent)
        ids, per = np.unique(units[units >= 0], return_counts=True)
        over = per > self._remaining[ids]
        if over.any():  # checked before anything is added: a refused batch changes nothing
            chunk = tuple(int(c) for c in np.unravel_index(int(ids[over][0]), self.layout.unit_grid))
            more = f" (and {int(over.sum()) - 1} more)" if over.sum() > 1 else ""
            raise ConfigError(
                f"patches of this batch touch output chunk {chunk}{more} after the patches the pass "
                "holds for it were all added: a patch the view's pass does not hold, or one added twice"
            )
        rows = values.reshape((len(origins), *self.layout.row_view))
        for i in range(len(origins)):
            self._add_row(rows[i], origins[i], extent[i], units[i])
        self._patches_added += len(origins)
        self._remaining[ids] -= per
        self._peak_chunks = max(self._peak_chunks, len(self._pending))
        self._peak_bytes = max(self._peak_bytes, self._bytes)
        for u in ids[self._remaining[ids] == 0].tolist():
            self._write(u)

    @property
    def row_shape(self) -> tuple[int, ...]:
        """The shape of one output row (``outputs.shape[1:]``)."""
        return self.layout.row

    def _origins(self, patches: Batch | np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        if isinstance(patches, Batch):
            if patches.patches is None:
                raise ConfigError(
                    "the batch holds whole cross-sections, not patches; stitch a view sampling patches"
                )
            if tuple(patches.patches.box) != self.grid.patch_shape:
                raise ConfigError(
                    f"the batch's patches are {patches.patches.box}, the view's {self.grid.patch_shape}: "
                    "the batch comes from another dataset"
                )
            return patches.patches.origins, patches.valid
        origins = np.asarray(patches)
        if origins.ndim != 2 or origins.shape[1] != self.grid.ndim or origins.dtype.kind not in "iu":
            raise ConfigError(
                f"patch origins must be integers of shape (B, {self.grid.ndim}) (Batch.patch_origins), "
                f"got {origins.dtype} {origins.shape}"
            )
        return origins.astype(np.int64, copy=False), None

    def _add_row(self, row: np.ndarray, origin: np.ndarray, extent: np.ndarray, units: np.ndarray) -> None:
        """Add one patch's row to every chunk it touches (``units``, -1: none)."""
        lay = self.layout
        lo, hi = self.layout.interval(origin[None, :], extent[None, :])
        lo0, hi0 = lo[0].tolist(), hi[0].tolist()
        weight = self.weight
        for u in units.tolist():
            if u < 0:
                continue
            acc = self._pending.get(u)
            if acc is None:
                acc = self._pending[u] = self._start(u)
                self._bytes += acc.nbytes
            src: list[slice] = []
            dst: list[slice] = []
            wsrc: list[slice] = []
            wdst: list[slice] = []
            for d, (a, b, c0, n) in enumerate(zip(lo0, hi0, acc.start, acc.values.shape, strict=True)):
                first, last = max(a, c0), min(b, c0 + n)
                src.append(slice(first - a, last - a))
                dst.append(slice(first - c0, last - c0))
                whole = slice(None)
                wsrc.append(whole if lay.uniform[d] else src[-1])
                wdst.append(whole if lay.uniform[d] else dst[-1])
            part = row[tuple(src)]
            if weight is None:
                acc.values[tuple(dst)] += part
                acc.weights[tuple(wdst)] += 1.0
            else:
                w = weight[tuple(wsrc)]
                acc.values[tuple(dst)] += part * w
                acc.weights[tuple(wdst)] += w

    def _start(self, unit: int) -> _Pending:
        start, shape = self.layout.unit_box(unit)
        wide = np.complex128 if self.dtype.kind == "c" else np.float64
        weights = tuple(1 if uni else n for n, uni in zip(shape, self.layout.uniform, strict=True))
        return _Pending(start, np.zeros(shape, dtype=wide), np.zeros(weights, dtype=np.float64))

    def _write(self, unit: int) -> None:
        """Normalise one chunk and write it (one store write), then free it."""
        acc = self._pending.pop(unit)
        self._bytes -= acc.nbytes
        with np.errstate(invalid="ignore", divide="ignore"):
            out = acc.values / acc.weights
        out = np.where(acc.weights > 0, out, self.fill_value).astype(self.dtype, copy=False)
        index = tuple(slice(s, s + n) for s, n in zip(acc.start, out.shape, strict=True))
        self.array[index] = out
        self._written += 1

    # -- the pass's patches, counted per output chunk ----------------------------------------
    def _count(self, view: DatasetView) -> tuple[np.ndarray, int]:
        """Patches of the view's pass touching each output chunk, and how many patches it holds:
        ``view.patch_order()`` read a piece at a time, padding repeats (``uneven="pad"``) left out."""
        plan = view.plan()
        order = plan.patches
        assert order is not None  # _patch_grid checked it
        n = plan.n_batches * plan.batch_size if view.drop_last else plan.n_positions  # as patch_order
        if plan.n_valid >= 0:
            n = min(n, plan.n_valid)
        counts = np.zeros(math.prod(self.layout.unit_grid), dtype=np.int64)
        for lo in range(0, n, _COUNT_PIECE):
            origins = order.origins_between(lo, min(n, lo + _COUNT_PIECE))
            units = self.layout.touched(origins, self.grid.valid_extent(origins))
            ids, per = np.unique(units[units >= 0], return_counts=True)
            counts[ids] += per
        return counts, n

    # -- the end -----------------------------------------------------------------------------
    def close(self, *, partial: bool = False) -> None:
        """Finish the stitch. Every chunk is written by now when every patch of the pass was
        added; otherwise an :class:`~insitu.errors.IncompleteStitchError` names what is left,
        and the stitcher stays open (add the rest, then close again). With ``partial=True``,
        the chunks in progress are written from what arrived (still once each) and chunks no
        arrived patch touches are left unwritten (they read as the fill value)."""
        if self.closed:
            return
        left = self._chunks_total - self._written
        if left and not partial:
            raise IncompleteStitchError(
                f"{left} of {self._chunks_total} output chunks are incomplete ({len(self._pending)} "
                f"in progress, {left - len(self._pending)} not started): {self._patches_added} of the "
                f"pass's {self._patches_total} patches were added. Add the rest, or close(partial=True) "
                "to write the chunks in progress from what arrived"
            )
        for u in sorted(self._pending):
            self._write(u)
        self.closed = True

    def discard(self) -> None:
        """Drop the chunks in progress without writing them and close; chunks already written
        stay."""
        self._pending.clear()
        self._bytes = 0
        self.closed = True

    def __enter__(self) -> PatchStitcher:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:  # never mask the error that ended the loop with an incomplete-stitch one
            self.discard()


def _patch_grid(view: DatasetView) -> PatchGrid:
    """The patch positions of ``view``'s pass, after checking the view can be stitched."""
    if not isinstance(view, DatasetView):
        raise ConfigError(f"view must be a dataset view (ds.all, ds.val, ...), got {type(view).__name__}")
    if view.world_size > 1:
        raise ConfigError(
            f"the view is rank {view.rank} of {view.world_size}: a rank's patches share output chunks "
            "with its neighbours', which it cannot complete; stitch the unsharded view on one process"
        )
    plan = view.plan()
    if plan.patches is None:
        raise ConfigError(
            "stitching needs a view of a dataset sampling patches (InSituDataset(..., patch=...))"
        )
    grid = plan.patches.patches.grid
    if grid.dropped or any(p is not None for p in grid.picks):
        raise ConfigError(
            "stitching does not place patches of arrays that select a list of indices, or one index, "
            "along an axis the patch does not name; select a range (a slice) there, or nothing"
        )
    return grid


def _create(store: Any, name: str, *, zarr_format: int, overwrite: bool, **kwargs: Any) -> zarr.Array:
    """The output array, in a group opened (or created) at ``store``."""
    if zarr_format not in (2, 3):
        raise ConfigError(f"zarr_format={zarr_format!r}; expected 2 or 3")
    if zarr_format == 2 and kwargs["shards"] is not None:
        raise ConfigError("shards need zarr_format=3")
    if isinstance(store, zarr.Group):
        group = store
    else:
        group = zarr.open_group(store, mode="a", zarr_format=3 if zarr_format == 3 else 2)
    if not overwrite and name in group:
        raise ConfigError(f"{name!r} already exists in the output store; give overwrite=True to replace it")
    if kwargs["dimension_names"] is None:
        del kwargs["dimension_names"]
    return group.create_array(name, overwrite=overwrite, **kwargs)
