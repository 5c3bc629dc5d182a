"""obstore vs fsspec on a loopback S3 server with injected latency, at equal concurrency.

Starts moto's S3 server in a subprocess (so it does not share the benchmark's
GIL), writes a zstd-compressed float32 array to a bucket, then runs one engine
epoch per backend through a wrapper that adds a fixed delay to every GET (a
stand-in for cloud round trips), with the same ``max_inflight``. Prints time to
first batch, epoch time, MB/s of stored bytes and samples/s, with
obstore/fsspec ratios from the same run. A second table times raw chunk
fetches through zarr's ``Store.get`` and through ``ObstoreStore.insitu_get``
(no zarr Buffer), without injected latency.

    python bench/stores_s3.py                      # ~1 minute
    python bench/stores_s3.py --latency-ms 50 --max-inflight 32 --repeats 3

Needs insitu-core and insitu-stores with the test extra (moto[server], s3fs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import ByteRequest
from zarr.buffer import default_buffer_prototype
from zarr.storage import WrapperStore

import insitu
from insitu_stores import fsspec_store, obstore_store

CREDENTIALS = {"access_key_id": "bench", "secret_access_key": "bench-secret"}


class DelayedStore(WrapperStore[Any]):
    """Adds ``delay_s`` before every read, as a network round trip would."""

    def __init__(self, store: Any, delay_s: float) -> None:
        super().__init__(store)
        self.delay_s = delay_s

    def _with_store(self, store: Any) -> DelayedStore:
        return type(self)(store, self.delay_s)

    async def get(self, key: str, prototype: Any, byte_range: ByteRequest | None = None) -> Any:
        await asyncio.sleep(self.delay_s)
        return await self._store.get(key, prototype, byte_range)

    async def get_partial_values(self, prototype: Any, key_ranges: Any) -> list[Any]:
        await asyncio.sleep(self.delay_s)
        return await self._store.get_partial_values(prototype, key_ranges)

    def insitu_identity(self) -> str:
        return f"delayed:{self._store}"


def start_server() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(endpoint, timeout=1).read()
            return proc, endpoint
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the S3 server did not start within 30 s")


def write_data(endpoint: str, n_time: int, chunk_time: int, shape: tuple[int, int]) -> str:
    from obstore.store import S3Store
    from zarr.storage import ObjectStore

    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/bench", method="PUT"), timeout=10).read()
    raw = S3Store(
        "bench",
        prefix="era5.zarr",
        endpoint=endpoint,
        region="us-east-1",
        client_options={"allow_http": True},
        **CREDENTIALS,
    )
    store = ObjectStore(raw, read_only=False)
    rng = np.random.default_rng(0)
    # Smooth fields compress like real ones (zstd ~2x), random noise would not.
    base = rng.normal(size=(1, *shape)).astype("float32").cumsum(axis=1)
    values = (base + 0.01 * np.arange(n_time, dtype="float32")[:, None, None]).astype("float32")
    arr = zarr.create_array(
        store, name="t2m", shape=values.shape, chunks=(chunk_time, *shape), dtype="float32"
    )
    arr[...] = values
    # The same values sharded: 8 inner chunks per shard, read by byte range.
    sharded = zarr.create_array(
        store,
        name="t2m_sharded",
        shape=values.shape,
        chunks=(chunk_time, *shape),
        shards=(8 * chunk_time, *shape),
        dtype="float32",
    )
    sharded[...] = values
    return "s3://bench/era5.zarr"


def open_backend(name: str, url: str, endpoint: str) -> Any:
    builder = obstore_store if name == "obstore" else fsspec_store
    return builder(url, endpoint=endpoint, **CREDENTIALS)


def one_epoch(store: Any, max_inflight: int, batch_size: int) -> dict[str, float]:
    geoms = insitu.open_geometries(store, variables=["t2m"])
    manifest = insitu.split_by_chunk(geoms["t2m"], (1.0,))
    started = time.perf_counter()
    first = None
    samples = 0
    with insitu.InSituDataset(
        store, manifest, geoms, batch_size=batch_size, block_chunks=8, max_inflight=max_inflight, seed=0
    ) as ds:
        for batch in ds.all:
            if first is None:
                first = time.perf_counter() - started
            samples += batch.size
        elapsed = time.perf_counter() - started
        stored = ds.stats["bytes_read"]
    return {
        "first_batch_s": first or elapsed,
        "epoch_s": elapsed,
        "mb_per_s": stored / elapsed / 1e6,
        "samples_per_s": samples / elapsed,
        "stored_mb": stored / 1e6,
    }


async def shard_ranges(store: Any, n_shards: int) -> list[tuple[str, list[tuple[int, int]]]]:
    """Every shard's key and the byte ranges of its inner chunks, from the shard indexes."""
    from zarr.abc.store import SuffixByteRequest

    out = []
    for i in range(n_shards):
        key = f"t2m_sharded/c/{i}/0/0"
        raw = await store.get(key, default_buffer_prototype(), SuffixByteRequest(8 * 16 + 4))
        index = np.frombuffer(raw.to_bytes()[:-4], dtype="<u8").reshape(-1, 2)
        out.append((key, [(int(o), int(o + n)) for o, n in index]))
    return out


async def fetch_ranges(
    store: Any, shards: list[tuple[str, list[tuple[int, int]]]], concurrency: int, multi: bool
) -> float:
    from zarr.abc.store import RangeByteRequest

    prototype = default_buffer_prototype()
    sem = asyncio.Semaphore(concurrency)

    async def one(key: str, start: int, end: int) -> None:
        async with sem:
            await store.get(key, prototype, RangeByteRequest(start, end))

    async def whole_shard(key: str, ranges: list[tuple[int, int]]) -> None:
        async with sem:
            await store.insitu_get_ranges(key, ranges)

    started = time.perf_counter()
    if multi:
        await asyncio.gather(*(whole_shard(k, r) for k, r in shards))
    else:
        await asyncio.gather(*(one(k, a, b) for k, r in shards for a, b in r))
    return time.perf_counter() - started


async def fetch_all(store: Any, keys: list[str], concurrency: int, direct: bool) -> float:
    prototype = default_buffer_prototype()
    sem = asyncio.Semaphore(concurrency)

    async def one(key: str) -> None:
        async with sem:
            if direct:
                await store.insitu_get(key)
            else:
                await store.get(key, prototype)

    started = time.perf_counter()
    await asyncio.gather(*(one(k) for k in keys))
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency-ms", type=float, default=20.0, help="delay added to every GET")
    parser.add_argument(
        "--max-inflight", type=int, default=16, help="engine fetch concurrency (both backends)"
    )
    parser.add_argument("--n-time", type=int, default=512, help="samples (rows along the sample axis)")
    parser.add_argument("--chunk-time", type=int, default=4, help="samples per chunk")
    parser.add_argument("--field", type=int, nargs=2, default=(96, 144), help="sample shape (ny nx)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="epochs per backend (alternating); best kept")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)

    proc, endpoint = start_server()
    try:
        url = write_data(endpoint, args.n_time, args.chunk_time, tuple(args.field))
        delay = args.latency_ms / 1000
        runs: dict[str, list[dict[str, float]]] = {"obstore": [], "fsspec": []}
        for _ in range(args.repeats):
            for name in runs:  # alternate, so drift on a shared machine hits both alike
                store = DelayedStore(open_backend(name, url, endpoint), delay)
                runs[name].append(one_epoch(store, args.max_inflight, args.batch_size))
        best = {name: min(r, key=lambda m: m["epoch_s"]) for name, r in runs.items()}
        first = {name: statistics.median(m["first_batch_s"] for m in r) for name, r in runs.items()}

        # Raw fetches without latency: zarr's Store.get vs the direct obstore path.
        keys = [f"t2m/c/{i}/0/0" for i in range(args.n_time // args.chunk_time)]
        obs = open_backend("obstore", url, endpoint)
        fss = open_backend("fsspec", url, endpoint)
        loop = asyncio.new_event_loop()  # one loop for every fetch: fsspec keeps a session per loop

        def best_of_3(store: Any, direct: bool) -> float:
            return min(
                loop.run_until_complete(fetch_all(store, keys, args.max_inflight, direct)) for _ in range(3)
            )

        fetch = {
            "fsspec Store.get": best_of_3(fss, False),
            "obstore Store.get": best_of_3(obs, False),
            "obstore insitu_get": best_of_3(obs, True),
        }
        shards = loop.run_until_complete(shard_ranges(obs, args.n_time // (8 * args.chunk_time)))
        n_ranges = sum(len(r) for _, r in shards)
        ranged = {
            f"{n_ranges} x Store.get(range)": min(
                loop.run_until_complete(fetch_ranges(obs, shards, args.max_inflight, False)) for _ in range(3)
            ),
            f"{len(shards)} x insitu_get_ranges": min(
                loop.run_until_complete(fetch_ranges(obs, shards, args.max_inflight, True)) for _ in range(3)
            ),
        }
        fss.close()
        loop.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    stored_mb = best["obstore"]["stored_mb"]
    print(
        f"\nengine epoch over loopback S3, +{args.latency_ms:g} ms per GET, max_inflight={args.max_inflight}, "
        f"{args.n_time} samples of {args.field[0]}x{args.field[1]} float32, {stored_mb:.1f} MB stored "
        f"(best of {args.repeats}; first batch: median)"
    )
    header = f"{'backend':<10}{'first batch s':>15}{'epoch s':>10}{'MB/s':>9}{'samples/s':>12}"
    print(header)
    print("-" * len(header))
    for name in ("obstore", "fsspec"):
        m = best[name]
        print(
            f"{name:<10}{first[name]:>15.3f}{m['epoch_s']:>10.3f}{m['mb_per_s']:>9.1f}{m['samples_per_s']:>12.0f}"
        )
    ratio = {
        "first_batch": first["fsspec"] / first["obstore"],
        "mb_per_s": best["obstore"]["mb_per_s"] / best["fsspec"]["mb_per_s"],
    }
    print(
        f"{'obstore/fsspec':<14}: MB/s x{ratio['mb_per_s']:.2f}, "
        f"first batch {ratio['first_batch']:.2f}x faster"
    )
    print(
        f"\nraw GET of {len(keys)} chunks, concurrency {args.max_inflight}, no injected latency (best of 3)"
    )
    for name, seconds in fetch.items():
        print(f"{name:<20}{seconds:>8.3f} s{stored_mb / seconds:>9.1f} MB/s")
    print(f"\ninner chunks of {len(shards)} shards through obstore, same bytes (best of 3)")
    for name, seconds in ranged.items():
        print(f"{name:<28}{seconds:>8.3f} s{stored_mb / seconds:>9.1f} MB/s")
    result = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "runs": runs,
        "first_batch_median_s": first,
        "ratios": ratio,
        "raw_fetch_s": fetch,
        "sharded_fetch_s": ranged,
    }
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
