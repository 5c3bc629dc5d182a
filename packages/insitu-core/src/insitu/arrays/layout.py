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
from typing import Any, NamedTuple

import numpy as np

from insitu.arrays.geometry import ArrayGeometry
from insitu.store.codecs import ChunkDecoder, decoder_for, index_metadata, inner_metadata
from insitu.store.keys import chunk_key_encoder

MISSING = np.uint64(2**64 - 1)  # shard index entry of an absent inner chunk


class Piece(NamedTuple):
    """One chunk (inner chunk for shards) inside a read's bytes.

    Named tuples, as :class:`Read`: one is made per chunk read, and a tuple is made several times
    faster than a frozen dataclass."""

    coords: tuple[int, ...]  # chunk grid coordinates (inner grid for shards)
    start: int  # offset in the fetched bytes
    length: int | None  # None: to the end


class Read(NamedTuple):
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
        # Chunk coords of one slab, sample axis left out: along a selected axis, only the chunks
        # holding a selected index (the others are never fetched nor decoded).
        other = [self._chunks_touched(d) for d in range(len(self.grid)) if d != ax]
        self._others = list(itertools.product(*other))
        self.chunks_per_slab = len(self._others)
        # One chunk a slab, the sample axis first (most archives): its coords are (slab, *rest),
        # made without the general per-slab list (reads() runs once per chunk read).
        self._one_chunk_rest = self._others[0] if self.chunks_per_slab == 1 and ax == 0 else None
        # Its store key is then the slab's number between a fixed head and tail, written once.
        self._one_chunk_key = _key_around_slab(self.key, self._one_chunk_rest)
        self._full_slabs = geom.n_samples // geom.chunk_len  # slabs before this index hold chunk_len rows
        # A slab that is exactly one chunk with the sample axis first decodes straight into its slot.
        self.whole_slab = (
            ax == 0
            and geom.selection is None
            and self.chunks_per_slab == 1
            and tuple(geom.chunk_shape[1:]) == tuple(geom.shape[1:])
        )
        self._placement: dict[tuple[int, ...], _Placement] = {}
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
    def _chunks_touched(self, axis: int) -> list[int]:
        chosen = self.geom.axis_selection(axis)
        if chosen is None:
            return list(range(self.grid[axis]))
        return sorted({i // self.geom.chunk_shape[axis] for i in chosen.indices})

    def slab_chunks(self, slab: int) -> list[tuple[int, ...]]:
        """Chunk grid coordinates making up one slab."""
        ax = self.geom.sample_axis
        return [(*o[:ax], slab, *o[ax:]) for o in self._others]

    def rows_in_slab(self, slab: int) -> int:
        """Valid samples in ``slab`` (the last one may be short)."""
        c = self.geom.chunk_len
        return min(c, self.geom.n_samples - slab * c)

    # -- unsharded ----------------------------------------------------------
    def single_reads(self, slabs: Iterable[int]) -> list[Read] | None:
        """One whole-object read per slab, in the order of ``slabs``, when each slab of this
        unsharded array is one stored chunk; None otherwise (see :meth:`reads`)."""
        rest, around = self._one_chunk_rest, self._one_chunk_key
        if rest is None:
            return None
        # The tuples made directly: a named tuple's own constructor is a Python function, and
        # this runs once per chunk a cold pass reads, on the loop.
        new = tuple.__new__
        if around is None:
            key = self.key
            return [
                new(Read, (key(c), None, (new(Piece, (c, 0, None)),))) for c in [(s, *rest) for s in slabs]
            ]
        head, tail = around
        return [new(Read, (f"{head}{s}{tail}", None, (new(Piece, ((s, *rest), 0, None)),))) for s in slabs]

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
        """The store key of the shard object at grid coordinates ``shard``."""
        return str(self.key(shard))

    def index_range(self) -> tuple[str, int]:
        """``("suffix", n)`` or ``("range", n)``: where the shard index lives."""
        return ("suffix", self.index_nbytes) if self.index_at_end else ("range", self.index_nbytes)

    def decode_index(self, raw: Any) -> np.ndarray:
        """The shard index decoded from its raw bytes, shaped ``(*inner_per_shard, 2)``: ``(offset, nbytes)``
        of each inner chunk."""
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
        slot_view[self._placement_of(coords).dst(self.rows_in_slab(coords[self.geom.sample_axis]))] = value

    def _assign(self, coords: tuple[int, ...], chunk: np.ndarray, slot_view: np.ndarray) -> None:
        rows = self.rows_in_slab(coords[self.geom.sample_axis])
        placement = self._placement_of(coords)
        moved = np.moveaxis(chunk, self.geom.sample_axis, 0)
        slot_view[placement.dst(rows)] = placement.take(moved, rows)

    def _placement_of(self, coords: tuple[int, ...]) -> _Placement:
        """Where one chunk's selected values go in a slot; the same for every slab, so cached by the
        chunk's coordinates off the sample axis."""
        ax = self.geom.sample_axis
        key = coords[:ax] + coords[ax + 1 :]
        found = self._placement.get(key)
        if found is None:
            found = self._placement[key] = _Placement.build(self.geom, coords)
        return found


class _Placement:
    """Destination (slot, sample axis first) and source (chunk, sample axis moved first) indices of
    one chunk, off the sample axis. An axis index is a slice, an index array (a list selection), or
    an integer (a dropped axis, source only); two or more arrays index as an outer product."""

    __slots__ = ("_drop", "_dst", "_src")

    def __init__(self, dst: list[Any], drop: tuple[Any, ...], src: list[Any]) -> None:
        self._dst = dst
        self._drop = drop
        self._src = src

    @classmethod
    def build(cls, geom: ArrayGeometry, coords: tuple[int, ...]) -> _Placement:
        dst: list[Any] = []
        drop: list[Any] = [slice(None)]
        src: list[Any] = []
        for d, (c, size, extent) in enumerate(zip(coords, geom.chunk_shape, geom.shape, strict=True)):
            if d == geom.sample_axis:
                continue
            lo = c * size
            hi = min(lo + size, extent)
            chosen = geom.axis_selection(d)
            if chosen is None:
                dst.append(slice(lo, hi))
                src.append(slice(0, hi - lo))
                drop.append(slice(None))
                continue
            if not chosen.keep:
                drop.append(chosen.indices[0] - lo)
                continue
            idx = chosen.array
            pos = np.flatnonzero((idx >= lo) & (idx < hi))
            dst.append(_run_or_array(pos))
            src.append(_run_or_array(idx[pos] - lo))
            drop.append(slice(None))
        dropped = tuple(drop) if any(not isinstance(i, slice) for i in drop) else ()
        return cls(dst, dropped, src)

    def dst(self, rows: int) -> tuple[Any, ...]:
        return _outer([slice(0, rows), *self._dst])

    def take(self, moved: np.ndarray, rows: int) -> np.ndarray:
        if self._drop:
            moved = moved[self._drop]
        return moved[_outer([slice(0, rows), *self._src], moved.shape)]


def _run_or_array(values: np.ndarray) -> slice | np.ndarray:
    """A slice when ``values`` is one ascending run (basic indexing: a view, no gather)."""
    if len(values) and int(values[-1]) - int(values[0]) == len(values) - 1 and (np.diff(values) == 1).all():
        return slice(int(values[0]), int(values[-1]) + 1)
    return values


def _outer(index: list[Any], shape: tuple[int, ...] | None = None) -> tuple[Any, ...]:
    """``index`` as an outer (orthogonal) index: numpy broadcasts two index arrays together instead."""
    if sum(isinstance(i, np.ndarray) for i in index) < 2:
        return tuple(index)
    axes = []
    for d, i in enumerate(index):
        if isinstance(i, slice):
            stop = i.stop if i.stop is not None else (shape[d] if shape is not None else None)
            assert stop is not None, "an open slice needs the shape"
            axes.append(np.arange(i.start or 0, stop))
        else:
            axes.append(i)
    return np.ix_(*axes)


class _SlabMark:
    """Stands for the slab's number in a key: formats (and prints) as a character no key holds."""

    def __format__(self, spec: str) -> str:
        return "\x00"

    def __str__(self) -> str:
        return "\x00"


def _key_around_slab(encode: Any, rest: tuple[int, ...] | None) -> tuple[str, str] | None:
    """``(head, tail)`` with ``encode((slab, *rest)) == f"{head}{slab}{tail}"`` for every slab, or
    None when the encoder's keys are not the slab's decimal number in a fixed frame."""
    if rest is None:
        return None
    try:
        marked = encode((_SlabMark(), *rest))
    except Exception:  # an encoder that needs integers: keys are made one by one
        return None
    if not isinstance(marked, str) or marked.count("\x00") != 1:
        return None
    head, tail = marked.split("\x00")
    for slab in (0, 7, 1234567):  # the frame must reproduce the encoder's own keys
        if encode((slab, *rest)) != f"{head}{slab}{tail}":
            return None
    return head, tail
