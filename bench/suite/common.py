"""What every engine runner shares: the run spec, store opening, timing and the result line.

An engine runner is a script ``bench/suite/engines/run_<engine>.py`` started by the
driver in a fresh interpreter (its own virtualenv where the engine needs one) as

    python bench/suite/engines/run_<engine>.py SPEC.json

It loads the spec, imports its engine, notes the interpreter's RSS floor,
starts the clock, builds the loader, runs one cold epoch (and a warm one when
the spec asks and the engine can), and prints one JSON result line last on
stdout (``emit``). The driver measures the peak RSS of the whole process tree
(DataLoader workers included) from outside.

This module must import under every benchmark interpreter (Python 3.11 with
zarr 3.1, Python 3.12 with zarr 3.4): numpy and zarr only.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Case:
    """One benchmark dataset, as written by the driver (``data.py``)."""

    name: str
    root: str  # local path of the zarr group (also the source of the S3 copy)
    variables: list[str]  # arrays in the group that make up one sample
    n_samples: int  # length of the sample (time) axis
    samples_per_chunk: int
    shape: list[int]  # one sample's field shape, e.g. [181, 360]
    dtype: str = "float32"
    # (t, t+h) windows: each sample is variables at t and at t + window (0: no window).
    window: int = 0
    sharded: bool = False  # v3 sharding_indexed: samples_per_chunk is the inner chunk length
    samples_per_shard: int = 0

    @property
    def samples_per_epoch(self) -> int:
        return self.n_samples - self.window

    @property
    def sample_nbytes(self) -> int:
        fields = len(self.variables) * (2 if self.window else 1)
        return fields * int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class StoreSpec:
    """Where the engine reads from: ``local`` disk, ``latency`` (local plus a delay per GET), ``s3``
    or ``http`` (nginx on loopback, delaying each request)."""

    kind: str = "local"
    latency_ms: float = 0.0
    # Above this many GETs at once the store answers 503 SlowDown (0: never), as S3 does when a
    # prefix is read faster than it allows: an engine must back off and retry, not fail or skip.
    throttle_above: int = 0
    endpoint: str = ""  # s3: http://127.0.0.1:PORT (moto); http: the group's URL
    bucket: str = ""
    prefix: str = ""  # s3: key prefix of the group


@dataclass(frozen=True)
class Spec:
    engine: str
    case: Case
    store: StoreSpec
    batch_size: int = 32
    seed: int = 0
    tuning: dict[str, Any] = field(default_factory=dict)
    warm: bool = False  # also time a second (warm) epoch when the engine has a cache
    max_seconds: float = 120.0  # slow engines stop early and report truncated=True

    @classmethod
    def load(cls, path: str) -> Spec:
        with open(path) as f:
            raw = json.load(f)
        return cls(
            engine=raw["engine"],
            case=Case(**raw["case"]),
            store=StoreSpec(**raw.get("store", {})),
            batch_size=raw.get("batch_size", 32),
            seed=raw.get("seed", 0),
            tuning=raw.get("tuning", {}),
            warm=raw.get("warm", False),
            max_seconds=raw.get("max_seconds", 120.0),
        )

    def dump(self) -> str:
        return json.dumps(asdict(self))


@dataclass
class Result:
    samples: int  # samples delivered in the cold epoch
    bytes: int  # bytes of sample data delivered in the cold epoch (all fields)
    elapsed_s: float  # construction -> last batch of the cold epoch
    ttfb_s: float  # construction -> first batch in hand
    floor_rss: int  # this process's RSS after imports, before construction (bytes)
    warm_elapsed_s: float | None = None  # second epoch, when run
    warm_samples: int | None = None
    truncated: bool = False  # stopped at max_seconds before the epoch ended
    checksum: float = 0.0  # sum of batch_sum over the epoch, to cross-check engines
    extra: dict[str, Any] = field(default_factory=dict)  # engine-specific notes (e.g. stats)


#: The ceiling engines: bounds measured beside the loaders (the driver runs them, the report sets
#: the loaders against them).
CEILINGS = (
    "ceiling_decode",
    "ceiling_decode_out",
    "ceiling_decode_keep",
    "ceiling_gather",
    "ceiling_rawget",
    "ceiling_fetch_keep",
)


def rss_now() -> int:
    """This process's resident set size in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def emit(result: Result) -> None:
    """Print the result line the driver reads (always the last stdout line)."""
    sys.stdout.flush()
    print(json.dumps(asdict(result)), flush=True)


def batch_sum(*arrays: Any) -> float:
    """Checksum contribution of one batch's arrays: float64 sum of every 251st value of each sample.

    Order-independent across batches and samples, so engines delivering the same
    samples agree; sparse so that checking costs the consumer next to nothing
    (summing every value would add a full extra pass over memory to the timing).
    Arrays have the sample axis first; torch CPU tensors are accepted.
    """
    total = 0.0
    for a in arrays:
        a = np.asarray(a)
        total += float(a.reshape(len(a), -1)[:, ::251].sum(dtype=np.float64))
    return total


def open_zarr_store(spec: Spec) -> Any:
    """The spec's store as a zarr v3 Store (works with zarr 3.1 and 3.4).

    ``latency``: a local store whose every get waits ``latency_ms`` first (a
    cloud round trip; concurrent gets overlap their waits, as they would over a
    network). ``s3``: obstore's S3 client against the loopback server, wrapped
    by zarr's ObjectStore, plus the latency when one is given.
    """
    from zarr.storage import LocalStore

    s = spec.store
    if s.kind in ("local", "latency"):
        store: Any = LocalStore(spec.case.root, read_only=True)
    elif s.kind == "s3":
        from obstore.store import S3Store
        from zarr.storage import ObjectStore

        store = ObjectStore(
            S3Store(
                s.bucket,
                prefix=s.prefix,
                endpoint=s.endpoint,
                region="us-east-1",
                access_key_id="bench",
                secret_access_key="bench-secret",
                client_options={"allow_http": True},
            ),
            read_only=True,
        )
    elif s.kind == "http":
        from obstore.store import HTTPStore
        from zarr.storage import ObjectStore

        store = ObjectStore(
            HTTPStore.from_url(s.endpoint, client_options={"allow_http": True}), read_only=True
        )
    else:
        raise ValueError(f"unknown store kind {s.kind!r}; expected local, latency, s3 or http")
    return remote_store(store, s)


def remote_store(store: Any, s: StoreSpec) -> Any:
    """``store`` as the condition serves it: ``latency_ms`` before every get, and throttled above
    ``throttle_above`` gets at once."""
    if s.throttle_above > 0:
        return _ThrottlingStore(store, s.latency_ms / 1e3, s.throttle_above)
    if s.latency_ms > 0:
        return latency_store(store, s.latency_ms / 1e3)
    return store


def latency_store(store: Any, delay_s: float) -> Any:
    """``store`` with ``delay_s`` added before every get (zarr WrapperStore; picklable)."""
    return _LatencyStore(store, delay_s)


class SlowDown(ConnectionError):
    """What an S3 client raises on ``503 SlowDown``: a transient error (a ConnectionError), with
    the status on the exception, the way insitu and the HTTP clients classify throttling."""

    status = 503


try:
    from zarr.storage import WrapperStore as _WrapperStore
except ImportError:  # pragma: no cover - zarr < 3.0.x without WrapperStore
    _WrapperStore = None  # type: ignore[assignment,misc]


class _LatencyStore(_WrapperStore):  # type: ignore[misc,valid-type]
    def __init__(self, store: Any, delay_s: float) -> None:
        super().__init__(store)
        self.delay_s = delay_s

    def _with_store(self, store: Any) -> _LatencyStore:
        return type(self)(store, self.delay_s)

    def __reduce__(self) -> tuple[Any, ...]:  # DataLoader workers get their own copy
        return (_LatencyStore, (self._store, self.delay_s))

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        await asyncio.sleep(self.delay_s)
        return await self._store.get(key, prototype, byte_range)

    async def get_partial_values(self, prototype: Any, key_ranges: Any) -> list[Any]:
        await asyncio.sleep(self.delay_s)
        return list(await self._store.get_partial_values(prototype, key_ranges))

    def insitu_identity(self) -> str:  # lets insitu's persisted caches tell stores apart
        return f"latency{self.delay_s}:{self._store}"


class Clock:
    """Construction-relative timing: ``start()`` before building the loader, ``first()`` at the first batch."""

    def __init__(self) -> None:
        self.t0 = 0.0
        self.ttfb = 0.0

    def start(self) -> None:
        self.t0 = time.perf_counter()

    def first(self) -> None:
        self.ttfb = time.perf_counter() - self.t0

    def since_start(self) -> float:
        return time.perf_counter() - self.t0


class Unsupported(Exception):
    """A case, store or layout a runner does not read; the message says why (reported, not failed)."""


def check_local_whole_blocks(spec: Spec, engine: str) -> None:
    """The checks of a runner that reads local files in whole blocks and takes the tunings
    ``threads`` and ``block_chunks``: anything else is :class:`Unsupported` or a ``ValueError``."""
    if spec.store.kind != "local" or spec.store.latency_ms > 0:
        raise Unsupported(f"reads local files only, not a {spec.store.kind} store")
    if spec.case.window:
        raise Unsupported(f"windowed samples span blocks; the {engine} runner reads whole blocks only")
    unknown = set(spec.tuning) - {"threads", "block_chunks"}
    if unknown:
        raise ValueError(f"unknown {engine} tuning keys {sorted(unknown)}")


def begin() -> tuple[int, Clock]:
    """The interpreter's RSS floor (after imports), and a clock started now: call right before
    opening the store and building the loader."""
    floor = rss_now()
    clock = Clock()
    clock.start()
    return floor, clock


class BatchDealer:
    """Deals shuffled rows of decoded blocks into fixed-size batches, a batch that one block does
    not fill completed from the next (the whole-block runners: simple, tensorstore).

    ``batches`` are the reused output arrays, one per variable, each ``batch_size`` rows long.
    """

    def __init__(self, batches: list[Any]) -> None:
        self.batches = batches
        self.size = len(batches[0])
        self.fill = 0

    def deal(self, sources: Iterable[Any], rows: Any) -> Iterable[list[Any]]:
        """Copy ``rows`` of each source (one per variable) into the batches; yield each full batch."""
        import numpy as np

        sources = list(sources)
        while len(rows):
            take, rows = rows[: self.size - self.fill], rows[self.size - self.fill :]
            for src, batch in zip(sources, self.batches, strict=True):
                np.take(src, take, axis=0, out=batch[self.fill : self.fill + len(take)])
            self.fill += len(take)
            if self.fill == self.size:
                yield self.batches
                self.fill = 0

    def rest(self) -> Iterable[list[Any]]:
        """The last, short batch (nothing when the epoch filled its batches exactly)."""
        if self.fill:
            yield [batch[: self.fill] for batch in self.batches]


def cold_epoch(
    spec: Spec,
    clock: Clock,
    floor: int,
    batches: Iterable[Any],
    fields: Callable[[Any], Sequence[Any]] = list,
) -> Result:
    """Consume one cold epoch: first-batch time, samples, bytes, checksum, the ``max_seconds`` cap.

    ``fields(batch)`` gives the batch's per-field arrays, each with the sample
    axis first (the default takes a batch that already is that sequence). The
    epoch ends at its last batch: shutting the loader down is not part of it.
    """
    samples = nbytes = 0
    checksum = elapsed = 0.0
    truncated = False
    for batch in batches:
        if samples == 0:
            clock.first()
        arrays = fields(batch)
        samples += len(arrays[0])
        nbytes += sum(a.nbytes for a in arrays)
        checksum += batch_sum(*arrays)
        elapsed = clock.since_start()
        if elapsed > spec.max_seconds:
            truncated = True
            break
    return Result(samples, nbytes, elapsed, clock.ttfb, floor, truncated=truncated, checksum=checksum)


def warm_epoch(result: Result, clock: Clock, batches: Callable[[], Iterable[Any]]) -> None:
    """Time a second epoch (``batches()`` builds its iterator) into ``result``'s warm fields."""
    clock.start()
    result.warm_samples = sum(len(b.sample_indices) for b in batches())
    result.warm_elapsed_s = clock.since_start()


class _ThrottlingStore(_LatencyStore):
    """A store that refuses (503 SlowDown, after one round trip) every get beyond ``limit`` in
    flight; the others wait ``delay_s`` as under ``latency``. Metadata is never refused (an
    engine should not fail to open the store, only have to pace its chunk reads)."""

    def __init__(self, store: Any, delay_s: float, limit: int) -> None:
        super().__init__(store, delay_s)
        self.limit = limit
        self.in_flight = 0

    def _with_store(self, store: Any) -> _ThrottlingStore:
        return type(self)(store, self.delay_s, self.limit)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_ThrottlingStore, (self._store, self.delay_s, self.limit))

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        if key.rsplit("/", 1)[-1] in _METADATA:
            return await super().get(key, prototype, byte_range)
        if self.in_flight >= self.limit:
            await asyncio.sleep(self.delay_s)  # a refusal costs a round trip too
            raise SlowDown(f"503 SlowDown: {key} ({self.limit} requests in flight at most)")
        self.in_flight += 1
        try:
            return await super().get(key, prototype, byte_range)
        finally:
            self.in_flight -= 1


_METADATA = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})
