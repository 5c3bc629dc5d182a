"""Statistics a user reads, logs or exports: typed snapshots, per dataset, per view and per pass.

:class:`Stats` (``dataset.stats``) is a frozen snapshot of the engine's
counters. Counters only grow over a dataset's life; the few *gauges*
(``resident_bytes``, ``peak_resident_bytes``, ``budget_bytes``) and the
*rates* derived from counters (``hit_rate``, ``stall_fraction``,
``samples_per_s``) are marked as such. It reads as a mapping too
(``stats["reads"]``), and ``as_dict()`` is JSON-ready.

The live counters are typed records, one per concern, each owned by the part
that counts: :class:`EngineCounters` (``engine.stats``: reads, decodes, hits,
batches, consumer time), :class:`FetchCounters` (a fetcher's retries and
timeouts); gauges are read into :class:`PoolGauges`, :class:`InflightGauges`
and :class:`CacheChecks`. ``Engine.counters()`` returns the engine's records
and :meth:`Stats.from_records` snapshots them, so a new counter is declared
here only: a field on its record and the same field on :class:`Stats` (a test
holds the two together), then incremented by name where the work is done.

:class:`PassReport` is one pass over a view (an epoch, or the part of it a
consumer took): what it delivered and the engine work done meanwhile (the
difference of two snapshots). Each pass that ends is logged at INFO on the
``insitu.epoch`` logger in one line (at WARNING when it met bad chunks: the
pass's summary of what was skipped), and handed to every callback added with
``dataset.add_stats_callback`` — the place to export to a metrics system.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

logger = logging.getLogger("insitu.epoch")


# -- the live counters: one typed record per concern, each field incremented by name --------------
class BadChunkKind(enum.Enum):
    """Why a chunk counted in ``bad_chunks`` was bad: which ``bad_chunks_*`` counter it adds to."""

    READ = "read"  #: never counted: a store that fails to deliver raises StoreUnavailableError
    SIZE = "size"  #: the bytes decode (or are stored) at another size than the chunk's
    DECODE = "decode"  #: the codecs rejected the bytes


@dataclass
class EngineCounters:
    """The engine's live counters (``engine.stats``), snapshotted into :class:`Stats`.

    The loader counts reads, decodes and bad chunks; an epoch counts slab hits, batches and
    skipped samples; a view iterator its consumer's time. Every field here is a :class:`Stats`
    field of the same name (a test holds the two together)."""

    reads: int = 0  # GETs issued (whole chunks, byte ranges and shard indexes)
    bytes_read: int = 0
    chunks_decoded: int = 0
    slabs_loaded: int = 0  # decoded into the pool
    slabs_streamed: int = 0  # decoded outside the pool, straight into batch rows (not cached)
    slab_hits: int = 0  # slab uses served by the pool without a load
    bytes_decoded: int = 0  # decoded (and transformed) bytes of the slabs loaded or streamed
    bytes_delivered: int = 0  # bytes of the batches handed to the consumer
    missing_chunks: int = 0  # absent from the store: fill value
    bad_chunks: int = 0  # failed to read/decode (on_bad_chunk="nan"/"skip"), of which:
    bad_chunks_read: int = 0  # always 0: a store that fails to deliver raises StoreUnavailableError
    bad_chunks_size: int = 0  # ... the bytes decode (or are stored) at another size than the chunk's
    bad_chunks_decode: int = 0  # ... the codecs rejected the bytes
    batches: int = 0
    samples: int = 0
    skipped_samples: int = 0
    dropped_batches: int = 0  # batches skipping left empty (or short, with drop_last): not delivered
    iterating_s: float = 0.0  # consumer wall time inside view iteration
    waiting_s: float = 0.0  # ... of which spent waiting for the next batch (the loader was behind)

    def count_bad_chunk(self, kind: BadChunkKind) -> None:
        """One more bad chunk that ``on_bad_chunk`` let through, counted in ``bad_chunks`` and in
        the ``bad_chunks_*`` counter of its ``kind``."""
        self.bad_chunks += 1
        if kind is BadChunkKind.SIZE:
            self.bad_chunks_size += 1
        elif kind is BadChunkKind.READ:
            self.bad_chunks_read += 1
        else:
            self.bad_chunks_decode += 1

    def as_dict(self) -> dict[str, float]:
        """The counters as a plain dict."""
        return asdict(self)


@dataclass
class FetchCounters:
    """Transient store errors retried and requests timed out: a fetcher's own, or (for
    :meth:`insitu.store.fetch.ChunkFetcher.totals`) by whichever single layer retried."""

    retries: int = 0  # transient store errors retried
    timeouts: int = 0  # requests that ran past the policy's timeout_s (retried or not)


@dataclass(frozen=True)
class InflightGauges:
    """The requests-in-flight limit a remote store's reads run under, as :class:`Stats` reports it
    (all 0 for local files, which are read in the decode threads without a limit)."""

    inflight_limit: int = 0  # the limit now
    inflight_limit_max: int = 0  # the most it allowed so far
    inflight_changes: int = 0  # times it changed
    congestion_events: int = 0  # throttled, timed-out, failed or retried reads that made it back off


@dataclass(frozen=True)
class PoolGauges:
    """The pool's bytes as :class:`Stats` reports them."""

    resident_bytes: int = 0  # holding slabs now
    peak_resident_bytes: int = 0  # the most ever held
    budget_bytes: int = 0  # the byte budget


@dataclass(frozen=True)
class CacheChecks:
    """Persisted slabs checked when the dataset opened, by outcome (all 0 without a persisted cache)."""

    cache_verified_slabs: int = 0  # reused
    cache_stale_slabs: int = 0  # dropped: their stored bytes changed since
    cache_corrupt_slabs: int = 0  # dropped as damaged (persist="rebuild")

    @classmethod
    def from_counts(cls, counts: Mapping[str, int]) -> CacheChecks:
        """From a persisted cache's ``counts`` (``verified``, ``stale``, ``corrupt``)."""
        return cls(counts.get("verified", 0), counts.get("stale", 0), counts.get("corrupt", 0))


#: The records :meth:`Stats.from_records` reads, in the order of :class:`Stats`'s fields.
CounterRecord = EngineCounters | FetchCounters | CacheChecks | PoolGauges | InflightGauges


@dataclass(frozen=True)
class Stats(Mapping[str, Any]):
    """A snapshot of a dataset's engine. Counters never go backwards; gauges and rates are noted."""

    reads: int = 0  #: GETs issued (whole chunks, byte ranges, shard indexes)
    bytes_read: int = 0
    chunks_decoded: int = 0
    slabs_loaded: int = 0  #: decoded into the pool (cached)
    slabs_streamed: int = 0  #: decoded straight into batch rows, not cached
    slab_hits: int = 0  #: slab uses served by the pool without a load
    bytes_decoded: int = 0  #: decoded (and transformed) bytes of the slabs loaded or streamed
    bytes_delivered: int = 0  #: bytes of the batches handed to the consumer
    missing_chunks: int = 0  #: absent from the store: fill value
    bad_chunks: int = 0  #: failed to read or decode (on_bad_chunk="nan"/"skip"), of which:
    bad_chunks_read: int = 0
    bad_chunks_size: int = 0
    bad_chunks_decode: int = 0
    batches: int = 0
    samples: int = 0
    skipped_samples: int = 0
    dropped_batches: int = 0  #: batches skipping left empty (or short, with drop_last): not delivered
    iterating_s: float = 0.0  #: consumer wall time inside view iteration
    waiting_s: float = 0.0  #: ... of which spent waiting for the next batch
    retries: int = 0  #: transient store errors retried
    timeouts: int = 0
    cache_verified_slabs: int = 0  #: persisted slabs checked and reused at open
    cache_stale_slabs: int = 0
    cache_corrupt_slabs: int = 0
    resident_bytes: int = 0  #: gauge: pool bytes holding slabs now
    peak_resident_bytes: int = 0  #: gauge: most ever held
    budget_bytes: int = 0  #: gauge: the pool's byte budget
    inflight_limit: int = 0  #: gauge: requests in flight the engine allows now (0: local files, no limit)
    inflight_limit_max: int = 0  #: gauge: the most it allowed so far (at most ``max_inflight``)
    inflight_changes: int = (
        0  #: times the engine changed that limit (see ``InSituDataset.inflight_trajectory``)
    )
    congestion_events: int = (
        0  #: throttled responses, timeouts, failed or retried reads that made it back off
    )
    hit_rate: float = 0.0  #: rate: slab_hits / (slab_hits + slabs_loaded + slabs_streamed)
    stall_fraction: float = 0.0  #: rate: waiting_s / iterating_s (near 0: the model sets the pace)
    samples_per_s: float = 0.0  #: rate: samples / iterating_s
    decoded_per_delivered: float = 0.0  #: rate: bytes_decoded / bytes_delivered (patches: < 1 is reuse)

    @classmethod
    def from_records(cls, *records: CounterRecord) -> Stats:
        """A snapshot of counter records (their fields are this class's; rates are derived here)."""
        counters: dict[str, Any] = {}
        for record in records:
            counters.update(asdict(record))
        return cls.from_counters(counters)

    @classmethod
    def from_counters(cls, counters: Mapping[str, Any]) -> Stats:
        """A snapshot from raw counters; the rates are derived here."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in counters.items() if k in known}
        uses = values.get("slab_hits", 0) + values.get("slabs_loaded", 0) + values.get("slabs_streamed", 0)
        busy = values.get("iterating_s", 0.0)
        values["hit_rate"] = values.get("slab_hits", 0) / uses if uses else 0.0
        values["stall_fraction"] = values.get("waiting_s", 0.0) / busy if busy else 0.0
        values["samples_per_s"] = values.get("samples", 0) / busy if busy else 0.0
        delivered = values.get("bytes_delivered", 0)
        values["decoded_per_delivered"] = values.get("bytes_decoded", 0) / delivered if delivered else 0.0
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        """The counters and rates as a plain dict."""
        return asdict(self)

    def __getitem__(self, key: str) -> Any:
        if key not in self._names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    @classmethod
    def _names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


#: Counters whose difference over a pass is reported (gauges and rates are not differences).
PASS_COUNTERS = (
    "reads",
    "bytes_read",
    "chunks_decoded",
    "slabs_loaded",
    "slabs_streamed",
    "slab_hits",
    "bytes_decoded",
    "bytes_delivered",
    "retries",
    "timeouts",
    "congestion_events",
    "bad_chunks",
    "missing_chunks",
    "skipped_samples",
    "dropped_batches",
)


@dataclass(frozen=True)
class PassReport:
    """One pass over a view: what it delivered and the engine's work meanwhile."""

    split: str
    epoch: int
    rank: int
    world_size: int
    batches: int
    samples: int
    seconds: float
    waiting_s: float
    completed: bool  #: False when the consumer stopped the pass with the iterator's close()
    engine: Mapping[str, int]  #: differences of :data:`PASS_COUNTERS` over the pass
    #: requests-in-flight limit at the pass's start and each the engine chose during it (remote stores)
    inflight: tuple[int, ...] = ()
    #: patch sampling: the distinct stored chunks the pass's plan reads (0 for whole cross-sections)
    distinct_chunks: int = 0

    @property
    def read_amplification(self) -> float:
        """Patch sampling: chunk decodes per distinct chunk the pass read (1.0: each decoded once;
        below 1 when the pool held chunks from an earlier pass); 0 for whole cross-sections."""
        return self.engine.get("chunks_decoded", 0) / self.distinct_chunks if self.distinct_chunks else 0.0

    @property
    def decoded_per_delivered(self) -> float:
        """Decoded bytes per byte delivered in batches during the pass (0 when nothing was delivered)."""
        delivered = self.engine.get("bytes_delivered", 0)
        return self.engine.get("bytes_decoded", 0) / delivered if delivered else 0.0

    @property
    def samples_per_s(self) -> float:
        """Samples delivered per second of the pass (0 for an empty pass)."""
        return self.samples / self.seconds if self.seconds else 0.0

    @property
    def stall_fraction(self) -> float:
        """Fraction of the pass spent waiting for the next batch (near 0: the model sets the pace)."""
        return self.waiting_s / self.seconds if self.seconds else 0.0

    @property
    def mb_per_s(self) -> float:
        """Megabytes (10**6 bytes) read from the store per second of the pass."""
        return self.engine.get("bytes_read", 0) / 1e6 / self.seconds if self.seconds else 0.0

    @property
    def hit_rate(self) -> float:
        """Slab uses served by the pool without a load, as a fraction of all slab uses in the pass."""
        e = self.engine
        uses = e.get("slab_hits", 0) + e.get("slabs_loaded", 0) + e.get("slabs_streamed", 0)
        return self.engine.get("slab_hits", 0) / uses if uses else 0.0

    def line(self) -> str:
        """The one-line summary logged at INFO."""
        rank = f" rank {self.rank}/{self.world_size}" if self.world_size > 1 else ""
        ended = "" if self.completed else " (stopped early)"
        e = self.engine
        return (
            f"{self.split} epoch {self.epoch}{rank}{ended}: {self.samples} samples in {self.batches} batches, "
            f"{self.seconds:.2f} s ({self.samples_per_s:.0f} samples/s, {self.mb_per_s:.1f} MB/s read), "
            f"stall {self.stall_fraction:.0%}, hit rate {self.hit_rate:.2f}, "
            f"retries {e.get('retries', 0)}, bad chunks {e.get('bad_chunks', 0)}"
            + (
                f" ({e.get('skipped_samples', 0)} samples skipped, {e.get('dropped_batches', 0)} batches dropped)"
                if e.get("bad_chunks", 0)
                else ""
            )
            + self._inflight_words()
            + (
                f", read amplification {self.read_amplification:.2f} "
                f"({self.decoded_per_delivered:.2f} bytes decoded per byte delivered)"
                if self.distinct_chunks
                else ""
            )
        )

    def _inflight_words(self) -> str:
        if not self.inflight:
            return ""
        limits = self.inflight
        shown = limits if len(limits) <= 8 else (*limits[:3], "...", *limits[-3:])
        backoffs = self.engine.get("congestion_events", 0)
        return f", in flight {' -> '.join(map(str, shown))}" + (f" ({backoffs} backoffs)" if backoffs else "")

    def as_dict(self) -> dict[str, Any]:
        """The report as a plain dict: its fields, the engine counters and the derived rates."""
        return {
            **asdict(self),
            "engine": dict(self.engine),
            "samples_per_s": self.samples_per_s,
            "stall_fraction": self.stall_fraction,
            "mb_per_s": self.mb_per_s,
            "hit_rate": self.hit_rate,
        }


def difference(after: Stats, before: Stats) -> dict[str, int]:
    """Each of :data:`PASS_COUNTERS` in ``after`` minus ``before``."""
    return {k: int(after[k] - before[k]) for k in PASS_COUNTERS}


__all__ = [
    "PASS_COUNTERS",
    "BadChunkKind",
    "CacheChecks",
    "CounterRecord",
    "EngineCounters",
    "FetchCounters",
    "InflightGauges",
    "PassReport",
    "PoolGauges",
    "Stats",
    "difference",
    "logger",
]
