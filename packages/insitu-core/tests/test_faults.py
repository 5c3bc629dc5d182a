"""The fault-injecting store: each fault at its rate, replayable from the seed, and the engine
delivering exactly the right samples through it (or naming what it could not read)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest
import zarr
from conftest import field, write_array
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.buffer import default_buffer_prototype
from zarr.storage import LocalStore, MemoryStore

import insitu
from insitu.errors import StoreUnavailableError
from insitu.store.retry import RetryPolicy
from insitu.testing import StoreConformance
from insitu.testing.faults import FaultInjectingStore, FaultPlan, Latency, Rewrite, faults_store

T = TypeVar("T")
N_KEYS = 2000
KEYS = [f"x/c/{i}" for i in range(N_KEYS)]
METADATA = ["zarr.json", "x/zarr.json", "v2/.zarray", "v2/.zattrs", "v2/.zgroup"]
PROTOTYPE = default_buffer_prototype()


def _run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


def _payload(key: str) -> bytes:
    return (key.encode() * 8)[:64]


def _memory(keys: Iterable[str] = KEYS) -> MemoryStore:
    return MemoryStore({k: PROTOTYPE.buffer.from_bytes(_payload(k)) for k in [*keys, *METADATA]})


async def _get_all(store: Store, keys: Iterable[str], timeout_s: float | None = None) -> dict[str, Any]:
    """Every key's bytes, or the exception its GET raised (all GETs at once)."""

    async def one(key: str) -> Any:
        try:
            async with asyncio.timeout(timeout_s):
                buf = await store.get(key, PROTOTYPE)
        except Exception as exc:
            return exc
        return None if buf is None else buf.to_bytes()

    keys = list(keys)
    return dict(zip(keys, await asyncio.gather(*map(one, keys)), strict=True))


def _within(count: int, rate: float, n: int = N_KEYS) -> bool:
    """``count`` is within five binomial standard deviations of ``rate * n`` (and not zero)."""
    mean, sd = rate * n, (n * rate * (1 - rate)) ** 0.5
    return count > 0 and abs(count - mean) <= 5 * sd


# --- the plan -----------------------------------------------------------------------------------


def _full_plan() -> FaultPlan:
    return FaultPlan(
        seed=42,
        latency=Latency.lognormal(0.002, 0.5, max_s=0.05),
        transient_rate=0.05,
        stall_rate=0.01,
        stall_s=2.0,
        truncate_rate=0.01,
        corrupt_rate=0.02,
        oversize_rate=0.03,
        # A list is accepted and kept as a tuple (JSON has no tuples).
        truncate_keys=["a/c/0"],  # type: ignore[arg-type]
        corrupt_keys=("a/c/1",),
        oversize_keys=("a/c/2",),
        forbidden_keys=("a/c/3",),
        missing_keys=("a/c/4",),
        rewrites=(Rewrite("a/c/5", "a/c/6", after_gets=2),),
        fault_metadata=True,
        truncate_keep=0.25,
        corrupt_bytes=3,
        corrupt_offset=None,
        oversize_bytes=10,
    )


def test_plan_round_trips_through_json() -> None:
    plan = _full_plan()
    assert plan.truncate_keys == ("a/c/0",)
    assert FaultPlan.from_json(plan.to_json()) == plan
    assert FaultPlan.from_dict(plan.to_dict()) == plan
    assert FaultPlan.from_json(FaultPlan().to_json()) == FaultPlan()
    assert hash(FaultPlan.from_json(plan.to_json())) == hash(plan)
    with pytest.raises(ValueError, match=r"unknown FaultPlan field\(s\) \['transient'\]"):
        FaultPlan.from_dict({"transient": 0.1})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"transient_rate": 1.5}, "transient_rate"),
        ({"seed": 1.5}, "seed"),
        ({"missing_keys": "x/c/0"}, "missing_keys must be a sequence"),
        ({"missing_keys": ("k",), "forbidden_keys": ("k",)}, "'k' is in both"),
        ({"corrupt_rate": 0.6, "oversize_rate": 0.6}, "must be <= 1"),
        ({"truncate_keep": 1.0}, "truncate_keep"),
        ({"latency": lambda: Latency.uniform(0.002, 0.001)}, "low_s"),
        ({"latency": lambda: Latency("gamma")}, "distribution"),
    ],
)
def test_plan_refuses_bad_values_naming_them(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):  # a lambda builds a value that raises by itself
        FaultPlan(**{k: v() if callable(v) else v for k, v in kwargs.items()})


def test_latency_distributions_follow_their_parameters() -> None:
    draws = [i / 1000 for i in range(1000)]
    assert {Latency.fixed(0.003).sample(u) for u in draws} == {0.003}
    uniform = [Latency.uniform(0.001, 0.004).sample(u) for u in draws]
    assert min(uniform) == 0.001
    assert max(uniform) < 0.004
    lognormal = sorted(Latency.lognormal(0.002, 0.5).sample(u) for u in draws)
    assert lognormal[500] == pytest.approx(0.002, rel=0.01)  # the median is the median
    assert lognormal[-1] > 4 * 0.002, "a lognormal has a long tail"
    assert max(Latency.lognormal(0.002, 2.0, max_s=0.01).sample(u) for u in draws) == 0.01


# --- faults at their rates, replayable ----------------------------------------------------------


@pytest.mark.timeout(60)
def test_transient_errors_happen_at_the_rate_and_replay_exactly() -> None:
    plan = FaultPlan(seed=7, transient_rate=0.1)
    store = FaultInjectingStore(_memory(), plan)
    got = _run(_get_all(store, KEYS))
    failed = {k: type(v) for k, v in got.items() if isinstance(v, Exception)}
    assert _within(len(failed), 0.1)
    assert set(failed.values()) == {ConnectionError, TimeoutError}
    assert store.counts["transient"] == len(failed)
    assert all(got[k] == _payload(k) for k in KEYS if k not in failed)
    again = _run(_get_all(FaultInjectingStore(_memory(), plan), reversed(KEYS)))
    assert {k: type(v) for k, v in again.items() if isinstance(v, Exception)} == failed
    other = _run(_get_all(FaultInjectingStore(_memory(), dataclasses.replace(plan, seed=8)), KEYS))
    assert {k for k, v in other.items() if isinstance(v, Exception)} != set(failed)
    # The second attempt of a key draws again: a retry usually succeeds.
    retried = _run(_get_all(store, failed))
    assert sum(isinstance(v, Exception) for v in retried.values()) < len(failed) // 4
    assert store.attempts(KEYS[0]) == 1
    assert store.attempts(next(iter(failed))) == 2


@pytest.mark.timeout(60)
def test_stalls_happen_at_the_rate_and_a_request_timeout_cuts_them() -> None:
    plan = FaultPlan(seed=3, stall_rate=0.02, stall_s=60.0)
    store = FaultInjectingStore(_memory(), plan)
    got = _run(_get_all(store, KEYS, timeout_s=1.0))
    stalled = {k for k, v in got.items() if isinstance(v, TimeoutError)}
    assert _within(len(stalled), 0.02)
    assert store.counts["stalled"] == len(stalled)
    assert stalled == {k for k in KEYS if plan.attempt_faults(k, 0).stall}


def test_latency_is_awaited_with_the_planned_delays(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []

    async def record(delay: float) -> None:
        slept.append(delay)

    monkeypatch.setattr(asyncio, "sleep", record)  # the wrapper must never block the loop
    plan = FaultPlan(seed=1, latency=Latency.uniform(0.001, 0.003))
    store = FaultInjectingStore(_memory(), plan)
    keys = KEYS[:200]
    _run(_get_all(store, keys))
    assert sorted(slept) == sorted(plan.attempt_faults(k, 0).delay_s for k in keys)
    assert all(0.001 <= s <= 0.003 for s in slept)
    assert len(set(slept)) > 150
    assert store.counts["delayed"] == 200


def test_damage_happens_at_the_rate_per_key_and_is_stable() -> None:
    plan = FaultPlan(seed=11, truncate_rate=0.03, corrupt_rate=0.03, oversize_rate=0.03, corrupt_bytes=4)
    store = FaultInjectingStore(_memory(), plan)
    first = _run(_get_all(store, KEYS))
    assert _run(_get_all(store, KEYS)) == first, "a damaged object stays damaged the same way"
    kinds = {k: plan.damage(k) for k in KEYS}
    for kind in ("truncated", "corrupted", "oversized"):
        keys = [k for k, d in kinds.items() if d == kind]
        assert _within(len(keys), 0.03), kind
        assert store.counts[kind] == 2 * len(keys)
    for key, data in first.items():
        good = _payload(key)
        if kinds[key] is None:
            assert data == good
        elif kinds[key] == "truncated":
            assert data == good[: len(good) // 2]
        elif kinds[key] == "oversized":
            assert data[: len(good)] == good
            assert len(data) == len(good) + plan.oversize_bytes
        else:
            assert len(data) == len(good)
            assert data[:4] == bytes(b ^ 0xFF for b in good[:4])
            assert data[4:] == good[4:]
    again = FaultInjectingStore(_memory(), plan)
    assert _run(_get_all(again, reversed(KEYS))) == first


def test_byte_ranges_read_the_damaged_object() -> None:
    key = "x/c/0"
    store = FaultInjectingStore(_memory(), FaultPlan(oversize_keys=(key,), oversize_bytes=16))
    whole = _run(store.get(key, PROTOTYPE))
    assert whole is not None
    data = whole.to_bytes()
    requests: list[tuple[ByteRequest, bytes]] = [
        (SuffixByteRequest(16), data[-16:]),  # a shard index read at the end sees the appended bytes
        (RangeByteRequest(2, 10), data[2:10]),
        (OffsetByteRequest(60), data[60:]),
    ]
    for request, want in requests:
        part = _run(store.get(key, PROTOTYPE, request))
        assert part is not None
        assert part.to_bytes() == want
    parts = _run(store.get_partial_values(PROTOTYPE, [(key, SuffixByteRequest(16)), ("x/c/1", None)]))
    assert [p.to_bytes() if p is not None else None for p in parts] == [data[-16:], _payload("x/c/1")]


def test_metadata_passes_through_unless_the_plan_says_otherwise() -> None:
    every = FaultPlan(seed=2, transient_rate=1.0, truncate_rate=1.0)
    store = FaultInjectingStore(_memory(), every)
    got = _run(_get_all(store, [*METADATA, *KEYS[:20]]))
    assert all(got[k] == _payload(k) for k in METADATA)
    assert all(isinstance(got[k], (ConnectionError, TimeoutError)) for k in KEYS[:20])
    assert store.counts["transient"] == 20
    also_metadata = FaultInjectingStore(_memory(), dataclasses.replace(every, fault_metadata=True))
    assert all(isinstance(v, Exception) for v in _run(_get_all(also_metadata, METADATA)).values())
    named = FaultInjectingStore(_memory(), FaultPlan(missing_keys=("x/zarr.json",)))
    assert _run(_get_all(named, METADATA)) == {
        k: None if k == "x/zarr.json" else _payload(k) for k in METADATA
    }


def test_forbidden_and_missing_keys_are_permanent() -> None:
    store = FaultInjectingStore(_memory(), FaultPlan(forbidden_keys=("x/c/1",), missing_keys=("x/c/2",)))
    for _ in range(3):
        got = _run(_get_all(store, ["x/c/1", "x/c/2", "x/c/3"]))
        assert isinstance(got["x/c/1"], PermissionError)
        assert "403" in str(got["x/c/1"])
        assert got["x/c/2"] is None
        assert got["x/c/3"] == _payload("x/c/3")
    assert store.counts["forbidden"] == 3
    assert store.counts["missing"] == 3
    assert not _run(store.exists("x/c/2"))
    assert _run(store.exists("x/c/3"))

    async def listing() -> tuple[set[str], set[str]]:
        return {k async for k in store.list_prefix("x/c/")}, {k async for k in store.list_dir("x/c")}

    everything, names = _run(listing())
    assert "x/c/2" not in everything
    assert "2" not in names
    assert {"x/c/1", "x/c/3"} <= everything


def test_rewrites_serve_other_bytes_and_change_the_version() -> None:
    plan = FaultPlan(rewrites=(Rewrite("x/c/1", "x/c/9", after_gets=1),))
    store = FaultInjectingStore(_memory(), plan)
    before = _run(store.insitu_object_version("x/c/1"))
    assert _run(_get_all(store, ["x/c/1"])) == {"x/c/1": _payload("x/c/1")}
    after = _run(store.insitu_object_version("x/c/1"))
    assert after != before, "the rewrite is due from the next GET: the version says so"
    assert _run(_get_all(store, ["x/c/1"])) == {"x/c/1": _payload("x/c/9")}
    assert _run(store.insitu_object_version("x/c/1")) == after
    store.rewrite("x/c/3", b"new bytes")
    version = _run(store.insitu_object_version("x/c/3"))
    assert _run(_get_all(store, ["x/c/3"])) == {"x/c/3": b"new bytes"}
    store.rewrite("x/c/3", b"newer bytes")
    assert _run(store.insitu_object_version("x/c/3")) != version
    assert store.counts["rewritten"] == 2
    assert _run(store.insitu_object_version("x/c/4")) == _run(store.insitu_object_version("x/c/4"))
    assert _run(store.insitu_object_version("nope")) is None


def test_copies_made_by_zarr_share_the_counters() -> None:
    store = FaultInjectingStore(_memory(), FaultPlan(missing_keys=("x/c/0",)))
    twin = store.with_read_only(True)
    assert isinstance(twin, FaultInjectingStore)
    assert twin.read_only
    assert twin.plan == store.plan
    _run(_get_all(twin, ["x/c/0", "x/c/1"]))
    assert store.counts["missing"] == 1
    assert store.attempts("x/c/1") == 1


# --- opening by name ------------------------------------------------------------------------------


def test_opens_by_url_scheme_or_backend_name(tmp_path: Path) -> None:
    data = field(8, (2, 3))
    write_array(tmp_path, "x", data, (4, 2, 3))
    plan = FaultPlan(seed=5, missing_keys=("x/c/1/0/0",))
    by_scheme = insitu.open_store(f"faults+{tmp_path.as_uri()}", plan=plan)
    by_backend = insitu.open_store(str(tmp_path), backend="faults", plan=plan.to_dict())
    by_json = insitu.open_store(f"faults+file://{tmp_path}", plan=plan.to_json())
    for store in (by_scheme, by_backend, by_json):
        assert isinstance(store, FaultInjectingStore)
        assert isinstance(store._store, LocalStore)
        assert store.read_only
        assert store.plan == plan
        values = np.asarray(zarr.open_array(store=store, path="x", mode="r")[...])
        np.testing.assert_array_equal(values[:4], data[:4])
        assert not values[4:].any(), "the missing chunk reads as the fill value"
    name = f"faults-{tmp_path.name}"
    write_array(insitu.open_store(f"memory://{name}", mode="w"), "x", data, (4, 2, 3))
    in_memory = insitu.open_store(f"faults+memory://{name}")
    assert isinstance(in_memory, FaultInjectingStore)
    assert in_memory.plan == FaultPlan()
    with pytest.raises(FileNotFoundError):
        faults_store(f"faults+file://{tmp_path / 'nope'}")


class TestPassThroughFaultStore(StoreConformance):
    """With nothing to inject, the wrapper is a conforming store (its object versions included)."""

    def writable_target(self) -> Store:
        return LocalStore(self.tmp_path / "ref.zarr")

    def open_read_store(self, target: Store) -> Store:
        return insitu.open_store(f"faults+{(self.tmp_path / 'ref.zarr').as_uri()}", plan=FaultPlan(seed=1))


# --- the engine through the faults ----------------------------------------------------------------

N, CHUNK, SHAPE = 96, 4, (3, 4)
SLOT_BYTES = CHUNK * 3 * 4 * 4


def _source(tmp_path: Path, compressor: Any = "zstd") -> tuple[np.ndarray, list[str]]:
    data = field(N, SHAPE, seed=9)
    write_array(tmp_path, "x", data, (CHUNK, *SHAPE), compressor=compressor)
    return data, [f"x/c/{i}/0/0" for i in range(N // CHUNK)]


def _dataset(store: Store, **kwargs: Any) -> insitu.InSituDataset:
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
    return insitu.InSituDataset(store, manifest, batch_size=6, block_chunks=2, **kwargs)


def _epoch(ds: insitu.InSituDataset, data: np.ndarray, epoch: int) -> list[int]:
    ds.set_epoch(epoch)
    seen: list[int] = []
    for batch in ds.train:
        np.testing.assert_array_equal(batch["x"], data[batch.sample_indices])
        seen.extend(batch.sample_indices.tolist())
    return seen


@pytest.mark.timeout(120)
def test_every_sample_once_per_epoch_through_transient_errors_and_stalls(tmp_path: Path) -> None:
    data, keys = _source(tmp_path)
    plan = FaultPlan(
        seed=2030,
        latency=Latency.uniform(0.0005, 0.002),
        transient_rate=0.05,
        stall_rate=0.03,
        stall_s=60.0,  # never served: the per-request timeout cuts every stall
    )
    # Every chunk's first GET happens in epoch 0, whatever the timing: these faults are certain.
    first_errors = sum(plan.attempt_faults(k, 0).error is not None for k in keys)
    first_stalls = sum(plan.attempt_faults(k, 0).stall for k in keys)
    assert (first_errors, first_stalls) == (3, 3)
    store = insitu.open_store(f"faults+file://{tmp_path}", plan=plan)
    assert isinstance(store, FaultInjectingStore)
    retry = RetryPolicy(retries=6, backoff_s=0.001, max_backoff_s=0.01, timeout_s=0.5)
    epochs = 6
    # No cache: each epoch reads every chunk again, through the faults.
    with _dataset(store, retry=retry, cache_budget_bytes=0, max_inflight=8) as ds:
        for epoch in range(epochs):
            assert sorted(_epoch(ds, data, epoch)) == list(range(N)), f"epoch {epoch}"
        engine_reads = ds.stats["reads"]
        assert ds.stats["bad_chunks"] == 0
    counts = store.counts
    chunk_gets = sum(store.attempts(k) for k in keys)
    assert engine_reads == epochs * len(keys)
    assert counts["transient"] >= first_errors
    assert counts["stalled"] >= first_stalls
    assert _within(counts["transient"], 0.05, chunk_gets)
    # Each injected error or stall cost one retry (a slow machine may add timeouts of its own).
    assert chunk_gets - engine_reads >= counts["transient"] + counts["stalled"]
    assert counts["delayed"] == chunk_gets


@pytest.mark.timeout(60)
def test_skip_policy_skips_and_counts_corrupt_and_oversized_chunks(tmp_path: Path) -> None:
    data, keys = _source(tmp_path)
    corrupt, oversized = keys[3], keys[17]
    plan = FaultPlan(seed=1, corrupt_keys=(corrupt,), oversize_keys=(oversized,), transient_rate=0.02)
    store = FaultInjectingStore(LocalStore(tmp_path, read_only=True), plan)
    retry = RetryPolicy(retries=6, backoff_s=0.001, max_backoff_s=0.01)
    bad = set(range(3 * CHUNK, 4 * CHUNK)) | set(range(17 * CHUNK, 18 * CHUNK))
    with _dataset(store, on_bad_chunk="skip", retry=retry, cache_budget_bytes=8 * SLOT_BYTES) as ds:
        for epoch in range(3):
            assert sorted(_epoch(ds, data, epoch)) == sorted(set(range(N)) - bad), f"epoch {epoch}"
        stats = ds.stats
    assert store.counts["corrupted"] >= 3
    assert store.counts["oversized"] >= 3
    assert stats["bad_chunks"] == store.counts["corrupted"] + store.counts["oversized"]
    assert stats["skipped_samples"] == 3 * len(bad)


@pytest.mark.timeout(60)
def test_forbidden_chunk_raises_store_unavailable_naming_the_key(tmp_path: Path) -> None:
    _, keys = _source(tmp_path)
    store = FaultInjectingStore(LocalStore(tmp_path, read_only=True), FaultPlan(forbidden_keys=(keys[5],)))
    retry = RetryPolicy(retries=3, backoff_s=0.001)
    with (
        _dataset(store, on_bad_chunk="raise", retry=retry) as ds,
        pytest.raises(StoreUnavailableError, match=rf"{keys[5]}.*403 Forbidden") as info,
    ):
        list(ds.train)
    assert info.value.key == keys[5]
    assert store.attempts(keys[5]) == 1, "a 403 is permanent: never retried"


@pytest.mark.timeout(60)
def test_rewritten_chunk_serves_other_valid_values(tmp_path: Path) -> None:
    data, keys = _source(tmp_path)
    store = FaultInjectingStore(
        LocalStore(tmp_path, read_only=True), FaultPlan(rewrites=(Rewrite(keys[2], keys[7]),))
    )
    rewritten = data.copy()
    rewritten[2 * CHUNK : 3 * CHUNK] = data[7 * CHUNK : 8 * CHUNK]
    with _dataset(store) as ds:
        assert sorted(_epoch(ds, rewritten, 0)) == list(range(N))
        assert ds.stats["bad_chunks"] == 0
    assert store.counts["rewritten"] == 1
