"""What this process could ever map: sizes no pass could allocate, refused when the dataset is built.

A batch array, a pool arena or one decoded slab that is larger than the
address space the process has left (``RLIMIT_AS``, ``ulimit -v``) or than
the machine's memory (RAM and swap, or a cgroup's limit) can never be
allocated. Found only at ``next()``, it would be a ``MemoryError`` after the
store was opened and the first reads were made; here it is a
:class:`~insitu.errors.ConfigError` at construction naming the label, the
bytes and the limit. Sizes that merely exceed the memory *free* right now
are not refused (the page cache gives way; the ``next()`` path stays the
backstop for what really runs out).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.transforms import SlabSpec
from insitu.errors import ConfigError
from insitu.options import ReadOptions


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


def _sample_bytes(spec: SlabSpec) -> int:
    return math.prod(spec.sample_shape) * spec.dtype.itemsize


def check_fits(
    arrays: Mapping[str, ArrayGeometry],
    specs: Mapping[str, SlabSpec],
    labels: Sequence[ArrayGeometry],
    slots: Mapping[str, int],
    options: ReadOptions,
    *,
    n_samples: int,
    pool_in_memory: bool,
) -> None:
    """Refuse, naming the label, the bytes and the limit, what no pass could map: one batch, one
    decoded slab, or the pool's arenas with the batches a pass holds at once (the prefetch queue,
    the batch being filled, and the read-ahead rows of arrays the pool does not hold whole).

    ``n_samples``: the samples a pass can deliver at most (no batch holds more);
    ``pool_in_memory``: the arenas are anonymous memory (not files in ``cache_dir``)."""
    anonymous = mapping_limits()
    address = mapping_limits(memory=False)
    if not anonymous:
        return
    rows = min(options.batch_size, n_samples)
    per_label = {g.label: _sample_bytes(specs[g.path]) * rows for g in labels}
    for label, nbytes in per_label.items():
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
            f"({arrays[path].chunk_len:,} samples of {_sample_bytes(spec):,} bytes)",
            "rechunk the array or select a region of it (sel=/isel=)",
        )
    arenas = sum(slots[path] * specs[path].nbytes for path in specs)
    batch = sum(per_label.values())
    batches = min(1 + options.prefetch, -(-n_samples // max(1, rows)))
    in_flight = batch * batches
    ahead = 0
    for g in labels:
        if slots[g.path] < arrays[g.path].n_slabs:  # streamed rows land in batch buffers
            ahead_rows = min(n_samples, options.readahead_blocks * options.block_chunks * g.chunk_len)
            ahead += ahead_rows * _sample_bytes(specs[g.path])
    largest_slab = max((spec.nbytes for spec in specs.values()), default=0)
    batches_and_ahead = in_flight + ahead + largest_slab
    what = (
        f"a pass needs at least {arenas + batches_and_ahead:,} bytes at once: the pool's "
        f"{arenas:,} bytes, {batches} batch(es) of {batch:,} bytes (batch_size="
        f"{options.batch_size}, prefetch={options.prefetch}), {ahead:,} bytes of read-ahead rows "
        f"(readahead_blocks={options.readahead_blocks}, block_chunks={options.block_chunks}) "
        f"and one decoded chunk of {largest_slab:,} bytes"
    )
    hint = "lower cache_budget_bytes, batch_size, prefetch or readahead_blocks, or raise the limit"
    if pool_in_memory:
        _refuse_over(arenas + batches_and_ahead, anonymous, what, hint)
    else:  # arenas are files in cache_dir: mapped, but not held in memory
        _refuse_over(batches_and_ahead, anonymous, what, hint)
        _refuse_over(arenas + batches_and_ahead, address, what, hint)


def _refuse_over(nbytes: int, limits: Sequence[Limit], what: str, hint: str) -> None:
    for lim in limits:
        if nbytes > lim.nbytes:
            raise ConfigError(f"{what}, beyond {lim.source}: no pass could allocate it; {hint}")


__all__ = ["Limit", "address_space_left", "check_fits", "mapping_limits", "memory_ceiling"]
