"""Which arrays a dataset delivers, under which labels: the geometries given (or discovered),
checked, split into sample-bearing labels and static fields; what each array becomes after its
chunk transforms; and the coordinates the labels deliver."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from zarr.abc.store import Store

from insitu.arrays.chains import ChunkChains, check_nan_fill, chunk_chains
from insitu.arrays.discovery import open_geometries
from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.lazycoords import LazyCoords, LazyValues
from insitu.arrays.statics import static_spec
from insitu.arrays.transforms import ChunkTransform, SlabSpec, output_spec
from insitu.errors import ConfigError
from insitu.store.retry import RetryPolicy

# ArrayGeometry and ChunkTransform are the types of what resolve_labels and Labels.outputs take:
# listed so that a caller forwarding the user's arguments (the dataset) names them from here.
__all__ = ["ArrayGeometry", "ArrayOutputs", "ChunkTransform", "Labels", "resolve_labels"]


@dataclass(frozen=True)
class ArrayOutputs:
    """What the arrays become after their chunk transforms: each array's chain, the slab it pools
    (by array path) and delivers (by sampled label), and the bytes each static field holds."""

    chains: ChunkChains
    specs: dict[str, SlabSpec]
    label_specs: dict[str, SlabSpec]
    static_nbytes: dict[str, int]


@dataclass(frozen=True)
class Labels:
    """The labels a dataset delivers: ``sampled`` carry the sample dimension, ``statics`` do not."""

    sampled: tuple[ArrayGeometry, ...]
    statics: tuple[ArrayGeometry, ...]

    @property
    def every(self) -> tuple[ArrayGeometry, ...]:
        """Every label, sampled first then statics."""
        return self.sampled + self.statics

    @property
    def pooled(self) -> dict[str, ArrayGeometry]:
        """One unshifted geometry per pooled array path: an array is pooled once, whatever offsets
        its labels read it at."""
        return {g.path: g.shift(-g.offset) for g in self.sampled}

    @property
    def sample_dim(self) -> str | None:
        """The sample dimension's name when every label names it alike, else None."""
        names = {g.sample_dim for g in self.sampled}
        return names.pop() if len(names) == 1 else None

    def outputs(
        self,
        chunk_transforms: Sequence[ChunkTransform] | Mapping[str, Sequence[ChunkTransform]],
        cf_decode: bool | Mapping[str, bool],
        *,
        nan_fill: bool,
    ) -> ArrayOutputs:
        """The chains of the pooled arrays and static fields (CF decoding first unless
        ``cf_decode`` turns it off) and the output each makes, found by running them once on zeros;
        ``nan_fill`` (``on_bad_chunk="nan"``) refuses integer arrays no fill value marks as bad."""
        arrays = self.pooled
        chains = chunk_chains(chunk_transforms, cf_decode, [*arrays.values(), *self.statics], self.every)
        if nan_fill:
            check_nan_fill(list(arrays.values()), chains)
        specs = {path: output_spec(g, chains.of(path)) for path, g in arrays.items()}
        return ArrayOutputs(
            chains,
            specs,
            {g.label: specs[g.path] for g in self.sampled},
            {g.label: static_spec(g, chains.of(g.path)).nbytes for g in self.statics},
        )

    # -- coordinates ------------------------------------------------------------
    def coords(self) -> dict[str, np.ndarray]:
        """Coordinate values of every dimension the labels deliver (selections applied), and of
        the sample dimension (every sample); a dimension two labels select differently is left out."""
        found: dict[str, np.ndarray] = {}
        clash: set[str] = set()
        for g in self.every:
            for dim in g.delivered_dims:
                values = g.coord(dim) if dim is not None else None
                if dim is None or values is None:
                    continue
                if dim in found and not np.array_equal(found[dim], values):
                    clash.add(dim)
                found.setdefault(dim, values)
        sample_dim = self.sample_dim
        if sample_dim is not None and sample_dim in self.sampled[0].coords:
            found[sample_dim] = self.sampled[0].coords[sample_dim]
        return {d: v for d, v in found.items() if d not in clash}

    def coords_of(self, label: str) -> dict[str, np.ndarray]:
        """Coordinate values of the dimensions of one delivered sample of ``label`` (static: of the
        delivered array), selection applied; an unknown label is a ConfigError listing the labels."""
        for g in self.every:
            if g.label == label:
                return {d: v for d in g.delivered_dims if d is not None and (v := g.coord(d)) is not None}
        raise ConfigError(f"unknown label {label!r}; labels are {[g.label for g in self.every]}")

    def sample_coord(self) -> tuple[str, np.ndarray | LazyValues] | None:
        """The sample coordinate as batches carry it: maybe still being read (insitu.arrays.lazycoords)."""
        dim = self.sample_dim
        if dim is None:
            return None
        coords = self.sampled[0].coords
        # A failed read stays lazy: its error is raised where the values are used, not here.
        ready = not isinstance(coords, LazyCoords) or (coords.ready and not coords.failed)
        values = coords.get(dim) if ready else LazyValues(coords, dim)
        return None if values is None else (dim, values)

    def patch_coords(self, axes: Sequence[int]) -> dict[str, tuple[int, np.ndarray | LazyValues]]:
        """``{dimension: (axis, values)}`` of the reference array's dimensions on ``axes`` (the
        patched ones) that have coordinates, whole axis, maybe still being read."""
        ref = self.sampled[0]
        names = ref.dimension_names or ()
        coords = ref.coords
        ready = not isinstance(coords, LazyCoords) or (coords.ready and not coords.failed)
        out: dict[str, tuple[int, np.ndarray | LazyValues]] = {}
        for axis in axes:
            dim = names[axis] if axis < len(names) else None
            if dim is None:
                continue
            if ready:
                values = coords.get(dim)
                if values is not None:
                    out[dim] = (axis, values)
            else:
                out[dim] = (axis, LazyValues(coords, dim))
        return out


def resolve_labels(
    store: Store,
    geometries: Mapping[str, ArrayGeometry] | Sequence[ArrayGeometry] | None,
    sample_axis: str | int,
    retry: RetryPolicy | None = None,
) -> Labels:
    """The labels of ``geometries`` (``None``: every array of ``store`` sampled along
    ``sample_axis``, its metadata read under ``retry``), checked: unique labels, one sample axis and selection per array, and at
    least one label with the sample dimension."""
    geoms = _given(store, geometries, sample_axis, retry)
    labels = [g.label for g in geoms]
    dupes = sorted(x for x, n in Counter(labels).items() if n > 1)
    if dupes:
        raise ConfigError(f"duplicate label(s) {dupes}; shift one of them or drop the duplicate")
    _check_one_reading_per_array(geoms)
    resolved = Labels(tuple(g for g in geoms if not g.static), tuple(g for g in geoms if g.static))
    if not resolved.sampled:
        raise ConfigError(
            f"every label is static ({labels}); at least one array must have the sample dimension"
        )
    return resolved


def _given(
    store: Store,
    geometries: Mapping[str, ArrayGeometry] | Sequence[ArrayGeometry] | None,
    sample_axis: str | int,
    retry: RetryPolicy | None,
) -> list[ArrayGeometry]:
    if geometries is None:
        geoms = list(open_geometries(store, sample_dim=sample_axis, retry=retry).values())
    elif isinstance(geometries, Mapping):
        # The keys name the batch fields: {"x": g, "y": g.shift(3)} gives batches keyed x and y.
        geoms = []
        for key, g in geometries.items():
            if not isinstance(key, str) or not key:
                raise ConfigError(
                    f"geometries keys name the batch fields and must be non-empty strings, got {key!r}"
                )
            geoms.append(g.named(key) if isinstance(g, ArrayGeometry) else g)
    else:
        geoms = list(geometries)
    if not geoms:
        raise ConfigError("geometries is empty; pass at least one ArrayGeometry")
    for g in geoms:
        if not isinstance(g, ArrayGeometry):
            raise ConfigError(f"geometries must be ArrayGeometry objects, got {type(g).__name__}: {g!r}")
    return geoms


def _check_one_reading_per_array(geoms: Sequence[ArrayGeometry]) -> None:
    by_path: dict[str, ArrayGeometry] = {}
    for g in geoms:
        other = by_path.setdefault(g.path, g)
        if other.sample_axis != g.sample_axis or other.static != g.static:
            raise ConfigError(
                f"labels {other.label!r} and {g.label!r} read {g.path!r} with different sample axes"
            )
        if other.selection != g.selection:
            raise ConfigError(
                f"labels {other.label!r} and {g.label!r} read {g.path!r} with different selections; "
                "an array is pooled once: select the union in one label and split it in a batch transform"
            )
