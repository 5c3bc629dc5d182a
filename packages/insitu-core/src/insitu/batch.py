"""The unit a view yields: a mapping of label to array, plus provenance."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from insitu.arrays.coregistration import Scale, scale_extent
from insitu.arrays.lazycoords import LazyValues, resolve


@dataclass(frozen=True, eq=False)
class BatchPatches:
    """Where the patches of a batch lie in the reference array.

    ``origins``: per row, the patch's first element on every axis; ``box``: the patch's size on
    every axis; ``axes``: the axes a row of a sampled label holds, in order (the sample axis only
    when the patch names it); ``extent``: with ``patch_edge="pad"``, per row and axis the elements
    inside the array (None otherwise); ``coords``: ``{dimension: (axis, values)}``, the coordinate
    values of the patched dimensions along the whole axis.
    """

    origins: np.ndarray
    box: tuple[int, ...]
    axes: tuple[int, ...]
    extent: np.ndarray | None = None
    coords: Mapping[str, tuple[int, np.ndarray | LazyValues]] = field(default_factory=dict)
    #: Labels read at another resolution than the reference: their index scale per axis.
    scales: Mapping[str, Scale] = field(default_factory=dict)

    def coords_of_rows(self) -> dict[str, np.ndarray]:
        """Per patched dimension with coordinates, each row's values: ``(rows, size)``. Past the end
        of the array (``patch_edge="pad"``) floats are NaN and times NaT; other kinds repeat the
        last value (``extent`` says where a patch ends)."""
        out = {}
        for dim, (axis, lazy) in self.coords.items():
            values = resolve(lazy)
            if values is None:
                continue
            index = self.origins[:, axis, None] + np.arange(self.box[axis])[None, :]
            past = index >= len(values)
            rows = values[np.minimum(index, len(values) - 1)]
            if past.any() and rows.dtype.kind in "fcmM":
                rows = rows.copy()
                rows[past] = np.nan if rows.dtype.kind in "fc" else np.datetime64("NaT")
            out[dim] = rows
        return out


@dataclass(frozen=True, eq=False)
class Batch(Mapping[str, np.ndarray]):
    """One batch: ``{label: ndarray}`` with the sample axis first.

    ``sample_indices`` are the anchor positions along the sample axis (the
    index a user would use on the source array for an unshifted variable).
    ``read_indices[label]`` is where each row of ``data[label]`` was read:
    ``sample_indices + offset`` for a shifted (windowed) label. A static label
    (an array without the sample dimension, such as a land-sea mask) holds the
    whole array once per batch, without a sample axis, and has no read indices.
    """

    data: Mapping[str, np.ndarray]
    sample_indices: np.ndarray
    read_indices: Mapping[str, np.ndarray] = field(default_factory=dict)
    split: str = ""
    epoch: int = 0
    index: int = 0
    valid: np.ndarray | None = None  # with uneven="pad": False for padding rows; None: all rows real
    sample_dim: str | None = None  # name of the sample dimension, when the arrays name theirs
    # Its values for every sample index (maybe still being read: see insitu.arrays.lazycoords).
    sample_coord: np.ndarray | LazyValues | None = field(default=None, repr=False)
    #: Patch sampling: where each row's patch lies (see :class:`BatchPatches`); None when samples
    #: are whole cross-sections.
    patches: BatchPatches | None = field(default=None, repr=False)

    @property
    def patch_origins(self) -> np.ndarray | None:
        """Patch sampling: per row, the index of the patch's first element on every axis of the
        reference array (``patch_origins[:, sample_axis] == sample_indices``); None when samples
        are whole cross-sections."""
        return None if self.patches is None else self.patches.origins

    @property
    def patch_extent(self) -> np.ndarray | None:
        """``patch_edge="pad"``: per row and axis, the elements of the patch inside the array (the
        rest hold the fill value); None otherwise."""
        return None if self.patches is None else self.patches.extent

    @property
    def coords(self) -> dict[str, np.ndarray]:
        """``{sample_dim: values}``: the sample coordinate (decoded: CF time is ``datetime64``) of
        each row's anchor; empty when the store has no coordinate for the sample dimension."""
        values = resolve(self.sample_coord)
        out = {}
        if self.sample_dim is not None and values is not None:
            out[self.sample_dim] = values[self.sample_indices]
        if self.patches is not None:
            out |= self.patches.coords_of_rows()
        return out

    def coords_of(self, label: str) -> dict[str, np.ndarray]:
        """The sample coordinate where each row of ``label`` was read: a shifted label such as
        ``t2m+24`` carries its own times (the anchors' plus 24 steps)."""
        if label not in self.data:
            raise KeyError(f"no label {label!r} in this batch; labels are {list(self.data)}")
        values = resolve(self.sample_coord)
        if self.sample_dim is None or values is None or label not in self.read_indices:
            return {}
        return {self.sample_dim: values[self.read_indices[label]]}

    def patch_mask(self, label: str) -> np.ndarray:
        """Where each row of ``label`` holds data: a boolean array of the label's shape, False where
        a padded patch (``patch_edge="pad"``) runs past the end of the array; all True for patches
        that lie inside it. Only for batches of patches."""
        patches = self.patches
        if patches is None:
            raise ValueError("patch_mask is for batches of patches (InSituDataset(..., patch=...))")
        value = self.data[label]  # KeyError names the label
        mask = np.ones(value.shape, dtype=bool)
        if patches.extent is None:
            return mask
        scale = patches.scales.get(label)
        extent = patches.extent if scale is None else scale_extent(patches.extent, scale)
        for k, axis in enumerate(patches.axes):
            inside = np.arange(value.shape[1 + k])[None, :] < extent[:, axis, None]
            view = [1] * value.ndim
            view[0], view[1 + k] = value.shape[0], value.shape[1 + k]
            mask &= inside.reshape(view)
        return mask

    def __getitem__(self, label: str) -> np.ndarray:
        return self.data[label]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    @property
    def size(self) -> int:
        """Number of samples in the batch."""
        return int(self.sample_indices.shape[0])

    def replace(self, data: Mapping[str, np.ndarray]) -> Batch:
        """A copy of this batch with new arrays (used by batch transforms)."""
        return dataclasses.replace(self, data=dict(data))

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self.data.items())
        return f"Batch(split={self.split!r}, epoch={self.epoch}, index={self.index}, size={self.size}, {{{parts}}})"
