"""Runner for insitu at its defaults: patches (engine ``insitu``) or whole cross-sections
(engine ``insitu_section``) of the same array.

``insitu``: ``InSituDataset(store, manifest, [geom], batch_size=B, seed=..., patch={dim: P,
...})``, plus ``patch_sampling="random", patches_per_epoch=N`` for random sampling; nothing else
is set (no block size, no read-ahead, no cache budget: what a user who tunes nothing gets). The
batch's ``patch_origins`` are kept and, after the clock stops, checked against the grid (every
position once) and used to count the distinct chunks the epoch touched.

``insitu_section``: the same dataset without ``patch=``: a sample is one index along the sample
dimension with the full extent of the others; its checksum reads the values a grid patch pass
would read (``shared.section_checksum_index``), so the two passes cross-check.

insitu reads local files itself (its LocalStore fast path), so its store is not wrapped:
GETs and decodes come from ``ds.stats`` (``reads``, ``chunks_decoded``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from shared import (
    Clock,
    PatchSpec,
    cold_epoch,
    emit,
    grid_origins,
    patch_checksum,
    section_checksum_index,
    touched_chunks,
    unsupported_without,
)


def patch_options(spec: PatchSpec) -> dict[str, Any]:
    """The dataset's patch arguments: the size, and the sampling when it is not the grid."""
    options: dict[str, Any] = {"patch": spec.patch_by_dim}
    if spec.sampling == "random":
        options.update(patch_sampling="random", patches_per_epoch=spec.patches_per_epoch)
    return options


def section_checksum(spec: PatchSpec) -> Any:
    """Checksum of a batch of cross-sections as the grid patches tiling them would checksum."""
    index = section_checksum_index(spec.shape[1:], spec.patch)
    if index is None:
        return lambda x: float("nan")

    def checksum(x: Any) -> float:
        return float(np.asarray(x).reshape(len(x), -1)[:, index].sum(dtype=np.float64))

    return checksum


def main() -> None:
    spec = PatchSpec.load(sys.argv[1])
    unsupported_without(["insitu"])
    import insitu

    # insitu's top level imports lazily: touching the names imports the engine and zarr (~0.4 s)
    # here, before the clock, as the other runners import theirs.
    _ = (insitu.open_store, insitu.open_geometries, insitu.split_by_chunk, insitu.InSituDataset)
    section = spec.engine == "insitu_section"
    clock = Clock()
    store = insitu.open_store(spec.root)
    geom = insitu.open_geometries(store, [spec.array])[spec.array]
    manifest = insitu.split_by_chunk(geom, (1.0,), names=("train",))
    options = {} if section else patch_options(spec)
    ds = insitu.InSituDataset(store, manifest, [geom], batch_size=spec.batch_size, seed=spec.seed, **options)
    origins: list[np.ndarray] = []

    def keep_origins(batch: Any) -> None:
        origins.append(np.asarray(batch.patch_origins))

    result = cold_epoch(
        spec,
        clock,
        lambda: ds.train,
        arrays=lambda batch: batch[geom.label],
        checksum=section_checksum(spec) if section else patch_checksum,
        on_batch=None if section else keep_origins,
    )
    stats = ds.stats.as_dict()
    ds.close()
    result.chunk_gets = int(stats.get("reads", 0))
    result.chunk_decodes = int(stats.get("chunks_decoded", 0))
    extra: dict[str, Any] = {"stats": stats}
    if section:
        result.distinct_chunks = int(np.prod(spec.grid_shape))  # every chunk holds part of a section
    else:
        seen = np.concatenate(origins) if origins else np.zeros((0, len(spec.shape)), np.int64)
        result.distinct_chunks = touched_chunks(spec, seen)
        if spec.sampling == "grid" and not result.truncated:
            expected = grid_origins(spec)
            extra["origins_are_the_grid"] = bool(
                len(seen) == len(expected)
                and np.array_equal(np.unique(seen, axis=0), np.unique(expected, axis=0))
            )
    result.extra = extra
    emit(result)


if __name__ == "__main__":
    main()
