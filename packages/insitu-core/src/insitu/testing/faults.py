"""Fault injection for reliability drills: a zarr store wrapper driven by a seeded, replayable plan.

:class:`FaultInjectingStore` wraps any zarr store and, following a frozen
:class:`FaultPlan`, delays GETs, fails them transiently, stalls them, damages
the bytes of stored objects, refuses or hides chosen keys, and serves
rewritten bytes for chosen keys. Open it by name::

    store = insitu.open_store("faults+file:///data.zarr", plan=FaultPlan(seed=1, transient_rate=0.05))
    store = insitu.open_store("s3://bucket/x.zarr", backend="faults", plan=plan)  # any scheme

Every decision is a function of ``(seed, key, attempt)``, where ``attempt``
counts the GETs of that key through this wrapper. A per-decision hash gives
the random number, not a shared generator, so the faults a key sees do not
depend on the order in which concurrent requests happen to arrive: a drill
replays exactly. Damage to bytes is decided per key (the stored object is
damaged, and stays so); errors, stalls and latency per attempt.

By default only chunk and shard keys are faulted; metadata (``zarr.json``,
``.zarray``, ``.zattrs``, ``.zgroup``...) passes through unless
``fault_metadata=True`` or the key is named in the plan.

The wrapper offers none of the engine's fast paths of the store it wraps
(raw reads, a store's own retry policy, direct file reads): every read goes
through :meth:`FaultInjectingStore.get`, and the engine retries the injected
transient errors under the dataset's ``RetryPolicy``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import math
import os
import random
import threading
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.buffer import default_buffer_prototype
from zarr.storage import LocalStore, WrapperStore

from insitu.store.opener import SCHEME_PACKAGES, open_store, split_url

#: What the counters of a :class:`FaultInjectingStore` count, one name per kind of fault.
FAULT_KINDS: tuple[str, ...] = (
    "delayed",  # GETs given a latency > 0
    "stalled",  # GETs that slept stall_s (a per-request timeout may have cut them short)
    "transient",  # ConnectionError / TimeoutError raised
    "forbidden",  # PermissionError raised (403)
    "missing",  # None returned for a present object (404)
    "truncated",  # GETs served from a truncated object
    "corrupted",  # ... from an object with flipped bytes
    "oversized",  # ... from an object with bytes appended
    "rewritten",  # ... from rewritten bytes
)

#: URL schemes served by the ``faults`` store builder: ``faults+`` before any scheme core knows of.
#: Other schemes are wrapped with ``open_store(url, backend="faults", plan=...)``.
FAULT_SCHEMES: tuple[str, ...] = tuple(f"faults+{s}" for s in ("file", "memory", *SCHEME_PACKAGES))

_DISTRIBUTIONS = ("fixed", "uniform", "lognormal")
_NORMAL = NormalDist()


def is_metadata_key(key: str) -> bool:
    """True for zarr metadata (``zarr.json``, ``.zarray``, ``.zattrs``, ``.zgroup``, ``.zmetadata``).

    The same rule as ``insitu.testing.is_chunk_key`` (its negation), kept here
    so that core does not import the test kit.
    """
    name = key.rsplit("/", 1)[-1]
    return name == "zarr.json" or name.startswith(".z")


def unit_draw(seed: int, stream: str, key: str, attempt: int = -1) -> float:
    """A number in ``[0, 1)`` that depends only on its arguments: one decision's dice roll.

    ``stream`` names the decision ("transient", "stall", "latency"...), so
    that two decisions about the same GET are independent.
    """
    digest = hashlib.blake2b(f"{seed}\0{stream}\0{attempt}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


# --- the plan ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Latency:
    """Per-GET latency: ``fixed`` (``seconds``), ``uniform`` (``low_s``..``high_s``) or
    ``lognormal`` (``median_s``, ``sigma``, optionally capped at ``max_s``).

    Build one with :meth:`fixed`, :meth:`uniform` or :meth:`lognormal`.
    """

    distribution: str = "fixed"
    seconds: float = 0.0
    low_s: float = 0.0
    high_s: float = 0.0
    median_s: float = 0.0
    sigma: float = 0.0
    max_s: float | None = None

    def __post_init__(self) -> None:
        if self.distribution not in _DISTRIBUTIONS:
            raise ValueError(
                f"Latency.distribution must be one of {_DISTRIBUTIONS}, got {self.distribution!r}"
            )
        for name in ("seconds", "low_s", "high_s", "median_s", "sigma"):
            _check_non_negative(f"Latency.{name}", getattr(self, name))
        if self.max_s is not None:
            _check_non_negative("Latency.max_s", self.max_s)
        if self.low_s > self.high_s:
            raise ValueError(f"Latency.low_s={self.low_s} is above high_s={self.high_s}")
        if self.distribution == "lognormal" and self.median_s <= 0:
            raise ValueError("a lognormal Latency needs median_s > 0")

    @classmethod
    def fixed(cls, seconds: float) -> Latency:
        """Every GET waits ``seconds``."""
        return cls("fixed", seconds=seconds)

    @classmethod
    def uniform(cls, low_s: float, high_s: float) -> Latency:
        """Each GET waits a time drawn uniformly from ``[low_s, high_s]``."""
        return cls("uniform", low_s=low_s, high_s=high_s)

    @classmethod
    def lognormal(cls, median_s: float, sigma: float, max_s: float | None = None) -> Latency:
        """Each GET waits ``median_s * exp(sigma * z)``, ``z`` standard normal: object storage's
        long tail. ``max_s`` caps it."""
        return cls("lognormal", median_s=median_s, sigma=sigma, max_s=max_s)

    def sample(self, u: float) -> float:
        """The latency for the draw ``u`` in ``[0, 1)`` (an inverse-CDF transform)."""
        if self.distribution == "fixed":
            return self.seconds
        if self.distribution == "uniform":
            return self.low_s + u * (self.high_s - self.low_s)
        z = _NORMAL.inv_cdf(min(max(u, 1e-12), 1 - 1e-12))
        value = self.median_s * math.exp(self.sigma * z)
        return value if self.max_s is None else min(value, self.max_s)


@dataclass(frozen=True)
class Rewrite:
    """From the GET of ``key`` numbered ``after_gets`` on (0: from the first), serve the bytes
    stored at ``source_key``: validly encoded, other values, as if the source had been
    rewritten in place (another chunk of the same array is a natural ``source_key``)."""

    key: str
    source_key: str
    after_gets: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.after_gets, int) or self.after_gets < 0:
            raise ValueError(f"Rewrite.after_gets must be an int >= 0, got {self.after_gets!r}")


@dataclass(frozen=True)
class AttemptFaults:
    """What one GET attempt suffers: a delay, a stall, and at most one transient error type."""

    delay_s: float = 0.0
    stall: bool = False
    error: type[Exception] | None = None


NO_FAULTS = AttemptFaults()

#: The plan's fields that name keys, and the fault each gives its keys.
_NAMED_KEY_FAULTS = {
    "forbidden_keys": "forbidden",
    "missing_keys": "missing",
    "truncate_keys": "truncated",
    "corrupt_keys": "corrupted",
    "oversize_keys": "oversized",
}
_DAMAGE_KINDS = ("truncated", "corrupted", "oversized")


@dataclass(frozen=True)
class FaultPlan:
    """A seeded, replayable schedule of store faults (frozen; round-trips through JSON).

    Per GET attempt of a chunk key (decided from ``(seed, key, attempt)``):

    - ``latency``: a :class:`Latency` slept before the answer (``asyncio.sleep``);
    - ``transient_rate``: raise ``ConnectionError`` or ``TimeoutError`` (half each), the
      types ``insitu.RetryPolicy`` retries;
    - ``stall_rate``: sleep ``stall_s`` before answering, for per-request timeouts to cut.

    Per key (the stored object itself is damaged, on every GET of it):

    - ``truncate_rate`` / ``truncate_keys``: only the first ``truncate_keep`` of the bytes;
    - ``corrupt_rate`` / ``corrupt_keys``: ``corrupt_bytes`` bytes flipped from
      ``corrupt_offset`` (0, the default, hits a compressed chunk's frame header, which
      its decoder detects; ``None`` picks a seeded offset per key, which only a codec
      checksum detects; an uncompressed chunk's damage goes unnoticed either way);
    - ``oversize_rate`` / ``oversize_keys``: ``oversize_bytes`` seeded bytes appended.

    Permanent answers for named keys: ``forbidden_keys`` raise ``PermissionError``
    (a 403), ``missing_keys`` read as absent (a 404: ``None``, also to ``exists``
    and listings). ``rewrites`` serve other valid bytes for a key (:class:`Rewrite`).

    Rates apply to chunk and shard keys only, unless ``fault_metadata``; named
    keys are faulted whatever they are.
    """

    seed: int = 0
    latency: Latency | None = None
    transient_rate: float = 0.0
    stall_rate: float = 0.0
    stall_s: float = 30.0
    truncate_rate: float = 0.0
    corrupt_rate: float = 0.0
    oversize_rate: float = 0.0
    truncate_keys: tuple[str, ...] = ()
    corrupt_keys: tuple[str, ...] = ()
    oversize_keys: tuple[str, ...] = ()
    forbidden_keys: tuple[str, ...] = ()
    missing_keys: tuple[str, ...] = ()
    rewrites: tuple[Rewrite, ...] = ()
    fault_metadata: bool = False
    truncate_keep: float = 0.5
    corrupt_bytes: int = 8
    corrupt_offset: int | None = 0
    oversize_bytes: int = 64
    _named: Mapping[str, str] = field(init=False, repr=False, compare=False)  # key -> its named fault

    def __post_init__(self) -> None:
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"FaultPlan.seed must be an int, got {self.seed!r}")
        if self.latency is not None and not isinstance(self.latency, Latency):
            raise ValueError(
                f"FaultPlan.latency must be an insitu.testing.faults.Latency, got {self.latency!r}"
            )
        for name in ("transient_rate", "stall_rate", "truncate_rate", "corrupt_rate", "oversize_rate"):
            _check_rate(name, getattr(self, name))
        damage = self.truncate_rate + self.corrupt_rate + self.oversize_rate
        if damage > 1:
            raise ValueError(f"truncate_rate + corrupt_rate + oversize_rate must be <= 1, got {damage}")
        _check_non_negative("stall_s", self.stall_s)
        if not 0 <= self.truncate_keep < 1:
            raise ValueError(f"truncate_keep must be in [0, 1), got {self.truncate_keep!r}")
        for name in ("corrupt_bytes", "oversize_bytes"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name} must be an int >= 1, got {getattr(self, name)!r}")
        if self.corrupt_offset is not None and (
            not isinstance(self.corrupt_offset, int) or self.corrupt_offset < 0
        ):
            raise ValueError(f"corrupt_offset must be an int >= 0 or None, got {self.corrupt_offset!r}")
        named: dict[str, str] = {}  # key -> the field naming it
        for name in _NAMED_KEY_FAULTS:
            keys = _as_key_tuple(name, getattr(self, name))
            object.__setattr__(self, name, keys)
            for key in keys:
                if named.setdefault(key, name) != name:
                    raise ValueError(f"key {key!r} is in both {named[key]} and {name}; name each key once")
        object.__setattr__(self, "_named", {key: _NAMED_KEY_FAULTS[name] for key, name in named.items()})
        rewrites = tuple(self.rewrites)
        if not all(isinstance(r, Rewrite) for r in rewrites):
            raise ValueError("FaultPlan.rewrites must hold insitu.testing.faults.Rewrite entries")
        if len({r.key for r in rewrites}) != len(rewrites):
            raise ValueError("FaultPlan.rewrites names a key more than once")
        object.__setattr__(self, "rewrites", rewrites)

    # -- decisions ---------------------------------------------------------------------------
    def applies_to(self, key: str) -> bool:
        """True when the rates apply to ``key`` (chunk keys; metadata too with ``fault_metadata``)."""
        return self.fault_metadata or not is_metadata_key(key)

    def attempt_faults(self, key: str, attempt: int) -> AttemptFaults:
        """The delay, stall and transient error of GET number ``attempt`` (from 0) of ``key``."""
        if not self.applies_to(key):
            return NO_FAULTS
        delay = 0.0
        if self.latency is not None:
            delay = self.latency.sample(unit_draw(self.seed, "latency", key, attempt))
        stall = self.stall_rate > 0 and unit_draw(self.seed, "stall", key, attempt) < self.stall_rate
        error: type[Exception] | None = None
        if self.transient_rate > 0:
            u = unit_draw(self.seed, "transient", key, attempt)
            if u < self.transient_rate:
                error = ConnectionError if u < self.transient_rate / 2 else TimeoutError
        if not delay and not stall and error is None:
            return NO_FAULTS
        return AttemptFaults(delay, stall, error)

    def permanent_fault(self, key: str) -> str | None:
        """``"forbidden"`` or ``"missing"`` when ``key`` is named for one, else None."""
        kind = self._named.get(key)
        return kind if kind in ("forbidden", "missing") else None

    def damage(self, key: str) -> str | None:
        """How the stored object at ``key`` is damaged: ``"truncated"``, ``"corrupted"``,
        ``"oversized"`` or None. Named keys first, then the rates (one draw per key)."""
        kind = self._named.get(key)
        if kind is not None:
            return kind if kind in _DAMAGE_KINDS else None
        if not self.truncate_rate and not self.corrupt_rate and not self.oversize_rate:
            return None
        if not self.applies_to(key):
            return None
        u = unit_draw(self.seed, "damage", key)
        for kind, rate in (
            ("truncated", self.truncate_rate),
            ("corrupted", self.corrupt_rate),
            ("oversized", self.oversize_rate),
        ):
            if u < rate:
                return kind
            u -= rate
        return None

    def rewrite_source(self, key: str, attempt: int) -> str | None:
        """The key whose bytes GET number ``attempt`` of ``key`` serves, when a rewrite is due."""
        for r in self.rewrites:
            if r.key == key and attempt >= r.after_gets:
                return r.source_key
        return None

    def damaged_bytes(self, key: str, data: bytes, kind: str) -> bytes:
        """``data`` (the whole object at ``key``) as damaged by ``kind`` (same result every time)."""
        if kind == "truncated":
            return data[: min(int(len(data) * self.truncate_keep), max(len(data) - 1, 0))]
        if kind == "oversized":
            return data + random.Random(f"{self.seed}\0oversize\0{key}").randbytes(self.oversize_bytes)
        if kind != "corrupted":
            raise ValueError(f"unknown damage {kind!r}")
        if not data:
            return data
        n = min(self.corrupt_bytes, len(data))
        start = self.corrupt_offset
        if start is None:
            start = int(unit_draw(self.seed, "corrupt-at", key) * len(data))
        start = min(start, len(data) - n)
        flipped = bytearray(data)
        for i in range(start, start + n):
            flipped[i] ^= 0xFF
        return bytes(flipped)

    # -- JSON --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The plan as plain JSON types (lists for tuples, dicts for nested entries)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if not f.init:
                continue
            value = getattr(self, f.name)
            if isinstance(value, Latency):
                value = dataclasses.asdict(value)
            elif f.name == "rewrites":
                value = [dataclasses.asdict(r) for r in value]
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FaultPlan:
        """The plan :meth:`to_dict` wrote; an unknown field is a ``ValueError`` naming it."""
        known = {f.name for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown FaultPlan field(s) {unknown}; known: {sorted(known)}")
        kwargs = dict(data)
        if kwargs.get("latency") is not None:
            kwargs["latency"] = Latency(**kwargs["latency"])
        if "rewrites" in kwargs:
            kwargs["rewrites"] = tuple(Rewrite(**r) for r in kwargs["rewrites"])
        return cls(**kwargs)

    def to_json(self) -> str:
        """The plan as JSON text (:meth:`from_json` reads it back equal)."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> FaultPlan:
        """The plan in JSON ``text``."""
        return cls.from_dict(json.loads(text))


def _check_rate(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")


def _check_non_negative(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")


def _as_key_tuple(name: str, keys: Iterable[str]) -> tuple[str, ...]:
    if isinstance(keys, str):  # tuple("x/c/0") would fault the keys "x", "/", "c"...
        raise ValueError(f"{name} must be a sequence of keys, got the string {keys!r}")
    out = tuple(keys)
    if not all(isinstance(k, str) for k in out):
        raise ValueError(f"{name} must hold string keys, got {out!r}")
    return out


# --- the store -------------------------------------------------------------------------------


class _SharedState:
    """Counters, GET attempts and rewrites: shared by a wrapper and its ``with_read_only`` twins."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.injected: Counter[str] = Counter()
        self.attempts: Counter[str] = Counter()
        self.rewrites: dict[str, bytes] = {}


class FaultInjectingStore(WrapperStore[Store]):
    """Wraps ``store`` and injects the faults of ``plan`` into its reads.

    ``counts`` tells what was injected, by kind (:data:`FAULT_KINDS`), so a
    drill can check the engine's statistics against it; ``attempts(key)``
    how many GETs of a key it saw. Counters are thread-safe and shared with
    the copies zarr makes (``with_read_only``). Writes, deletes and listing
    pass through (listings leave out ``missing_keys``).
    """

    def __init__(self, store: Store, plan: FaultPlan | None = None) -> None:
        super().__init__(store)
        if plan is not None and not isinstance(plan, FaultPlan):
            raise TypeError(f"plan must be an insitu.testing.faults.FaultPlan, got {type(plan).__name__}")
        self.plan = plan or FaultPlan()
        self._state = _SharedState()

    def _with_store(self, store: Store) -> FaultInjectingStore:
        twin = type(self)(store, self.plan)
        twin._state = self._state  # one drill, one set of counters, whichever copy zarr reads through
        return twin

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, FaultInjectingStore) and self.plan == other.plan and self._store == other._store
        )

    def __str__(self) -> str:
        return f"faults+{self._store}"

    def __repr__(self) -> str:
        return f"FaultInjectingStore({self._store!r}, seed={self.plan.seed})"

    # -- what a drill reads back ------------------------------------------------------------
    @property
    def counts(self) -> dict[str, int]:
        """Faults injected so far by kind (every kind of :data:`FAULT_KINDS`), plus ``gets``."""
        with self._state.lock:
            out = {kind: self._state.injected[kind] for kind in FAULT_KINDS}
            out["gets"] = sum(self._state.attempts.values())
        return out

    def attempts(self, key: str) -> int:
        """GETs of ``key`` made through this wrapper (and its copies) so far."""
        with self._state.lock:
            return self._state.attempts[key]

    def rewrite(self, key: str, data: bytes | bytearray | memoryview) -> None:
        """From now on, serve ``data`` for ``key``: the object rewritten in place at the source.

        ``data`` should be validly encoded (for instance the chunk's bytes in a
        twin array written with other values), so only a check of the stored
        bytes' identity can tell the difference.
        """
        with self._state.lock:
            self._state.rewrites[key] = bytes(data)

    # -- reads -----------------------------------------------------------------------------
    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """A GET with the plan's faults for this key and attempt injected: a delay, a stall, a transient
        error, a permanent 403 or missing key, rewritten or damaged bytes; otherwise the wrapped read."""
        plan = self.plan
        state = self._state
        with state.lock:
            attempt = state.attempts[key]
            state.attempts[key] += 1
        faults = plan.attempt_faults(key, attempt)
        if faults.delay_s > 0:
            self._count("delayed")
            await asyncio.sleep(faults.delay_s)
        permanent = plan.permanent_fault(key)
        if permanent == "forbidden":
            self._count("forbidden")
            raise PermissionError(f"403 Forbidden (injected): GET {key!r}")
        if permanent == "missing":
            self._count("missing")
            return None
        if faults.stall:
            self._count("stalled")  # counted first: a request timeout usually cancels the sleep
            await asyncio.sleep(plan.stall_s)
        if faults.error is not None:
            self._count("transient")
            kind = "connection reset" if faults.error is ConnectionError else "timed out"
            raise faults.error(f"{kind} (injected): GET {key!r}, attempt {attempt}")
        data = await self._replacement(key, attempt)
        damage = plan.damage(key)
        if data is None and damage is None:
            return await self._store.get(key, prototype, byte_range)
        if data is not None:
            self._count("rewritten")
        else:
            # Damage is done to the whole stored object, then the range is cut from it, so a
            # shard's index (read as a suffix) and its chunks see one consistent damaged object.
            data = await self._whole(key)
            if data is None:
                return None
        if damage is not None:
            data = plan.damaged_bytes(key, data, damage)
            self._count(damage)
        return prototype.buffer.from_bytes(_byte_range(data, byte_range))

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        """Several reads, each through :meth:`get` (so each gets its faults)."""
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def _get_many(
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> AsyncGenerator[tuple[str, Buffer | None], None]:
        # WrapperStore hands these to the wrapped store, which would skip the faults.
        for key, prototype, byte_range in requests:
            yield key, await self.get(key, prototype, byte_range)

    async def exists(self, key: str) -> bool:
        """Whether ``key`` exists; a key the plan makes missing does not."""
        if self.plan.permanent_fault(key) == "missing":
            return False
        return await self._store.exists(key)

    def list(self) -> AsyncIterator[str]:
        """Every key of the wrapped store except the plan's missing keys."""
        return self._without_missing(self._store.list(), "")

    def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        """The wrapped store's keys under ``prefix``, except the plan's missing keys."""
        return self._without_missing(self._store.list_prefix(prefix), "")

    def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """The wrapped store's entries directly under ``prefix``, except the plan's missing keys."""
        base = f"{prefix.rstrip('/')}/" if prefix.strip("/") else ""
        return self._without_missing(self._store.list_dir(prefix), base)

    async def insitu_object_version(self, key: str) -> str | None:
        """The version of what a GET of ``key`` serves now (``insitu.store.capabilities.VersionedObjects``).

        A rewritten key reports a digest of its new bytes, so a cache that
        checks versions sees the rewrite. Other keys report the wrapped
        store's version (its own, a local file's size and mtime, or else a
        digest of the object's bytes, at the cost of one read). Damaged keys
        keep their version: the damage is silent, as bit rot is.
        """
        permanent = self.plan.permanent_fault(key)
        if permanent == "missing":
            return None
        if permanent == "forbidden":
            raise PermissionError(f"403 Forbidden (injected): HEAD {key!r}")
        replaced = await self._replacement(key, self.attempts(key))
        if replaced is not None:
            return "rewritten-" + hashlib.sha256(replaced).hexdigest()[:32]
        inner = self._store
        versions = getattr(inner, "insitu_object_version", None)
        if versions is not None:
            return await versions(key)
        if isinstance(inner, LocalStore):
            try:
                st = await asyncio.to_thread(os.stat, os.path.join(str(inner.root), key))
            except FileNotFoundError:
                return None
            return f"{st.st_size}-{st.st_mtime_ns}"
        data = await self._whole(key)
        return None if data is None else "sha256-" + hashlib.sha256(data).hexdigest()[:32]

    # -- helpers -----------------------------------------------------------------------------
    def _count(self, kind: str) -> None:
        with self._state.lock:
            self._state.injected[kind] += 1

    async def _whole(self, key: str) -> bytes | None:
        buf = await self._store.get(key, default_buffer_prototype())
        return None if buf is None else buf.to_bytes()

    async def _replacement(self, key: str, attempt: int) -> bytes | None:
        """The rewritten bytes GET number ``attempt`` of ``key`` serves, or None."""
        with self._state.lock:
            data = self._state.rewrites.get(key)
        if data is not None:
            return data
        source = self.plan.rewrite_source(key, attempt)
        return None if source is None else await self._whole(source)

    async def _without_missing(self, listing: AsyncIterator[str], base: str) -> AsyncIterator[str]:
        hidden = set(self.plan.missing_keys)
        async for name in listing:
            if base + name not in hidden:
                yield name


def _byte_range(data: bytes, request: ByteRequest | None) -> bytes:
    """The part of ``data`` a zarr byte-range request asks for."""
    if request is None:
        return data
    if isinstance(request, RangeByteRequest):
        return data[request.start : request.end]
    if isinstance(request, OffsetByteRequest):
        return data[request.offset :]
    if isinstance(request, SuffixByteRequest):
        return data[-request.suffix :] if request.suffix else b""
    raise TypeError(f"unknown byte range request {request!r}")


# --- opening by name -----------------------------------------------------------------------


def faults_store(
    url: str,
    *,
    read_only: bool = True,
    plan: FaultPlan | Mapping[str, Any] | str | None = None,
    inner_backend: str | None = None,
    **options: Any,
) -> FaultInjectingStore:
    """Store builder ``faults``: ``faults+<scheme>://...`` URLs, or any URL with ``backend="faults"``.

    The URL without its ``faults+`` prefix is opened with ``insitu.open_store``
    (by ``inner_backend`` when given, with the remaining ``options``) and
    wrapped in a :class:`FaultInjectingStore`. ``plan`` is a
    :class:`FaultPlan`, its ``to_dict()`` form or its JSON text; none
    injects nothing.
    """
    scheme, _ = split_url(url)
    inner_url = url[len("faults+") :] if scheme.startswith("faults+") else url
    inner = open_store(inner_url, backend=inner_backend, mode="r" if read_only else "a", **options)
    return FaultInjectingStore(inner, _as_plan(plan))


def _as_plan(plan: FaultPlan | Mapping[str, Any] | str | None) -> FaultPlan:
    if plan is None or isinstance(plan, FaultPlan):
        return plan or FaultPlan()
    if isinstance(plan, str):
        return FaultPlan.from_json(plan)
    if isinstance(plan, Mapping):
        return FaultPlan.from_dict(plan)
    raise TypeError(f"plan must be a FaultPlan, a dict or JSON text, got {type(plan).__name__}")


__all__ = [
    "FAULT_KINDS",
    "FAULT_SCHEMES",
    "AttemptFaults",
    "FaultInjectingStore",
    "FaultPlan",
    "Latency",
    "Rewrite",
    "faults_store",
    "is_metadata_key",
    "unit_draw",
]
