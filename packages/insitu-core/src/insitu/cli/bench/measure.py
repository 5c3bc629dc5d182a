"""Measuring one setting of ``insitu bench``: cold epochs of a fresh dataset, timed, with peak memory."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from insitu.cli.bench.settings import Config


class PeakRss:
    """The process's peak resident set size while running, sampled every few milliseconds
    (Linux ``/proc/self/statm``; ``None`` elsewhere), as growth over the size when it started."""

    def __init__(self, interval_s: float = 0.005) -> None:
        self.interval_s = interval_s
        self.floor = self.peak = self._now() or 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def _now() -> int | None:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return None

    def __enter__(self) -> PeakRss:
        if self._now() is not None:
            self._thread = threading.Thread(target=self._watch, name="insitu-bench-rss", daemon=True)
            self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak = max(self.peak, self._now() or 0)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self.peak = max(self.peak, self._now() or 0)

    @property
    def growth(self) -> int | None:
        """Bytes the resident set grew by at its peak; ``None`` where it cannot be sampled."""
        return None if self._thread is None else max(0, self.peak - self.floor)


@dataclass
class Target:
    """What every run reads: the store, its geometries and the split over every sample."""

    store: Any
    geometries: list[Any]
    fields: list[str]  # labels whose arrays count as delivered bytes (not static ones)
    manifest: Any
    local: bool
    sample_dim: str | None  # for the report
    n_chunks: int  # chunks in the split


def run_point(target: Target, setting: Mapping[str, int], seconds: float, config: Config) -> dict[str, Any]:
    """One timed run of ``setting``: cold epochs, each from a fresh dataset, until ``seconds``
    have passed (the last one stopped there); at least one batch."""
    started = time.perf_counter()
    epochs: list[dict[str, Any]] = []
    while True:
        left = seconds - (time.perf_counter() - started)
        epoch = run_epoch(target, setting, left, config)
        if epoch["error"] is not None:
            return epoch
        epochs.append(epoch)
        if not epoch["complete_epoch"] or time.perf_counter() - started >= seconds:
            break
    steady_samples = sum(e["steady_samples"] for e in epochs)
    steady_s = sum(e["steady_s"] for e in epochs)
    samples, nbytes = sum(e["samples"] for e in epochs), sum(e["bytes"] for e in epochs)
    rate = steady_samples / steady_s if steady_s > 0 else 0.0
    busy = sum(e["iterating_s"] for e in epochs)
    rss = [e["peak_rss_growth_bytes"] for e in epochs if e["peak_rss_growth_bytes"] is not None]
    return {
        "setting": dict(setting),
        "error": None,
        "epochs": len(epochs),
        "ttfb_s": median([e["ttfb_s"] for e in epochs]),
        "seconds": time.perf_counter() - started,
        "samples": samples,
        "bytes": nbytes,
        "samples_per_s": rate,
        "MBps": rate * (nbytes / samples) / 1e6 if samples else 0.0,
        "stall_fraction": sum(e["waiting_s"] for e in epochs) / busy if busy else None,
        "need_bytes": epochs[0]["need_bytes"],
        "peak_pool_bytes": max(e["peak_pool_bytes"] or 0 for e in epochs),
        "peak_rss_growth_bytes": max(rss) if rss else None,
        "reads": sum(e["reads"] or 0 for e in epochs),
        "bytes_read": sum(e["bytes_read"] or 0 for e in epochs),
    }


def run_epoch(target: Target, setting: Mapping[str, int], seconds: float, config: Config) -> dict[str, Any]:
    """One cold epoch of a fresh dataset with ``setting``, timed from construction; stopped at
    the first batch after ``seconds``."""
    import gc

    from insitu import ConfigError, InSituDataset

    gc.collect()  # the previous run's arenas go back to the OS before this one is measured
    out: dict[str, Any] = {"setting": dict(setting), "error": None}
    options: dict[str, Any] = dict(setting)
    if config.budget:
        options["cache_budget_bytes"] = config.budget
    with PeakRss() as rss:
        t0 = time.perf_counter()
        try:
            ds = InSituDataset(
                target.store,
                target.manifest,
                target.geometries,
                batch_size=config.batch_size,
                seed=config.seed,
                **options,
            )
        except ConfigError as exc:
            out["error"] = str(exc)
            return out
        try:
            it = iter(ds.train)
            need = getattr(it, "readahead_bytes", None)
            samples = nbytes = first_samples = 0
            first_at = last_at = None
            complete = True
            for batch in it:
                now = time.perf_counter()
                if first_at is None:
                    first_at, first_samples = now, batch.size
                samples += batch.size
                nbytes += sum(batch[f].nbytes for f in target.fields)
                last_at = now
                if config.step_s:
                    time.sleep(config.step_s)
                if now - t0 >= seconds:
                    complete = False
                    break
            it.close()
            stats = dict(ds.stats)
        except ConfigError as exc:
            out["error"] = str(exc)
            return out
        finally:
            ds.close()
    if first_at is None or last_at is None:
        out["error"] = "the split delivered no batch"
        return out
    steady_samples, steady_s = samples - first_samples, last_at - first_at
    if steady_samples <= 0 or steady_s <= 0:  # one batch: the rate from construction
        steady_samples, steady_s = samples, last_at - t0
    out.update(
        {
            "ttfb_s": first_at - t0,
            "samples": samples,
            "bytes": nbytes,
            "complete_epoch": complete,
            "steady_samples": steady_samples,
            "steady_s": steady_s,
            "waiting_s": stats.get("waiting_s") or 0.0,
            "iterating_s": stats.get("iterating_s") or 0.0,
            "need_bytes": need,
            "peak_pool_bytes": stats.get("peak_resident_bytes"),
            "peak_rss_growth_bytes": rss.growth,
            "reads": stats.get("reads"),
            "bytes_read": stats.get("bytes_read"),
        }
    )
    return out


def median(values: Sequence[float]) -> float:
    """The median of ``values`` (at least one)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
