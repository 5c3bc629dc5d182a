"""Chunk layout of one array: slabs -> store reads (whole chunks or shard byte ranges) -> decoded
pieces placed in pool slots.

A *read* is one GET (a whole stored chunk, or a byte range of a shard). Each
read carries the *pieces* it decodes: one per chunk, or several inner chunks
of a shard when adjacent byte ranges were coalesced into one request.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitu.codecs import ChunkDecoder, decoder_for, index_metadata, inner_metadata
from insitu.geometry import ArrayGeometry
from insitu.keys import chunk_key_encoder

MISSING = np.uint64(2**64 - 1)  # shard index entry of an absent inner chunk


@dataclass(frozen=True)
class Piece:
    """One chunk (inner chunk for shards) inside a read's bytes."""

    coords: tuple[int, ...]  # chunk grid coordinates (inner grid for shards)
    start: int  # offset in the fetched bytes
    length: int | None  # None: to the end


@dataclass(frozen=True)
class Read:
    """One GET: whole object (``byte_range=None``) or ``[start, end)``."""

    key: str
    byte_range: tuple[int, int] | None
    pieces: tuple[Piece, ...]


class ArrayReader:
    """Knows how the slabs of one array are stored, and how to put them in slots."""

    def __init__(
        self,
        geom: ArrayGeometry,
        decoder: ChunkDecoder | None = None,
        coalesce_gap: int = 64 * 1024,
        max_read: int = 32 * 2**20,
    ) -> None:
        self.geom = geom
        meta = geom.metadata
        if decoder is None:
            decoder = decoder_for(inner_metadata(meta) if geom.is_sharded else meta, geom.chunk_shape)
        self.decoder = decoder
        self.key = chunk_key_encoder(meta, geom.path)
        self.grid = tuple(math.ceil(s / c) for s, c in zip(geom.shape, geom.chunk_shape, strict=True))
        self.coalesce_gap = coalesce_gap
        self.max_read = max_read
        ax = geom.sample_axis
        other = [range(g) for d, g in enumerate(self.grid) if d != ax]
        self._others = list(itertools.product(*other))  # chunk coords of one slab, sample axis left out
        self.chunks_per_slab = len(self._others)
        self._full_slabs = geom.n_samples // geom.chunk_len  # slabs before this index hold chunk_len rows
        # A slab that is exactly one chunk with the sample axis first decodes straight into its slot.
        self.whole_slab = (
            ax == 0 and self.chunks_per_slab == 1 and tuple(geom.chunk_shape[1:]) == tuple(geom.shape[1:])
        )
        if geom.is_sharded:
            assert geom.shard_shape is not None
            self.inner_per_shard = tuple(
                s // c for s, c in zip(geom.shard_shape, geom.chunk_shape, strict=True)
            )
            self.index_decoder = decoder_for(index_metadata(meta), (*self.inner_per_shard, 2))
            sharding = next(c for c in meta["codecs"] if c["name"] == "sharding_indexed")["configuration"]
            self.index_at_end = sharding.get("index_location", "end") == "end"
            self.index_nbytes = self._index_nbytes(sharding)

    # -- coordinates --------------------------------------------------------
    def slab_chunks(self, slab: int) -> list[tuple[int, ...]]:
        """Chunk grid coordinates making up one slab."""
        ax = self.geom.sample_axis
        return [(*o[:ax], slab, *o[ax:]) for o in self._others]

    def rows_in_slab(self, slab: int) -> int:
        """Valid samples in ``slab`` (the last one may be short)."""
        c = self.geom.chunk_len
        return min(c, self.geom.n_samples - slab * c)

    # -- unsharded ----------------------------------------------------------
    def reads(self, slabs: Iterable[int]) -> list[tuple[int, Read]]:
        """Whole-object reads for an unsharded array: ``[(slab, read)]``."""
        return [
            (s, Read(self.key(coords), None, (Piece(coords, 0, None),)))
            for s in slabs
            for coords in self.slab_chunks(s)
        ]

    # -- sharded ------------------------------------------------------------
    def shards_of(self, slabs: Iterable[int]) -> dict[tuple[int, ...], list[tuple[int, tuple[int, ...]]]]:
        """Group the inner chunks of ``slabs`` by shard: ``{shard_coords: [(slab, inner_coords)]}``."""
        groups: dict[tuple[int, ...], list[tuple[int, tuple[int, ...]]]] = {}
        for s in slabs:
            for coords in self.slab_chunks(s):
                shard = tuple(c // k for c, k in zip(coords, self.inner_per_shard, strict=True))
                groups.setdefault(shard, []).append((s, coords))
        return groups

    def shard_key(self, shard: tuple[int, ...]) -> str:
        return str(self.key(shard))

    def index_range(self) -> tuple[str, int]:
        """``("suffix", n)`` or ``("range", n)``: where the shard index lives."""
        return ("suffix", self.index_nbytes) if self.index_at_end else ("range", self.index_nbytes)

    def decode_index(self, raw: Any) -> np.ndarray:
        return self.index_decoder.decode(raw)

    def coalesced_reads(
        self, shard: tuple[int, ...], index: np.ndarray | None, wanted: Sequence[tuple[int, tuple[int, ...]]]
    ) -> tuple[list[tuple[list[int], Read]], list[tuple[int, tuple[int, ...]]]]:
        """Byte-range reads for the wanted inner chunks of one shard.

        Returns ``(reads, missing)``: each read with the slabs it feeds, and the
        (slab, coords) of inner chunks absent from the shard (fill value).
        """
        if index is None:
            return [], list(wanted)
        located = []
        missing = []
        for slab, coords in wanted:
            local = tuple(c % k for c, k in zip(coords, self.inner_per_shard, strict=True))
            off, n = index[local]
            if off == MISSING and n == MISSING:
                missing.append((slab, coords))
            else:
                located.append((int(off), int(n), slab, coords))
        located.sort()
        key = self.shard_key(shard)
        reads: list[tuple[list[int], Read]] = []
        run: list[tuple[int, int, int, tuple[int, ...]]] = []
        for item in located:
            if run:
                start, end = run[0][0], run[-1][0] + run[-1][1]
                if item[0] - end > self.coalesce_gap or item[0] + item[1] - start > self.max_read:
                    reads.append(self._range_read(key, run))
                    run = []
            run.append(item)
        if run:
            reads.append(self._range_read(key, run))
        return reads, missing

    @staticmethod
    def _range_read(key: str, run: list[tuple[int, int, int, tuple[int, ...]]]) -> tuple[list[int], Read]:
        start = run[0][0]
        end = max(off + n for off, n, _, _ in run)
        pieces = tuple(Piece(coords, off - start, n) for off, n, _, coords in run)
        return [slab for _, _, slab, _ in run], Read(key, (start, end), pieces)

    def _index_nbytes(self, sharding: dict[str, Any]) -> int:
        n = int(np.prod(self.inner_per_shard)) * 16
        for c in sharding.get("index_codecs", ()):
            name = c["name"] if isinstance(c, dict) else str(c)
            if name == "crc32c":
                n += 4
            elif name != "bytes":
                raise ValueError(f"unsupported shard index codec {name!r}")
        return n

    # -- placing decoded chunks ---------------------------------------------
    def place(self, coords: tuple[int, ...], raw: Any, slot_view: np.ndarray) -> None:
        """Decode one chunk's bytes into its region of a slab slot."""
        if self.whole_slab and coords[0] < self._full_slabs:
            self.decoder.decode(raw, out=slot_view)
            return
        self._assign(coords, self.decoder.decode(raw), slot_view)

    def fill(self, coords: tuple[int, ...], value: Any, slot_view: np.ndarray) -> None:
        """Write ``value`` over one chunk's region of a slot (missing or bad chunk)."""
        dst, _ = self._regions(coords)
        slot_view[dst] = value

    def _assign(self, coords: tuple[int, ...], chunk: np.ndarray, slot_view: np.ndarray) -> None:
        dst, src = self._regions(coords)
        moved = np.moveaxis(chunk, self.geom.sample_axis, 0)
        slot_view[dst] = moved[src]

    def _regions(self, coords: tuple[int, ...]) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
        """Destination slices in the slot and source slices in the moved chunk."""
        g = self.geom
        ax = g.sample_axis
        rows = self.rows_in_slab(coords[ax])
        dst = [slice(0, rows)]
        src = [slice(0, rows)]
        for d, (c, size, extent) in enumerate(zip(coords, g.chunk_shape, g.shape, strict=True)):
            if d == ax:
                continue
            lo = c * size
            hi = min(lo + size, extent)
            dst.append(slice(lo, hi))
            src.append(slice(0, hi - lo))
        return tuple(dst), tuple(src)
