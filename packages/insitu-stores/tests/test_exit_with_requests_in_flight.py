"""A script that ends while obstore still serves a request exits cleanly, after the request ends.

obstore answers on Tokio threads that take the GIL to hand over the result; one that does so while
the interpreter finalizes is ended with ``pthread_exit`` and the process aborts (exit status -6,
after the output was printed). Seen as `insitu inspect` of a missing bucket aborting: zarr's other
metadata probes were still running when the first one's error ended the command. Each test holds
one request at the proxy past the moment the script is done, and checks that the process waited for
its answer (the proxy wrote it in full before the process was gone) and exited with its own status.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import zarr
from s3_servers import ACCESS_KEY, SECRET_KEY, Fault, FaultProxy, S3Server

HELD_S = 1.0  # how long the proxy holds the one request; the script is done well before


def _options(endpoint: str) -> dict[str, object]:
    return {
        "key": ACCESS_KEY,
        "secret": SECRET_KEY,
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    }


def _run(script: str) -> subprocess.CompletedProcess[str]:
    # The first exit handler registered runs last: it reports what is still in flight when the
    # interpreter is about to finalize.
    prelude = textwrap.dedent(
        """
        import atexit, sys
        from insitu.store import loop
        atexit.register(lambda: print("in flight at exit:", loop.in_flight(), file=sys.stderr))
        """
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(script)], capture_output=True, text=True, timeout=120
    )


def test_a_failed_open_waits_for_the_probes_still_running(proxy: FaultProxy) -> None:
    proxy.faults.append(Fault(".zgroup", f"delay:{HELD_S}", method="GET"))
    out = _run(
        f"""
        from insitu.cli import main
        sys.exit(main(["inspect", "s3://no-such-bucket/era5.zarr",
                       "--storage-options", {json.dumps(json.dumps(_options(proxy.endpoint)))}]))
        """
    )
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith("insitu: error: NoSuchBucket"), out.stderr
    assert "in flight at exit: 0" in out.stderr
    assert proxy.answers_to("no-such-bucket/era5.zarr/.zgroup") == 1


@pytest.fixture
def data_url(s3: S3Server, bucket: str) -> str:
    root = zarr.open_group(s3.zarr_store(bucket, "data.zarr"), mode="w", zarr_format=3)
    x = root.create_array("x", shape=(64, 8), chunks=(4, 8), dtype="f4", dimension_names=("time", "x"))
    x[...] = np.arange(64 * 8, dtype="f4").reshape(64, 8)
    return f"s3://{bucket}/data.zarr"


def test_a_script_that_stops_mid_epoch_waits_for_the_reads_it_abandoned(
    proxy: FaultProxy, data_url: str
) -> None:
    # Every chunk but the first is held: the script takes one batch and ends without close(), so the
    # exit cancels the pass while its reads are at the proxy. The first batch can reach the script
    # before the read-ahead has sent its reads (a small batch is gathered on the loop at once), so
    # the script gives it a moment (well within the time the proxy holds them) before it ends.
    for chunk in range(1, 16):
        proxy.faults.append(Fault(f"data.zarr/x/c/{chunk}/0", f"delay:{HELD_S}", method="GET"))
    out = _run(
        f"""
        import insitu
        store = insitu.open_store({data_url!r}, storage_options={_options(proxy.endpoint)!r})
        geoms = insitu.open_geometries(store, ["x"], sample_dim="time")
        ds = insitu.InSituDataset(store, insitu.split_by_chunk(geoms["x"], (1.0,)), geoms, batch_size=4,
                                  shuffle=False)
        batch = next(iter(ds.train))
        print("first batch", batch["x"][0, 0], flush=True)
        import time
        time.sleep({HELD_S / 4})
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "first batch 0.0"
    assert "in flight at exit: 0" in out.stderr
    held = sum(fault.hits for fault in proxy.faults)
    assert held > 0  # the pass had reads beyond the first batch's at the proxy
    assert sum(proxy.answers_to(f"data.zarr/x/c/{chunk}/0") for chunk in range(1, 16)) == held
