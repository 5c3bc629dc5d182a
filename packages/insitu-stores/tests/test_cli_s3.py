"""The ``insitu`` console script against a bucket on the loopback S3 server: ``insitu inspect`` and
a short ``insitu bench``, with credentials given as --storage-options (and never printed)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr
from s3_servers import ACCESS_KEY, SECRET_KEY, S3Server

SCRIPT = Path(sys.executable).with_name("insitu")


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=180, cwd=cwd)


@pytest.fixture
def url(s3: S3Server, bucket: str) -> str:
    root = zarr.open_group(s3.zarr_store(bucket, "data.zarr"), mode="w", zarr_format=3)
    t2m = root.create_array(
        "t2m", shape=(48, 6, 8), chunks=(4, 6, 8), dtype="f4", dimension_names=("time", "y", "x")
    )
    t2m[...] = np.random.default_rng(0).normal(size=(48, 6, 8)).astype("f4")
    return f"s3://{bucket}/data.zarr"


def _options(s3: S3Server) -> str:
    return json.dumps(
        {
            "key": ACCESS_KEY,
            "secret": SECRET_KEY,
            "client_kwargs": {"endpoint_url": s3.endpoint, "region_name": "us-east-1"},
        }
    )


def test_inspect_a_bucket(s3: S3Server, url: str) -> None:
    out = run("inspect", url, "--storage-options", _options(s3), "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["arrays"]["t2m"]["shape"] == [48, 6, 8]
    assert report["arrays"]["t2m"]["chunks"] == [4, 6, 8]
    assert report["batching"]["sample_dim"] == "time"
    assert SECRET_KEY not in out.stdout + out.stderr


def test_bench_a_bucket(s3: S3Server, url: str, tmp_path: Path) -> None:
    out = run(
        "bench",
        url,
        "--storage-options",
        _options(s3),
        "--seconds",
        "2",
        "--grid",
        "max_inflight=4,16",
        "--grid",
        "block_chunks=2",
        "--grid",
        "decode_threads=1",
        "--batch-size",
        "8",
        "--json",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["local"] is False
    swept = [p["setting"] for p in report["points"]]
    assert swept == [
        {"max_inflight": 4, "block_chunks": 2, "decode_threads": 1},
        {"max_inflight": 16, "block_chunks": 2, "decode_threads": 1},
    ]
    assert report["recommendation"]["setting"] in swept
    for p in report["points"]:
        assert p["error"] is None, p
        assert p["samples_per_s"] > 0
    assert report["baseline"]["bytes_read"] > 0  # read from the bucket, not from a cache
    saved = (tmp_path / "insitu-bench.json").read_text()
    assert json.loads(saved) == report
    assert SECRET_KEY not in out.stdout + out.stderr + saved


# -- failures: one line naming what is at fault, exit 1 (what the store did), no traceback -----------
def _assert_one_line_failure(out: subprocess.CompletedProcess[str], names: str) -> None:
    lines = out.stderr.strip().splitlines()
    assert "Traceback" not in out.stderr, out.stderr
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("insitu: error: "), out.stderr
    assert names in lines[0], out.stderr
    assert out.returncode == 1, (out.returncode, out.stderr)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_endpoint_is_one_line_naming_the_url() -> None:
    options = json.dumps(
        {
            "key": ACCESS_KEY,
            "secret": SECRET_KEY,
            "client_kwargs": {
                "endpoint_url": f"http://127.0.0.1:{_closed_port()}",
                "region_name": "us-east-1",
            },
        }
    )
    out = run("inspect", "s3://some-bucket/era5.zarr", "--storage-options", options)
    _assert_one_line_failure(out, "s3://some-bucket/era5.zarr")


def test_a_missing_bucket_is_one_line_naming_it(s3: S3Server) -> None:
    out = run("inspect", "s3://no-such-bucket/era5.zarr", "--storage-options", _options(s3))
    _assert_one_line_failure(out, "no-such-bucket")
