"""What this process could ever map: sizes no pass could allocate, refused when the dataset is built.

A batch array, a pool arena or one decoded slab that is larger than the
address space the process has left (``RLIMIT_AS``, ``ulimit -v``) or than
the machine's memory (RAM and swap, or a cgroup's limit) can never be
allocated. Found only at ``next()``, it would be a ``MemoryError`` after the
store was opened and the first reads were made; here it is a
:class:`~insitu.errors.ConfigError` at construction naming the label, the
bytes and the limit. Sizes that merely exceed the memory *free* right now
are not refused (the page cache gives way; the ``next()`` path stays the
backstop for what really runs out). What a pass holds is the memory model's
answer (:func:`~insitu.plan.memory_model.pass_footprint`); this module knows
the limits and words the refusals.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.transforms import SlabSpec
from insitu.errors import ConfigError
from insitu.options import ReadOptions
from insitu.plan.memory_model import PassFootprint


@dataclass(frozen=True)
class Limit:
    """The most bytes that can be mapped, and where that number comes from (for messages)."""

    nbytes: int
    source: str


def _status_bytes(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmSize``: bytes mapped now), in bytes."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def address_space_left() -> Limit | None:
    """What ``RLIMIT_AS`` (``ulimit -v``) still lets this process map; None when unlimited."""
    if sys.platform == "win32":
        return None
    import resource  # POSIX only

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    mapped = _status_bytes("VmSize") or 0
    left = max(0, soft - mapped)
    return Limit(
        left,
        f"the {left:,} bytes of address space left under RLIMIT_AS (ulimit -v: {soft:,} bytes, "
        f"{mapped:,} already mapped)",
    )


def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                name, _, rest = line.partition(":")
                parts = rest.split()
                if parts and parts[0].isdigit():
                    out[name] = int(parts[0]) * 1024
    except OSError:
        pass
    return out


def memory_ceiling() -> Limit | None:
    """The most memory the process could ever fill: RAM and swap, or a cgroup's limit when lower."""
    found: list[Limit] = []
    info = _meminfo()
    if "MemTotal" in info:
        total = info["MemTotal"] + info.get("SwapTotal", 0)
        found.append(Limit(total, f"the machine's {total:,} bytes of RAM and swap"))
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            cap = Path(path).read_text().strip()
        except OSError:
            continue
        if cap.isdigit() and int(cap) < 1 << 60:  # "max" or a huge number: no limit
            found.append(Limit(int(cap), f"the cgroup's memory limit of {int(cap):,} bytes ({path})"))
    return min(found, key=lambda lim: lim.nbytes) if found else None


def mapping_limits(*, memory: bool = True) -> list[Limit]:
    """The limits a mapping must fit: the address space left, and (``memory``: it is anonymous
    memory, not a file) the machine's memory."""
    found = [address_space_left()]
    if memory:
        found.append(memory_ceiling())
    return [lim for lim in found if lim is not None]


def check_fits(
    held: PassFootprint,
    arrays: Mapping[str, ArrayGeometry],
    specs: Mapping[str, SlabSpec],
    options: ReadOptions,
    *,
    pool_in_memory: bool,
) -> None:
    """Refuse, naming the label, the bytes and the limit, what no pass could map: one batch, one
    decoded slab, or the pool's arenas with the batches a pass holds at once (the prefetch queue,
    the batch being filled, and the read-ahead rows of arrays the pool does not hold whole).

    ``held``: what a pass holds, as the memory model counts it (:func:`~insitu.plan.memory_model.pass_footprint`);
    ``pool_in_memory``: the arenas are anonymous memory (not files in ``cache_dir``)."""
    anonymous = mapping_limits()
    address = mapping_limits(memory=False)
    if not anonymous:
        return
    for label, nbytes in held.batch_bytes.items():
        _refuse_over(
            nbytes,
            anonymous,
            f"label {label!r} takes {nbytes:,} bytes per batch (batch_size={options.batch_size})",
            "lower batch_size, select a region of the array (sel=/isel=), or raise the limit",
        )
    for path, spec in specs.items():
        _refuse_over(
            spec.nbytes,
            anonymous,
            f"array {path!r} decodes {spec.nbytes:,} bytes per chunk along the sample axis "
            f"({arrays[path].chunk_len:,} samples of {spec.sample_nbytes:,} bytes)",
            "rechunk the array or select a region of it (sel=/isel=)",
        )
    what = (
        f"a pass needs at least {held.total:,} bytes at once: the pool's "
        f"{held.arenas:,} bytes, {held.batches} batch(es) of {held.batch:,} bytes (batch_size="
        f"{options.batch_size}, prefetch={options.prefetch}), {held.readahead:,} bytes of read-ahead rows "
        f"(readahead_blocks={options.readahead_blocks}, block_chunks={options.block_chunks}) "
        f"and one decoded chunk of {held.largest_slab:,} bytes"
    )
    hint = "lower cache_budget_bytes, batch_size, prefetch or readahead_blocks, or raise the limit"
    if pool_in_memory:
        _refuse_over(held.total, anonymous, what, hint)
    else:  # arenas are files in cache_dir: mapped, but not held in memory
        _refuse_over(held.besides_pool, anonymous, what, hint)
        _refuse_over(held.total, address, what, hint)


def _refuse_over(nbytes: int, limits: Sequence[Limit], what: str, hint: str) -> None:
    for lim in limits:
        if nbytes > lim.nbytes:
            raise ConfigError(f"{what}, beyond {lim.source}: no pass could allocate it; {hint}")


__all__ = ["Limit", "address_space_left", "check_fits", "mapping_limits", "memory_ceiling"]
