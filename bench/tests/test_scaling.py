"""bench/scaling.py: a tiny measured run through the wait decoder, and the projection's arithmetic."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scaling

SAMPLE = 181 * 360 * 4  # bytes of one 181x360 float32 sample: 260,640


def test_a_tiny_run_measures_each_thread_count_and_projects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--chunks", "200", "--threads", "2", "4", "--wait-ms", "0.5", "--repeats", "1"]
    argv += ["--cores", "8", "64", "--work", str(tmp_path), "--out", str(tmp_path / "out")]
    assert scaling.main(argv) == 0
    record = json.loads((tmp_path / "out" / "scaling.json").read_text())
    assert [r["threads"] for r in record["measured"]] == [2, 4]
    for row in record["measured"]:
        assert row["chunks_per_s"] > 0
        assert row["ideal_chunks_per_s"] == pytest.approx(row["threads"] / (record["sleep_ms"] / 1e3))
        assert row["block_chunks"] == 256
    assert record["serial_limit_chunks_per_s"] == max(r["chunks_per_s"] for r in record["measured"])
    cells = {(c["samples_per_chunk"], c["cores"]) for c in record["projection"]}
    assert cells == {(s, c) for s in (1, 8, 32) for c in (8, 64)}
    # Every chunk went through the wait: scaling.measure raises when the engine read any other way.
    out = capsys.readouterr().out
    assert "serial limit:" in out
    assert "64 cores" in out


def test_the_waiting_decoder_waits_then_decodes_as_the_one_it_wraps() -> None:
    class Copy:
        nbytes = 16

        def decode(self, raw: bytes, out: object = None) -> bytes:
            return raw[::-1]

    before = scaling.wait_decoder.decoded()
    decoder = scaling.wait_decoder.WaitingDecoder(Copy(), 0.01)
    t0 = time.perf_counter()
    assert decoder.decode(b"ab") == b"ba"
    assert time.perf_counter() - t0 >= 0.01
    assert decoder.nbytes == 16  # everything but decode is the wrapped decoder's
    assert scaling.wait_decoder.decoded() == before + 1


def test_the_entry_point_names_the_module(tmp_path: Path) -> None:
    folder = scaling.wait_decoder.entry_point_dir(tmp_path)
    (dist,) = folder.glob("*.dist-info")
    assert (dist / "entry_points.txt").read_text() == "[insitu]\nbench-wait = wait_decoder\n"


def test_the_projection_takes_the_lower_of_the_two_bounds() -> None:
    # 10,000 chunks/s of one sample: 2.6064 GB/s; 8 cores decode 8.8 GB/s: the engine sets it.
    cell = scaling.project(10_000, 1, 8)
    assert cell["chunk_bytes"] == SAMPLE
    assert cell["GB_per_s"] == pytest.approx(2.6064)
    assert cell["chunks_per_s"] == pytest.approx(10_000)
    assert cell["bound"] == "engine"
    # 32 samples per chunk (8,340,480 bytes): the limit allows 83.4 GB/s, 8 cores decode 8.8 GB/s.
    cell = scaling.project(10_000, 32, 8)
    assert cell["GB_per_s"] == pytest.approx(8.8)
    assert cell["chunks_per_s"] == pytest.approx(8.8e9 / 8_340_480)  # 1,055.1
    assert cell["bound"] == "decode"
    # 8 samples per chunk on 64 cores: min(70.4 GB/s, 5,000 x 2,085,120 B = 10.4256 GB/s).
    cell = scaling.project(5_000, 8, 64)
    assert cell["GB_per_s"] == pytest.approx(10.4256)
    assert cell["chunks_per_s"] == pytest.approx(5_000)
    # A slower decoder per core moves the crossing: 0.5 GB/s x 16 cores = 8 GB/s < 10.4256.
    cell = scaling.project(5_000, 8, 16, decode_bytes_per_s_per_core=0.5e9)
    assert cell["GB_per_s"] == pytest.approx(8.0)
    assert cell["bound"] == "decode"


def test_the_plateau_is_where_throughput_stops_following_the_threads() -> None:
    rising = [
        {"threads": 8, "chunks_per_s": 3_900, "ideal_chunks_per_s": 4_000},
        {"threads": 16, "chunks_per_s": 7_600, "ideal_chunks_per_s": 8_000},
        {"threads": 32, "chunks_per_s": 9_000, "ideal_chunks_per_s": 16_000},  # +18%: still gaining
    ]
    assert not scaling.plateau_reached(rising)
    assert not scaling.plateau_reached(rising[:1])  # one count cannot tell
    flat = [*rising, {"threads": 64, "chunks_per_s": 9_500, "ideal_chunks_per_s": 32_000}]  # +5.6%
    assert scaling.plateau_reached(flat)
    assert scaling.serial_limit(flat) == 9_500
    assert scaling.block_chunks(8) == 256
    assert scaling.block_chunks(128) == 512


def test_the_projection_table_names_what_sets_each_cell() -> None:
    cells = [scaling.project(10_000, s, c) for s in (1, 32) for c in (8, 64)]
    table = scaling.format_projection(cells)
    lines = table.splitlines()
    assert "8 cores" in lines[0]
    assert "64 cores" in lines[0]
    assert "10,000/s 2.6 GB/s engine" in lines[1]
    assert "1,055/s 8.8 GB/s decode" in lines[2]
