"""The insitu-gpu device check: one command, a few minutes on one GPU, no network.

Measures, and prints as one table (and writes as JSON):

1. device transforms against the CPU reference: max relative error per transform;
2. host->device GB/s: pageable copies, the device's pinned bandwidth, and the
   insitu-gpu pinned ring end to end (target: ring >= 80% of pinned);
3. decode GB/s per codec: one CPU core (numcodecs) against nvCOMP on the GPU
   where it is installed (target: GPU zstd >= 5x one core), "not available" otherwise;
4. consumer stall of a small CNN training loop (torch, CUDA) fed by insitu
   through ``as_torch(view, device="cuda")``, against the same loop fed from
   tensors already in GPU memory (target: stall <= 5%).

Fresh CUDA 12 machine, from the repository root (one line, then one command):

    pip install "cupy-cuda12x>=13" nvidia-nvcomp-cu12 torch ./packages/insitu-core ./packages/insitu-transforms ./packages/insitu-torch ./packages/insitu-gpu
    python bench/gpu_check.py

A machine without a registry: ``bench/gpu_wheels.sh`` (run where PyPI is
reachable) fills ``bench/gpu-wheels/``; there, ``pip install --no-index
--find-links bench/gpu-wheels zarr numcodecs obstore`` and run this script
(it puts ``packages/*/src`` on ``sys.path`` when insitu is not installed).
``--dry-run`` runs every step on the CPU (numpy backend, small sizes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "insitu-core": "insitu",
    "insitu-transforms": "insitu_transforms",
    "insitu-torch": "insitu_torch",
    "insitu-gpu": "insitu_gpu",
}


def _use_repository_sources() -> None:
    """Import the packages from this checkout when they are not installed (the registry-less machine)."""
    for package, module in PACKAGES.items():
        if importlib.util.find_spec(module) is None:
            sys.path.insert(0, str(ROOT / "packages" / package / "src"))


_use_repository_sources()

import numpy as np  # noqa: E402

INSTALL = (
    'pip install "cupy-cuda12x>=13" nvidia-nvcomp-cu12 torch ./packages/insitu-core '
    "./packages/insitu-transforms ./packages/insitu-torch ./packages/insitu-gpu"
)
TARGETS = {"ring_vs_pinned": 0.80, "gpu_zstd_vs_core": 5.0, "stall": 0.05, "transform_rel_err": 1e-5}


# -- the environment -----------------------------------------------------------------------------


class Env:
    """The backend (CuPy on a GPU, numpy for --dry-run), its array namespace and a clock that waits for it."""

    def __init__(self, dry_run: bool) -> None:
        from insitu_gpu import HostBackend

        self.dry_run = dry_run
        if dry_run:
            self.backend: Any = HostBackend(mode="thread")
            self.xp: Any = np
            self.device = f"CPU ({platform.processor() or platform.machine()}, dry run)"
            return
        from insitu_gpu.cuda import CupyBackend

        self.backend = CupyBackend(0)
        self.xp = self.backend.xp
        props = self.xp.cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        self.device = name.decode() if isinstance(name, bytes) else str(name)

    def sync(self) -> None:
        if not self.dry_run:
            self.xp.cuda.runtime.deviceSynchronize()

    def timed(self, work: Callable[[], Any], repeat: int) -> float:
        """Best seconds of ``repeat`` runs of ``work`` (after one warm-up), device work included."""
        work()
        self.sync()
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            work()
            self.sync()
            best = min(best, time.perf_counter() - start)
        return best

    def describe(self) -> dict[str, Any]:
        from insitu_gpu.decode import nvcomp_support
        from insitu_gpu.direct import kvikio_support

        info: dict[str, Any] = {
            "device": self.device,
            "python": platform.python_version(),
            "numpy": np.__version__,
            "nvcomp": nvcomp_support().describe(),
            "kvikio": kvikio_support()[1],
        }
        if not self.dry_run:
            info["cupy"] = self.xp.__version__
            info["cuda_runtime"] = int(self.xp.cuda.runtime.runtimeGetVersion())
        try:
            import torch

            info["torch"] = torch.__version__
        except ImportError:
            info["torch"] = "not installed"
        return info


# -- 1. device transforms against the host ---------------------------------------------------------


def check_transforms(env: Env, sizes: dict[str, Any]) -> list[dict[str, Any]]:
    from insitu import Batch
    from insitu_gpu import DeviceChain
    from insitu_transforms import Cast, Coarsen, Crop, FillNaN, Grid, Regrid, StandardScaler

    n_lat, n_lon = sizes["grid"]
    rng = np.random.default_rng(0)
    field = rng.normal(280.0, 15.0, size=(sizes["rows"], 2, n_lat, n_lon)).astype("float32")
    field[rng.random(field.shape) < 0.02] = np.nan
    lat = np.linspace(90.0 - 90.0 / n_lat, -90.0 + 90.0 / n_lat, n_lat)
    lon = np.linspace(0.0, 360.0, n_lon, endpoint=False)
    source = Grid.from_coords(lat, lon)
    coarse = Grid.regular(sizes["regrid_to"])
    chunk: dict[str, Any] = {
        "Cast(float16)": Cast("float16"),
        "FillNaN(0)": FillNaN(0.0),
        "Crop": Crop({1: slice(2, n_lat - 2), 2: slice(0, n_lon // 2)}),
        "Coarsen(mean)": Coarsen({1: 2, 2: 2}, boundary="trim"),
        "Coarsen(max)": Coarsen({1: 2, 2: 2}, how="max", boundary="trim"),
        "Regrid(bilinear)": Regrid(source, coarse, "bilinear", cache_dir=False),
        "Regrid(conservative)": Regrid(source, coarse, "conservative", cache_dir=False),
    }
    rows = []
    for name, t in chunk.items():
        rows.append(_compare(env, name, DeviceChain([t]), t("x", field), field))
    scaler = StandardScaler({"x": 280.0}, {"x": 15.0})
    reference = scaler(Batch({"x": field}, np.arange(len(field))))["x"]
    rows.append(_compare(env, "StandardScaler", DeviceChain([scaler]), reference, field))
    return rows


def _compare(env: Env, name: str, chain: Any, reference: np.ndarray, field: np.ndarray) -> dict[str, Any]:
    device_in = env.xp.asarray(field)
    got = env.backend.to_host(chain(env.xp, {"x": device_in})["x"])
    want = np.asarray(reference)
    same_nan = bool(np.array_equal(np.isnan(got), np.isnan(want)))
    finite = ~np.isnan(want)
    scale = float(np.max(np.abs(want[finite]))) if finite.any() else 1.0
    diff = np.abs(got.astype("float64") - want.astype("float64"))[finite & ~np.isnan(got)]
    err = float(diff.max() / scale) if diff.size else 0.0
    seconds = env.timed(lambda: chain(env.xp, {"x": device_in}), repeat=3)
    return {
        "transform": name,
        "max_rel_err": err,
        "nan_pattern_equal": same_nan,
        "shape_dtype_equal": got.shape == want.shape and got.dtype == want.dtype,
        "device_ms": seconds * 1e3,
    }


# -- 2. host -> device bandwidth -------------------------------------------------------------------


class ListView:
    """The few members of a view the device stage uses, over batches made in memory."""

    def __init__(self, batches: list[dict[str, np.ndarray]]) -> None:
        self._batches = batches

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return iter(self._batches)

    def __len__(self) -> int:
        return len(self._batches)


def check_h2d(env: Env, sizes: dict[str, Any]) -> dict[str, Any]:
    from insitu_gpu import DeviceStage

    nbytes = sizes["h2d_bytes"]
    n = nbytes // 4
    host = np.random.default_rng(1).random(n, dtype=np.float32)
    gb = nbytes / 1e9
    out: dict[str, Any] = {"batch_MiB": nbytes / 2**20}
    if env.dry_run:
        pageable = env.timed(lambda: np.array(host, copy=True), repeat=5)
        pinned = pageable
    else:
        cp = env.xp
        pageable = env.timed(lambda: cp.asarray(host), repeat=5)
        staging = env.backend.pinned_empty(nbytes).view(np.float32)
        staging[...] = host
        target = cp.empty(n, dtype=np.float32)
        stream = cp.cuda.Stream(non_blocking=True)

        def pinned_copies() -> None:
            for _ in range(8):
                target.set(staging, stream=stream)
            stream.synchronize()

        pinned = env.timed(pinned_copies, repeat=3) / 8
    out["pageable_GBps"] = gb / pageable
    out["pinned_GBps"] = gb / pinned
    # The ring end to end: host memcpy into a pinned slot plus the asynchronous copy, batch after batch.
    batches = [{"x": host.reshape(-1, 1024)} for _ in range(sizes["h2d_batches"])]
    threads = max(1, min(8, os.cpu_count() or 1))
    stage = DeviceStage(ListView(batches), backend=env.backend, prefetch=2, copy_threads=threads)
    list(stage)  # warm-up: allocates the ring and the device buffers
    env.sync()
    start = time.perf_counter()
    for batch in stage:
        del batch
    env.sync()
    seconds = time.perf_counter() - start
    out["ring_GBps"] = gb * len(batches) / seconds
    out["ring_vs_pinned"] = out["ring_GBps"] / out["pinned_GBps"]
    out["ring_copy_threads"] = threads
    out["ring_stats"] = {k: v for k, v in stage.stats.items() if k != "decode"}
    return out


# -- 3. decode -------------------------------------------------------------------------------------


def check_decode(env: Env, sizes: dict[str, Any]) -> list[dict[str, Any]]:
    import numcodecs

    from insitu_gpu.decode import gpu_decoder, nvcomp_support

    support = nvcomp_support()
    rng = np.random.default_rng(2)
    # Smooth fields with noise in the low bits: compress like reanalysis data (ratio ~2-4).
    base = np.cumsum(rng.normal(size=(sizes["chunks"], sizes["chunk_elems"])), axis=1).astype("float32")
    raw = [np.ascontiguousarray(c) for c in base]
    rows = []
    for name, codec in (
        ("zstd", numcodecs.Zstd(level=3)),
        ("lz4", numcodecs.LZ4()),
        ("gzip", numcodecs.GZip(level=5)),
    ):
        encoded = [bytes(codec.encode(c)) for c in raw]
        decoded_bytes = sum(c.nbytes for c in raw)
        cpu_s = env.timed(_decode_all(codec.decode, encoded), repeat=2)
        row: dict[str, Any] = {
            "codec": name,
            "ratio": decoded_bytes / sum(len(e) for e in encoded),
            "cpu_core_GBps": decoded_bytes / 1e9 / cpu_s,
        }
        decode = None if env.dry_run else gpu_decoder(name, support)
        if decode is None:
            row["gpu"] = "dry run (CPU)" if env.dry_run else support.describe()
        else:
            try:
                first = env.backend.to_host(decode(encoded[0]))
                row["gpu_matches_cpu"] = bool(np.array_equal(first.view(np.float32), raw[0]))
                gpu_s = env.timed(_decode_all(decode, encoded), repeat=2)
                row["gpu_GBps"] = decoded_bytes / 1e9 / gpu_s
                row["gpu_vs_core"] = row["gpu_GBps"] / row["cpu_core_GBps"]
                row["gpu"] = support.describe()
            except Exception as exc:  # reported, not fatal: the other checks still run
                row["gpu"] = f"error: {type(exc).__name__}: {exc}"
        rows.append(row)
    return rows


def _decode_all(decode: Callable[[bytes], Any], encoded: list[bytes]) -> Callable[[], list[Any]]:
    return lambda: [decode(e) for e in encoded]


# -- 4. consumer stall of a small CNN ----------------------------------------------------------------


def _write_store(path: Path, sizes: dict[str, Any]) -> None:
    import zarr

    n, c = int(sizes["samples"]), int(sizes["channels"])
    h, w = (int(v) for v in sizes["image"])
    rng = np.random.default_rng(3)
    group = zarr.open_group(path, mode="w")
    x = group.create_array("x", shape=(n, c, h, w), chunks=(sizes["chunk_samples"], c, h, w), dtype="float32")
    # (n, 1): a 1-D array along the sample axis would be taken for a coordinate.
    y = group.create_array("y", shape=(n, 1), chunks=(sizes["chunk_samples"], 1), dtype="int64")
    for start in range(0, n, sizes["chunk_samples"]):
        stop = min(n, start + sizes["chunk_samples"])
        x[start:stop] = rng.normal(size=(stop - start, c, h, w)).astype("float32")
        y[start:stop] = rng.integers(0, 10, size=(stop - start, 1))


class TorchCNN:
    """A small CNN and its SGD step, on the GPU (or the CPU for a dry run)."""

    def __init__(self, torch: Any, device: Any, channels: int, width: int) -> None:
        self.torch, self.device = torch, device
        torch.manual_seed(0)
        nn = torch.nn
        self.model = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(2 * width, 10),
        ).to(device)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)

    def step(self, x: Any, y: Any) -> Any:
        self.opt.zero_grad(set_to_none=True)
        loss = self.torch.nn.functional.cross_entropy(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss

    def tensors(self, batch: Any) -> tuple[Any, Any]:
        torch = self.torch
        x, y = batch["x"], batch["y"]
        if isinstance(x, np.ndarray):
            x, y = torch.from_numpy(x), torch.from_numpy(y)
        return x, y.reshape(-1)

    def copy(self, x: Any) -> Any:
        return x.clone()

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize()


class NumpyModel:
    """A linear softmax classifier in numpy: the same loop and timing code for a dry run without torch."""

    def __init__(self, features: int) -> None:
        self.w = np.zeros((features, 10), dtype=np.float32)

    def step(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        flat = x.reshape(len(x), -1)
        logits = flat @ self.w
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        p[np.arange(len(y)), y] -= 1.0
        self.w -= 1e-3 * (flat.T @ p) / len(y)
        return p.sum()

    def tensors(self, batch: Any) -> tuple[Any, Any]:
        return np.asarray(batch["x"]), np.asarray(batch["y"]).reshape(-1)

    def copy(self, x: Any) -> Any:
        return np.array(x, copy=True)

    def sync(self) -> None:
        pass


def check_training(env: Env, sizes: dict[str, Any]) -> dict[str, Any]:
    import insitu
    from insitu_gpu import DeviceStage

    c, (h, w) = sizes["channels"], sizes["image"]
    model: Any
    try:
        import torch

        model = TorchCNN(torch, torch.device("cpu" if env.dry_run else "cuda"), c, sizes["cnn_width"])
        name = "torch CNN"
    except ImportError:
        if not env.dry_run:
            return {"skipped": "torch not installed"}
        model, name = NumpyModel(c * h * w), "numpy linear model (torch not installed)"

    with tempfile.TemporaryDirectory(prefix="insitu-gpu-check-") as tmp:
        store = Path(tmp) / "train.zarr"
        _write_store(store, sizes)
        url = f"file://{store}"
        geoms = insitu.open_geometries(insitu.open_store(url))
        manifest = insitu.split_by_chunk(geoms["x"], (1.0,))
        with insitu.InSituDataset(
            url,
            manifest,
            [geoms["x"], geoms["y"]],
            batch_size=sizes["batch"],
            drop_last=True,
            cache_budget_bytes=2 << 30,
            prefetch=4,
        ) as ds:
            if env.dry_run:
                stage = DeviceStage(ds.train, backend=env.backend, prefetch=1)

                def feed() -> Iterator[tuple[Any, Any]]:
                    for b in stage:
                        yield model.tensors(b)

                route = "DeviceStage (numpy backend)"
            else:
                from insitu_torch import as_torch

                loader = as_torch(ds.train, device="cuda")

                def feed() -> Iterator[tuple[Any, Any]]:
                    for b in loader:
                        yield model.tensors(b)

                route = "as_torch(view, device='cuda') -> insitu-gpu stage -> DLPack"
            steps = 0
            for x, y in feed():  # epoch 0: fills the pool (the cache), warms up kernels
                model.step(x, y)
                steps += 1
            model.sync()
            ds.set_epoch(1)
            start = time.perf_counter()
            fed_steps = 0
            for x, y in feed():
                loss = model.step(x, y)
                fed_steps += 1
                if fed_steps % 50 == 0:
                    float(loss)  # a logging sync, as training loops do
            model.sync()
            fed = time.perf_counter() - start
            # The ceiling: the same steps on batches already in device memory.
            resident = [(model.copy(x), model.copy(y)) for _, (x, y) in zip(range(8), feed(), strict=False)]
            model.sync()
            start = time.perf_counter()
            for i in range(fed_steps):
                x, y = resident[i % len(resident)]
                loss = model.step(x, y)
                if i % 50 == 49:
                    float(loss)
            model.sync()
            ceiling = time.perf_counter() - start
    if fed_steps != steps:
        raise RuntimeError(f"epoch 1 fed {fed_steps} batches, epoch 0 fed {steps}")
    return {
        "model": name,
        "route": route,
        "steps": steps,
        "batch": sizes["batch"],
        "input": [sizes["channels"], *sizes["image"]],
        "fed_s": fed,
        "ceiling_s": ceiling,
        "stall": max(0.0, 1.0 - ceiling / fed),
    }


# -- the run ---------------------------------------------------------------------------------------

SIZES = {
    "gpu": dict(
        rows=32, grid=(181, 360), regrid_to="2deg", h2d_bytes=64 << 20, h2d_batches=32,
        chunks=64, chunk_elems=256 * 1024, samples=16384, channels=4, image=(64, 64),
        chunk_samples=64, batch=128, cnn_width=64,
    ),
    "dry": dict(
        rows=4, grid=(19, 36), regrid_to="20deg", h2d_bytes=1 << 20, h2d_batches=4,
        chunks=4, chunk_elems=16 * 1024, samples=96, channels=2, image=(16, 16),
        chunk_samples=8, batch=16, cnn_width=4,
    ),
}  # fmt: skip


def _step(report: dict[str, Any], key: str, work: Callable[[], Any]) -> None:
    start = time.perf_counter()
    try:
        report[key] = work()
    except Exception as exc:  # one failing check must not hide the others; the exit status says so
        report[key] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        report["failed"].append(key)
    report["seconds"][key] = round(time.perf_counter() - start, 2)


def table(report: dict[str, Any]) -> str:
    """The one short table: check, measured value, target, verdict."""
    lines = [f"insitu-gpu device check: {report['env'].get('device')} ({report['date']})"]
    rows: list[tuple[str, str, str, str]] = []
    dry = bool(report["dry_run"])

    def verdict(ok: bool | None, *, speed: bool = False) -> str:
        # A dry run's speeds are the CPU's: the targets are for the GPU run.
        if ok is None or (speed and dry):
            return "-"
        return "ok" if ok else "MISS"

    for t in report.get("transforms") or []:
        if isinstance(t, dict) and "transform" in t:
            ok = (
                t["max_rel_err"] <= TARGETS["transform_rel_err"]
                and t["nan_pattern_equal"]
                and t["shape_dtype_equal"]
            )
            rows.append(
                (f"transform {t['transform']}", f"rel err {t['max_rel_err']:.1e}", "<= 1e-05", verdict(ok))
            )
    h2d = report.get("h2d") or {}
    if "ring_GBps" in h2d:
        rows.append(("h2d pageable", f"{h2d['pageable_GBps']:.1f} GB/s", "", "-"))
        rows.append(("h2d pinned (device peak)", f"{h2d['pinned_GBps']:.1f} GB/s", "", "-"))
        ok = h2d["ring_vs_pinned"] >= TARGETS["ring_vs_pinned"]
        rows.append(
            (
                "h2d insitu pinned ring",
                f"{h2d['ring_GBps']:.1f} GB/s ({h2d['ring_vs_pinned']:.0%})",
                ">= 80% pinned",
                verdict(ok, speed=True),
            )
        )
    for d in report.get("decode") or []:
        if not isinstance(d, dict) or "codec" not in d:
            continue
        rows.append((f"decode {d['codec']} CPU core", f"{d['cpu_core_GBps']:.2f} GB/s", "", "-"))
        if "gpu_GBps" in d:
            target = ">= 5x core" if d["codec"] == "zstd" else ""
            ok = d["gpu_vs_core"] >= TARGETS["gpu_zstd_vs_core"] if d["codec"] == "zstd" else None
            rows.append(
                (
                    f"decode {d['codec']} GPU",
                    f"{d['gpu_GBps']:.2f} GB/s ({d['gpu_vs_core']:.1f}x)",
                    target,
                    verdict(ok, speed=True),
                )
            )
        else:
            rows.append((f"decode {d['codec']} GPU", str(d.get("gpu")), "", "-"))
    train = report.get("train") or {}
    if "stall" in train:
        ok = train["stall"] <= TARGETS["stall"]
        rows.append(
            (
                "CNN consumer stall",
                f"{train['stall']:.1%} ({train['steps']} steps)",
                "<= 5%",
                verdict(ok, speed=True),
            )
        )
    elif "skipped" in train:
        rows.append(("CNN consumer stall", str(train["skipped"]), "", "-"))
    rows += [(key, f"error: {report[key]['error']}"[:60], "", "FAIL") for key in report["failed"]]
    widths = [max(len(r[i]) for r in rows) if rows else 0 for i in range(4)]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "Fresh CUDA 12 machine: from the repository root, install with this one line, then run\n"
            "python bench/gpu_check.py (under 5 minutes; the table is printed, the JSON written to --out):\n\n"
            f"  {INSTALL}\n"
        ),
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="every step on the CPU (numpy backend), small sizes"
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "gpu_check.json", help="JSON report"
    )
    args = parser.parse_args(argv)
    sizes = SIZES["dry" if args.dry_run else "gpu"]
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "dry_run": args.dry_run,
        "targets": TARGETS,
        "failed": [],
        "seconds": {},
    }
    env = Env(args.dry_run)
    report["env"] = env.describe()
    _step(report, "transforms", lambda: check_transforms(env, sizes))
    _step(report, "h2d", lambda: check_h2d(env, sizes))
    _step(report, "decode", lambda: check_decode(env, sizes))
    _step(report, "train", lambda: check_training(env, sizes))
    env.backend.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print(table(report))
    print(f"JSON: {args.out}")
    return 1 if report["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
