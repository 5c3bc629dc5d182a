"""The suite's view of insitu's defaults: the ``--defaults`` sweep, the decode-and-keep ceiling and
the table that sets the default's cold pass against streaming and that ceiling."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numcodecs
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "suite"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "suite" / "engines"))

import run_ceiling_decode
from common import Case
from driver import MODES, Mode, parse_args, tuning_label, tunings
from report import tables

CASE = Case(name="c8", root="unused", variables=["t2m"], n_samples=1024, samples_per_chunk=8, shape=[4, 4])


def _mode(*flags: str) -> Mode:
    """The quick mode as ``bench/run.py`` sets it up for these flags."""
    args = parse_args(["--mode", "quick", *flags])
    mode = MODES["quick"]
    return replace(mode, extra={**mode.extra, "insitu_defaults": True}) if args.defaults else mode


def test_defaults_run_insitu_untuned_and_keep_the_peers_sweeps() -> None:
    mode = _mode("--defaults")
    for engine in ("insitu", "insitu_stream"):
        assert tunings(engine, CASE, "latency", mode) == [{}]
    assert tuning_label({}) == "defaults"
    # insitubatch is still measured at its best block size and in-flight limit.
    swept = tunings("insitubatch", CASE, "latency", mode)
    assert len(swept) == len(mode.block_samples) * len(mode.inflight)
    # Without the flag insitu sweeps like its peer.
    assert len(tunings("insitu", CASE, "latency", _mode())) == len(swept)


def test_the_keep_ceiling_decodes_every_frame_into_its_own_place(monkeypatch) -> None:
    rng = np.random.default_rng(0)
    fields = [rng.random(64).astype("float32") for _ in range(10)]
    codec = numcodecs.Zstd()
    frames = [codec.encode(f) for f in fields]
    kept: list[np.ndarray] = []
    fresh = run_ceiling_decode._fresh_arena

    def remember(nbytes: int) -> np.ndarray:
        arena = fresh(nbytes)
        kept.append(arena)
        return arena

    monkeypatch.setattr(run_ceiling_decode, "_fresh_arena", remember)
    threads = 3
    parts = [[frames[i::threads] for i in range(threads)]]
    with ThreadPoolExecutor(threads) as pool:
        elapsed = run_ceiling_decode.decode_pass(pool, parts, [fields[0].nbytes], keep=True)
    assert elapsed > 0
    (arena,) = kept
    assert np.array_equal(arena.view("float32").reshape(10, 64), np.stack(fields))


def _tables(*rows: tuple[str, str, float]) -> str:
    """The report's tables for best rows ``(condition, engine, MB/s)`` of case c8."""
    best = [
        {
            "condition": cond,
            "case": "c8",
            "engine": engine,
            "MBps": mbps,
            "tuning_label": "defaults",
            "samples_per_s": 1.0,
            "ttfb_ms": 1.0,
            "peak_rss_MB": 1.0,
        }
        for cond, engine, mbps in rows
    ]
    return tables({"best": best, "settings": {}})


def test_the_keep_cost_table_sets_the_default_against_streaming_and_the_bound() -> None:
    text = _tables(
        ("local", "insitu", 800.0),
        ("local", "insitu_stream", 1000.0),
        ("local", "ceiling_decode_out", 1500.0),
        ("local", "ceiling_decode_keep", 1200.0),
    )
    assert "| local | c8 | 800 | 1,000 | 0.80× | 0.80× |" in text


class _Bytes:
    def __init__(self, raw: bytes) -> None:
        self.raw = raw

    def as_numpy_array(self) -> np.ndarray:
        return np.frombuffer(self.raw, dtype="u1")


class _DictStore:
    """An async store of encoded chunks; a key it lacks was never written."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.gets: list[str] = []

    async def get(self, key: str, prototype: object) -> _Bytes | None:
        self.gets.append(key)
        raw = self.objects.get(key)
        return None if raw is None else _Bytes(raw)


def test_the_fetch_keep_ceiling_gets_every_chunk_once_and_decodes_it_into_its_own_place() -> None:
    import asyncio

    import run_ceiling_fetch_keep as fk

    rng = np.random.default_rng(1)
    fields = [rng.random(64).astype("float32") for _ in range(12)]
    codec = numcodecs.Zstd()
    keys = [f"t2m/c/{i}" for i in range(12)]
    store = _DictStore({k: codec.encode(f) for k, f in zip(keys, fields, strict=True) if k != "t2m/c/5"})
    arena = run_ceiling_decode._fresh_arena(12 * fields[0].nbytes)
    places = [(k, arena[i * 256 : (i + 1) * 256]) for i, k in enumerate(keys)]
    kept = fk.KeptEpoch(threads=3)
    missing = asyncio.run(fk.fetch_into(store, places, concurrency=4, kept=kept))
    kept.finish()
    assert missing == 1
    assert sorted(store.gets) == sorted(keys)
    out = arena.view("float32").reshape(12, 64)
    for i, f in enumerate(fields):
        if i != 5:
            np.testing.assert_array_equal(out[i], f)
    assert not out[5].any()  # never written: nothing decoded there


def test_the_fetch_keep_ceiling_reports_a_chunk_that_fails_to_decode() -> None:
    import asyncio

    import run_ceiling_fetch_keep as fk

    store = _DictStore({"a/c/0": b"not zstd"})
    arena = run_ceiling_decode._fresh_arena(256)
    kept = fk.KeptEpoch(threads=2)
    asyncio.run(fk.fetch_into(store, [("a/c/0", arena)], concurrency=2, kept=kept))
    with pytest.raises(RuntimeError, match="1 chunks failed to decode"):
        kept.finish()


def test_the_fetch_keep_ceiling_runs_under_remote_conditions_at_the_highest_concurrency() -> None:
    from driver import _REMOTE_SET

    mode = _mode("--defaults")
    assert "ceiling_fetch_keep" in _REMOTE_SET
    (t,) = tunings("ceiling_fetch_keep", CASE, "latency", mode)
    assert t["concurrency"] == max(mode.inflight)
    assert t["threads"] >= 1


def test_the_keep_ceiling_column_is_the_conditions_own_bound() -> None:
    # Local disk: decoding into fresh memory with the bytes in memory. Through a store: fetching
    # through that store as well, measured under the same condition.
    text = _tables(
        ("local", "insitu", 900.0),
        ("local", "ceiling_decode_keep", 1200.0),
        ("latency", "insitu", 600.0),
        ("latency", "ceiling_fetch_keep", 800.0),
        ("latency100", "insitu", 300.0),
    )
    header = next(line for line in text.splitlines() if line.startswith("| case |"))
    column = [c.strip() for c in header.split("|")].index("vs keep ceiling")
    keep = [
        [c.strip() for c in line.split("|")][column]
        for line in text.splitlines()
        if line.startswith("| c8 | insitu |")
    ]
    assert keep == ["0.75×", "0.75×", "–"]  # 900 / 1,200; 600 / 800; no fetch ceiling at 100 ms
