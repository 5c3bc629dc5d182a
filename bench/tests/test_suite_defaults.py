"""The suite's view of insitu's defaults: the ``--defaults`` sweep, the decode-and-keep ceiling and
the table that sets the default's cold pass against streaming and that ceiling."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numcodecs
import numpy as np

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


def test_the_keep_cost_table_sets_the_default_against_streaming_and_the_bound() -> None:
    best = [
        {"condition": "local", "case": "c8", "engine": "insitu", "MBps": 800.0},
        {"condition": "local", "case": "c8", "engine": "insitu_stream", "MBps": 1000.0},
        {"condition": "local", "case": "c8", "engine": "ceiling_decode_out", "MBps": 1500.0},
        {"condition": "local", "case": "c8", "engine": "ceiling_decode_keep", "MBps": 1200.0},
    ]
    for b in best:
        b.update(tuning_label="defaults", samples_per_s=1.0, ttfb_ms=1.0, peak_rss_MB=1.0)
    text = tables({"best": best, "settings": {}})
    assert "| local | c8 | 800 | 1,000 | 0.80× | 0.80× |" in text
