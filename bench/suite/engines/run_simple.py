"""Runner for the simple loader: file reads, zstd decode on two threads, block shuffle, ``np.take``.

Measures how far a deliberately simple, chunk-aware loader gets on local disk with
no event loop, no cache and no overlap between stages. Per epoch it permutes the
chunks (seeded), then for each block of ``block_chunks`` chunks:

1. reads each chunk's file and zstd-decodes it (numcodecs) straight into its slot
   of a block array, on ``threads`` threads; one block array per variable,
   allocated once and reused for every block;
2. shuffles the block's samples and gathers them with ``np.take`` into batch arrays
   (allocated once, reused: a batch is valid until the next one is taken). A batch
   that the block does not fill is completed from the next block, so every batch is
   full and each sample is delivered exactly once.

Only what it can read without zarr: a local zarr v3 array whose codec chain is
exactly ``bytes`` + ``zstd`` (no sharding, filters or transpose), chunked along the
sample axis only. Anything else (sharded, S3, latency, a windowed case) is reported
unsupported. The chunk file path follows the metadata's ``chunk_key_encoding``
(``default``: ``<var>/c/<i>/0/0``, or ``v2``: ``<var>/<i>.0.0``, with its separator).

Tuning: ``threads`` (default 2), ``block_chunks`` (default: chunks holding 256 samples).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numcodecs
import numpy as np
from common import BatchDealer, Spec, Unsupported, begin, check_local_whole_blocks, cold_epoch, emit

DEFAULT_THREADS = 2
DEFAULT_BLOCK_SAMPLES = 256


@dataclass(frozen=True)
class Layout:
    """Where one zarr v3 array's chunk files are and what each decodes to."""

    root: Path  # the array's directory
    n_samples: int
    samples_per_chunk: int
    sample_shape: tuple[int, ...]
    dtype: np.dtype
    fill_value: Any
    key_prefix: str  # "c/" (default encoding) or "" (v2 encoding)
    separator: str
    n_inner: int  # trailing "0" coordinates of a chunk key (one per field axis)

    @property
    def n_chunks(self) -> int:
        return math.ceil(self.n_samples / self.samples_per_chunk)

    @property
    def chunk_shape(self) -> tuple[int, ...]:
        return (self.samples_per_chunk, *self.sample_shape)

    def chunk_path(self, chunk: int) -> Path:
        """The file holding sample-axis chunk ``chunk`` (the field axes are one chunk each)."""
        coords = [str(chunk)] + ["0"] * self.n_inner
        return self.root / (self.key_prefix + self.separator.join(coords))


def read_metadata(root: str, var: str) -> dict[str, Any]:
    path = Path(root) / var / "zarr.json"
    if not path.exists():
        raise Unsupported(f"{var}: no zarr v3 metadata at {path}")
    meta: dict[str, Any] = json.loads(path.read_text())
    if meta.get("zarr_format") != 3 or meta.get("node_type") != "array":
        raise Unsupported(f"{var}: not a zarr v3 array")
    return meta


def check_plain_zstd(codecs: list[dict[str, Any]], what: str) -> None:
    """Require exactly ``bytes`` (little-endian) then ``zstd``: nothing else to undo."""
    names = [c.get("name") for c in codecs]
    if names != ["bytes", "zstd"]:
        raise Unsupported(f"{what}: codec chain {names}, this loader reads only ['bytes', 'zstd']")
    endian = codecs[0].get("configuration", {}).get("endian", "little")
    if endian != "little" or sys.byteorder != "little":
        raise Unsupported(f"{what}: {endian}-endian data on a {sys.byteorder}-endian machine")


def key_encoding(meta: dict[str, Any], var: str) -> tuple[str, str]:
    """``(prefix, separator)`` of the metadata's chunk key encoding."""
    enc = meta.get("chunk_key_encoding", {"name": "default"})
    name, conf = enc.get("name"), enc.get("configuration", {})
    if name == "default":
        sep = conf.get("separator", "/")
        return "c" + sep, sep
    if name == "v2":
        return "", conf.get("separator", ".")
    raise Unsupported(f"{var}: chunk key encoding {name!r}")


def parse_fill(value: Any, dtype: np.dtype) -> Any:
    specials = {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}
    return dtype.type(specials.get(value, value) if isinstance(value, str) else value)


def grid_layout(root: str, var: str, meta: dict[str, Any], chunk_shape: list[int]) -> Layout:
    """Geometry and key encoding shared by plain and sharded arrays (``chunk_shape``: stored object)."""
    if meta.get("storage_transformers"):
        raise Unsupported(f"{var}: storage transformers")
    grid = meta["chunk_grid"]
    if grid.get("name") != "regular":
        raise Unsupported(f"{var}: chunk grid {grid.get('name')!r}")
    shape = meta["shape"]
    if list(chunk_shape[1:]) != list(shape[1:]):
        raise Unsupported(f"{var}: chunked along the field axes {chunk_shape}, not only along the samples")
    dtype = np.dtype(meta["data_type"])
    prefix, sep = key_encoding(meta, var)
    return Layout(
        root=Path(root) / var,
        n_samples=shape[0],
        samples_per_chunk=chunk_shape[0],
        sample_shape=tuple(shape[1:]),
        dtype=dtype,
        fill_value=parse_fill(meta.get("fill_value"), dtype),
        key_prefix=prefix,
        separator=sep,
        n_inner=len(shape) - 1,
    )


def plain_layout(root: str, var: str) -> Layout:
    """The layout of an unsharded ``bytes`` + ``zstd`` array, or :class:`Unsupported`."""
    meta = read_metadata(root, var)
    check_plain_zstd(meta["codecs"], var)
    return grid_layout(root, var, meta, meta["chunk_grid"]["configuration"]["chunk_shape"])


class SimpleLoader:
    """Block-shuffled batches from local chunk files, decoded into reused block arrays."""

    def __init__(self, layouts: list[Layout], batch_size: int, block_chunks: int, threads: int) -> None:
        first = layouts[0]
        for lay in layouts[1:]:
            if (lay.n_samples, lay.samples_per_chunk) != (first.n_samples, first.samples_per_chunk):
                raise Unsupported("variables chunked differently along the samples")
        self.layouts = layouts
        self.batch_size = batch_size
        self.spc = first.samples_per_chunk
        self.block_chunks = block_chunks = max(1, min(block_chunks, first.n_chunks))
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="simple-decode")
        # Chunks are stored whole, so a block holds block_chunks full chunks.
        self.blocks = [np.empty((block_chunks * self.spc, *lay.sample_shape), lay.dtype) for lay in layouts]
        self.batches = [np.empty((batch_size, *lay.sample_shape), lay.dtype) for lay in layouts]
        self.codec = numcodecs.Zstd()

    def _load(self, v: int, slot: int, chunk: int) -> None:
        """Read chunk ``chunk`` of variable ``v`` and decode it into block slot ``slot``."""
        out = self.blocks[v][slot * self.spc : (slot + 1) * self.spc]
        try:
            raw = self.layouts[v].chunk_path(chunk).read_bytes()
        except FileNotFoundError:  # never written: the fill value
            out.fill(self.layouts[v].fill_value)
            return
        self.codec.decode(raw, out=out)

    def epoch(self, seed: int) -> Iterator[list[np.ndarray]]:
        """One epoch's batches; each list holds one array per variable (reused buffers)."""
        rng = np.random.default_rng(seed)
        n = self.layouts[0].n_samples
        order = rng.permutation(self.layouts[0].n_chunks)
        dealer = BatchDealer(self.batches)
        for b0 in range(0, len(order), self.block_chunks):
            chunks = order[b0 : b0 + self.block_chunks]
            jobs = [
                self.pool.submit(self._load, v, slot, int(c))
                for v in range(len(self.layouts))
                for slot, c in enumerate(chunks)
            ]
            for job in jobs:
                job.result()
            # Block rows of the samples that exist (the last chunk may be short), shuffled.
            rows = np.concatenate(
                [
                    slot * self.spc + np.arange(min(self.spc, n - int(c) * self.spc))
                    for slot, c in enumerate(chunks)
                ]
            )
            yield from dealer.deal(self.blocks, rng.permutation(rows))
        yield from dealer.rest()

    def close(self) -> None:
        self.pool.shutdown()


def main() -> None:
    spec = Spec.load(sys.argv[1])
    case = spec.case
    try:
        check_local_whole_blocks(spec, "simple")
        floor, clock = begin()
        layouts = [plain_layout(case.root, v) for v in case.variables]
        spc = layouts[0].samples_per_chunk
        block_chunks = int(spec.tuning.get("block_chunks", max(1, DEFAULT_BLOCK_SAMPLES // spc)))
        threads = int(spec.tuning.get("threads", DEFAULT_THREADS))
        loader = SimpleLoader(layouts, spec.batch_size, block_chunks, threads)
    except Unsupported as exc:
        print(json.dumps({"unsupported": str(exc)}))
        return
    result = cold_epoch(spec, clock, floor, loader.epoch(spec.seed))
    loader.close()
    result.extra = {"block_chunks": loader.block_chunks, "threads": threads}
    emit(result)


if __name__ == "__main__":
    main()
