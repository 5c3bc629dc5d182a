"""Every way a user gets the ``insitu`` command wrong, or finds a store broken, run as a subprocess.

Each failure is one line on stderr naming what is at fault, never a
traceback; the exit status is 2 for what was typed wrong (an option, a name
that does not exist) and 1 for what the store did (missing, unreachable,
corrupt), as ``insitu --help`` and docs/operability.md say.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import zarr

SCRIPT = Path(sys.executable).with_name("insitu")
USAGE, FAILURE = 2, 1


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=180, env={**os.environ, **(env or {})}
    )


def _era5_like(path: Path, zarr_format: int) -> Path:
    """A t2m field sampled in time and a static land-sea mask, as a CF-aware writer lays them out."""
    group = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    dims = {"dimension_names": ("time", "lat", "lon")} if zarr_format == 3 else {}
    t2m = group.create_array(
        "t2m", shape=(24, 8, 16), chunks=(6, 8, 8), dtype="i2", attributes={"scale_factor": 0.01}, **dims
    )
    t2m[...] = 1
    lsm = group.create_array(
        "lsm",
        shape=(8, 16),
        chunks=(8, 16),
        dtype="f4",
        **({"dimension_names": ("lat", "lon")} if zarr_format == 3 else {}),
    )
    lsm[...] = 1.0
    if zarr_format == 2:
        t2m.attrs["_ARRAY_DIMENSIONS"] = ["time", "lat", "lon"]
        lsm.attrs["_ARRAY_DIMENSIONS"] = ["lat", "lon"]
    return path


def _truncated_zarr_json(tmp: Path) -> tuple[list[str], str]:
    store = _era5_like(tmp / "s.zarr", 3)
    meta = store / "t2m" / "zarr.json"
    meta.write_bytes(meta.read_bytes()[:37])
    return ["inspect", str(store)], "t2m/zarr.json"


def _truncated_zarray(tmp: Path) -> tuple[list[str], str]:
    store = _era5_like(tmp / "s.zarr", 2)
    meta = store / "t2m" / ".zarray"
    meta.write_bytes(meta.read_bytes()[:20])
    return ["inspect", str(store)], "t2m/.zarray"


def _bad_data_type(tmp: Path) -> tuple[list[str], str]:
    store = _era5_like(tmp / "s.zarr", 3)
    meta = store / "t2m" / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["data_type"] = "int17"
    meta.write_text(json.dumps(doc))
    return ["inspect", str(store)], "array 't2m'"


def _regular_file(tmp: Path) -> tuple[list[str], str]:
    (tmp / "notes.txt").write_text("not a store")
    return ["inspect", str(tmp / "notes.txt")], "notes.txt"


def _missing_path(tmp: Path) -> tuple[list[str], str]:
    return ["inspect", str(tmp / "nothing.zarr")], "nothing.zarr"


def _not_zarr_directory(tmp: Path) -> tuple[list[str], str]:
    (tmp / "plain").mkdir()
    return ["inspect", str(tmp / "plain")], "plain"


def _unknown_sample_dim(tmp: Path) -> tuple[list[str], str]:
    return ["inspect", str(_era5_like(tmp / "s.zarr", 3)), "--sample-dim", "valid_time"], "valid_time"


def _unknown_sample_dim_bench(tmp: Path) -> tuple[list[str], str]:
    store = _era5_like(tmp / "s.zarr", 3)
    return ["bench", str(store), "--sample-dim", "valid_time", "--seconds", "1"], "valid_time"


def _static_only_bench(tmp: Path) -> tuple[list[str], str]:
    store = _era5_like(tmp / "s.zarr", 3)
    return ["bench", str(store), "--variables", "lsm", "--seconds", "1", "--out", str(tmp / "b.json")], "lsm"


def _bad_transform_spec(tmp: Path) -> tuple[list[str], str]:
    pytest.importorskip("insitu_transforms")
    return ["check-transform", "os:nope", str(_era5_like(tmp / "s.zarr", 3)), "t2m"], "nope"


def _unknown_scheme(tmp: Path) -> tuple[list[str], str]:
    return ["inspect", "nosuch://bucket/x.zarr"], "nosuch"


def _bad_storage_options(tmp: Path) -> tuple[list[str], str]:
    return ["inspect", str(_era5_like(tmp / "s.zarr", 3)), "--storage-options", "{anon"], "--storage-options"


CASES = {
    "regular file": (_regular_file, FAILURE),
    "missing path": (_missing_path, FAILURE),
    "directory that is not zarr": (_not_zarr_directory, FAILURE),
    "truncated zarr.json": (_truncated_zarr_json, FAILURE),
    "truncated .zarray": (_truncated_zarray, FAILURE),
    "bad data_type": (_bad_data_type, FAILURE),
    "unknown sample dim (inspect)": (_unknown_sample_dim, USAGE),
    "unknown sample dim (bench)": (_unknown_sample_dim_bench, USAGE),
    "static-only bench": (_static_only_bench, USAGE),
    "bad transform spec": (_bad_transform_spec, USAGE),
    "unknown URL scheme": (_unknown_scheme, USAGE),
    "storage options not JSON": (_bad_storage_options, USAGE),
}


def _assert_one_line_error(out: subprocess.CompletedProcess[str], status: int, names: str) -> None:
    lines = out.stderr.strip().splitlines()
    assert "Traceback" not in out.stderr, out.stderr
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("insitu: error: "), out.stderr
    assert names in lines[0], out.stderr
    assert out.returncode == status, (out.returncode, out.stderr)


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_input_is_one_line_naming_it_with_the_documented_status(case: str, tmp_path: Path) -> None:
    make, status = CASES[case]
    args, names = make(tmp_path)
    _assert_one_line_error(run(*args), status, names)


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    args, _ = _truncated_zarr_json(tmp_path)
    out = run("--debug", *args)
    assert "Traceback" in out.stderr
    assert run(*args, env={"INSITU_DEBUG": "1"}).stderr.count("Traceback") >= 1


def test_the_unknown_scheme_error_is_short_and_suggests_no_drill() -> None:
    out = run("inspect", "nosuch://bucket/x.zarr")
    assert len(out.stderr) < 400, out.stderr
    assert "faults+" not in out.stderr


def test_a_reader_that_goes_away_ends_the_output_quietly(tmp_path: Path) -> None:
    # `insitu inspect ... | head -1`: stdout is a pipe whose reader is gone. Set up deterministically:
    # fd 1 is a pipe with its read end closed, so the first write fails with EPIPE.
    store = _era5_like(tmp_path / "s.zarr", 3)
    code = (
        "import os, sys; r, w = os.pipe(); os.close(r); os.dup2(w, 1); "
        "from insitu.cli import main; sys.exit(main(['inspect', sys.argv[1]]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(store)], capture_output=True, text=True, timeout=180
    )
    assert out.stderr == "", out.stderr
    assert out.returncode == 141, (out.returncode, out.stderr)
