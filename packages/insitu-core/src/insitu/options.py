"""The dataset's keyword arguments, validated once into small frozen option objects.

``InSituDataset`` keeps its public keywords (they are the user contract);
this module checks each of them once, naming the bad value, and groups them
by the part of the engine that reads them. Downstream modules receive these
objects and do not re-validate.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from insitu.errors import ConfigError

#: The default ``cache_budget_bytes``: the whole dataset when it fits in a quarter of the memory
#: available, else that quarter (see :func:`insitu.plan.budget.auto_budget`).
DEFAULT_CACHE_BUDGET = "auto"

#: The default ``block_chunks``: 16 chunks, or more where chunks are small (see
#: :func:`auto_block_chunks`).
DEFAULT_BLOCK_CHUNKS = "auto"
#: Chunks per block that "auto" never goes below: a batch of one-sample chunks of a few hundred
#: kB mixes up to this many chunks.
AUTO_BLOCK_MIN = 16
#: Chunks per block that "auto" never goes above.
AUTO_BLOCK_MAX = 1024
#: Decoded bytes "auto" gives one block at least (half of 16 one-sample chunks of a 181 x 360
#: float32 field). Smaller chunks get more of them per block, so what a block costs the engine
#: (planning, pins, one waiter, one release, decode jobs of several chunks) is paid for as many
#: bytes.
AUTO_BLOCK_BYTES = 2 << 20


class BadChunkPolicy(enum.Enum):
    """What a chunk that cannot be read or decoded becomes."""

    RAISE = "raise"  # the epoch fails with BadChunkError naming the chunk
    NAN = "nan"  # its samples are NaN (the fill value for integer arrays), counted in stats
    SKIP = "skip"  # its samples are left out of the batches, counted in stats

    @classmethod
    def parse(cls, value: Any) -> BadChunkPolicy:
        """The policy named by ``value`` (``"raise"``, ``"nan"`` or ``"skip"``), or a ConfigError naming it."""
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            choices = tuple(p.value for p in cls)
            raise ConfigError(f"on_bad_chunk={value!r}; expected one of {choices}") from None


@dataclass(frozen=True)
class ReadOptions:
    """How an epoch is ordered, read ahead and batched."""

    batch_size: int
    block_chunks: int
    max_inflight: int
    prefetch: int
    readahead_blocks: int
    decode_threads: int
    seed: int
    shuffle: bool
    drop_last: bool
    #: ``block_chunks="auto"``: ``block_chunks`` is :data:`AUTO_BLOCK_MIN` until the dataset's
    #: arrays are known, then :func:`auto_block_chunks` of their chunk sizes.
    auto_block: bool = False

    def with_chunk_bytes(self, unit_nbytes: int) -> ReadOptions:
        """These options once the decoded bytes of one chunk of every sampled array together
        (``unit_nbytes``) are known: an "auto" block sized from them, else unchanged."""
        if not self.auto_block:
            return self
        return replace(self, block_chunks=auto_block_chunks(unit_nbytes))


def auto_block_chunks(unit_nbytes: int) -> int:
    """Chunks per block for ``block_chunks="auto"``: :data:`AUTO_BLOCK_MIN`, doubled while a block
    holds less than :data:`AUTO_BLOCK_BYTES` of decoded data, at most :data:`AUTO_BLOCK_MAX`.

    Never fewer chunks than the fixed default of earlier releases: shuffles mix as well or better,
    and a block's memory stays near :data:`AUTO_BLOCK_BYTES` where it grows."""
    n = AUTO_BLOCK_MIN
    while n < AUTO_BLOCK_MAX and n * max(1, unit_nbytes) < AUTO_BLOCK_BYTES:
        n *= 2
    return n


@dataclass(frozen=True)
class CacheOptions:
    """The decoded-chunk pool's byte budget (``None``: "auto", sized when the dataset is known)
    and its optional disk tier."""

    budget_bytes: int | None
    cache_dir: Path | None
    persist: bool
    rebuild: bool


@dataclass(frozen=True)
class ShardOptions:
    """Which rank of how many this dataset reads by default, and how uneven ranks are evened."""

    rank: int
    world_size: int
    uneven: str


def read_options(
    *,
    batch_size: Any,
    block_chunks: Any,
    max_inflight: Any,
    prefetch: Any,
    readahead_blocks: Any,
    decode_threads: Any,
    seed: Any,
    shuffle: Any,
    drop_last: Any,
) -> ReadOptions:
    """Validate the dataset's reading arguments once into a :class:`ReadOptions`.

    Every count must be a positive integer, ``seed`` a non-negative one, and ``shuffle`` and
    ``drop_last`` booleans; a bad value raises ConfigError naming the argument. ``decode_threads``
    of ``None`` means one per CPU."""
    threads = (os.cpu_count() or 1) if decode_threads is None else decode_threads
    auto_block = isinstance(block_chunks, str) and block_chunks == "auto"
    return ReadOptions(
        batch_size=positive_int("batch_size", batch_size),
        block_chunks=AUTO_BLOCK_MIN if auto_block else _block_chunks(block_chunks),
        max_inflight=positive_int("max_inflight", max_inflight),
        prefetch=positive_int("prefetch", prefetch),
        readahead_blocks=positive_int("readahead_blocks", readahead_blocks),
        decode_threads=positive_int("decode_threads", threads),
        seed=seed_value("seed", seed),
        shuffle=flag("shuffle", shuffle),
        drop_last=flag("drop_last", drop_last),
        auto_block=auto_block,
    )


def cache_options(*, budget_bytes: Any, cache_dir: Any, persist: Any) -> CacheOptions:
    """Validate the cache arguments once into a :class:`CacheOptions`.

    Parameters
    ----------
    budget_bytes
        ``"auto"`` (sized once the dataset is known), or decoded bytes the pool may cache (0: none).
    cache_dir
        A directory for memory-mapped arenas, or ``None`` to keep the pool in memory.
    persist
        ``True`` keeps decoded chunks in ``cache_dir`` across runs (it is required then);
        ``"rebuild"`` discards what is there first.

    Raises
    ------
    ConfigError
        Naming the bad argument and its value."""
    if not (persist is True or persist is False or persist == "rebuild"):
        raise ConfigError(f"persist={persist!r}; expected False, True or 'rebuild'")
    if persist and cache_dir is None:
        raise ConfigError("persist=True needs a cache_dir to keep decoded chunks in")
    if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
        raise ConfigError(f"cache_dir must be a path, got {type(cache_dir).__name__}: {cache_dir!r}")
    return CacheOptions(
        budget_bytes=None
        if isinstance(budget_bytes, str) and budget_bytes == "auto"
        else _budget(budget_bytes),
        cache_dir=None if cache_dir is None else Path(cache_dir),
        persist=bool(persist),
        rebuild=persist == "rebuild",
    )


def shard_options(*, rank: Any, world_size: Any, uneven: Any) -> ShardOptions:
    """Validate the sharding arguments once into a :class:`ShardOptions`: ``rank`` in
    ``[0, world_size)``, ``uneven`` ``"drop"`` or ``"pad"``; otherwise a ConfigError naming the value."""
    check_rank(rank, world_size)
    if uneven not in ("drop", "pad"):
        raise ConfigError(f"uneven={uneven!r}; expected 'drop' or 'pad'")
    return ShardOptions(rank=int(rank), world_size=int(world_size), uneven=uneven)


def _budget(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ConfigError(
            f"cache_budget_bytes must be 'auto' or a non-negative integer (0: cache nothing), got {value!r}"
        )
    if value > _MAX_INT:
        raise ConfigError(f"cache_budget_bytes={value!r} is too large (at most 2**62)")
    return int(value)


# -- single-value checks, shared with the views and the order --------------------------------------
_MAX_INT = 2**62  # far beyond any sample count; keeps numpy's int64 arithmetic exact


def _block_chunks(value: Any) -> int:
    """``block_chunks`` other than "auto": a positive integer, else a ConfigError naming both forms."""
    if isinstance(value, str):
        raise ConfigError(f"block_chunks must be a positive integer or 'auto', got {value!r}")
    return positive_int("block_chunks", value)


def positive_int(name: str, value: Any) -> int:
    """``value`` as an int >= 1, else a ConfigError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    if value > _MAX_INT:
        raise ConfigError(f"{name}={value!r} is too large (at most 2**62)")
    return int(value)


def seed_value(name: str, value: Any) -> int:
    """A seed: an int >= 0 (numpy's generators refuse negative seeds, and 1.5 is not 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def flag(name: str, value: Any) -> bool:
    """``value`` as a bool (numpy booleans accepted); anything else is a ConfigError naming ``name``."""
    if not isinstance(value, (bool, np.bool_)):
        raise ConfigError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_rank(rank: Any, world_size: Any) -> None:
    """Raise ConfigError unless ``world_size`` is a positive integer and ``rank`` an integer in
    ``[0, world_size)``."""
    if isinstance(world_size, bool) or not isinstance(world_size, (int, np.integer)) or world_size < 1:
        raise ConfigError(f"world_size must be a positive integer, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 0 <= rank < world_size:
        raise ConfigError(f"rank={rank!r} must be in [0, world_size={world_size})")
