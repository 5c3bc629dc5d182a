"""Tables, plots and the docs section from the driver's results (``suite.json``).

    python bench/suite/report.py bench/results/suite.json [--out DIR] [--docs]

writes ``suite.md`` (and prints it) and the plots; ``--docs`` puts the plots in
``docs/img/bench/`` and rewrites the part of ``docs/benchmarks.md`` between
``<!-- bench:results:start -->`` and ``<!-- bench:results:end -->``.

Results JSON (schema 1), as ``driver.py`` writes it:

- ``schema`` (1), ``created`` (ISO time, UTC), ``command``, ``mode`` (quick|full),
  ``wall_s`` (the whole run);
- ``settings``: ``samples``, ``repeats``, ``batch_size``, ``max_seconds`` (cold-epoch cap),
  ``engine_max_seconds`` (tighter caps per engine), ``latency_ms``;
- ``machine``: ``cpus``, ``cpu_model``, ``ram_GB``, ``platform``;
- ``interpreters``: engine -> ``{executable, python, modules, packages}`` (package
  versions of the interpreter that ran it);
- ``cases``: name -> ``common.Case`` fields plus ``sample_nbytes``;
- ``plan``: condition -> ``[[case, [engines]]]`` (``best-worker``: the best local
  worker stack of that case);
- ``notes``: skipped engines and other remarks;
- ``rows``: one per run: ``condition``, ``case``, ``engine``, ``tuning`` (dict),
  ``tuning_label``, ``repeat``, ``interpreter``, ``status``
  (ok|unsupported|error|timeout), ``reason`` (unsupported), ``error`` (one line: the
  exception, the wrong sample count or the timeout), ``error_tail`` (end of stderr), ``returncode``, ``wall_s`` (process start to exit), ``peak_rss_tree`` (bytes,
  summed over the runner and its descendants), ``max_procs``; for ok rows the
  runner's ``common.Result`` fields (``samples``, ``bytes``, ``elapsed_s``,
  ``ttfb_s``, ``floor_rss``, ``warm_elapsed_s``, ``warm_samples``, ``truncated``,
  ``checksum``, ``extra``: for insitu and insitu_stream ``inflight_trajectory``, ``[at_s,
  limit]`` per change of the requests-in-flight limit over the cold epoch, and
  ``cache_bytes``, the pool's resident bytes at the end of the cold epoch) and derived
  ``samples_per_s``, ``MBps`` (1e6 bytes/s of delivered sample data), ``ttfb_ms``,
  ``peak_rss_MB``, ``work_MB`` (working memory, below), ``warm_samples_per_s``,
  ``warm_MBps``, ``checksum_ok``;
- ``summary``: per (condition, case, engine, tuning_label): ``tuning``, ``runs``, ``ok``,
  ``statuses``, ``truncated``, ``problems`` and the median over ok runs of
  ``samples_per_s``, ``MBps``, ``ttfb_ms``, ``peak_rss_MB``, ``work_MB``,
  ``warm_samples_per_s``, ``warm_MBps``, ``wall_s``;
- ``best``: the summary entry with the highest median MB/s per (condition, case, engine);
- ``checks``: ``checksum_mismatches`` (case, condition, engine, tuning_label, repeat,
  checksum, reference) and ``errors`` (failed or timed-out runs).

Working memory (``work_MB``) = peak RSS of the process tree - the bytes the engine's cache
holds at the end of the cold epoch (0 for engines without a cache). insitu's peak includes the
decoded chunks it keeps for later epochs; working memory is what its cold pass holds besides
them, the figure to set against peers that keep no cache. Results files from before it was
recorded have no ``work_MB``: it shows as unknown ("–").
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
from pathlib import Path
from typing import Any, NamedTuple

from common import CEILINGS
from portable import portable_paths

WORKER_STACKS = ("xbatcher", "workers", "chunkaware")
PER_SAMPLE_STACKS = ("xbatcher", "workers")
# This project's engines: their working memory is set against insitubatch's peak.
INSITU_ENGINES = ("insitu", "insitu_stream")
WORKING_MEMORY = (
    "working memory = peak RSS of the process tree - the bytes the engine's cache holds at the end "
    "of the cold epoch (0 for engines without a cache)"
)
ENGINE_ORDER = (
    "insitu",
    "insitu_stream",
    "insitubatch",
    "tensorstore",
    *WORKER_STACKS,
    "naive",
    "simple",
    *CEILINGS,
)
CONDITION_ORDER = ("local", "latency", "latency100", "throttle", "http", "s3")
CASE_ORDER = ("c1", "c2", "c8", "c32", "multivar", "window", "sharded")
CONDITION_TITLES = {
    "local": "local disk",
    "latency": "local disk + {latency_ms:g} ms per GET",
    "latency100": "local disk + 100 ms per GET",
    "throttle": "local disk + {latency_ms:g} ms per GET, 503 SlowDown above 24 GETs at once",
    "http": "HTTP (nginx on loopback, {latency_ms:g} ms per request inside the server)",
    "s3": "S3 (moto server on loopback)",
}
START, END = "<!-- bench:results:start -->", "<!-- bench:results:end -->"
COLORS = {
    "insitu": "tab:blue",
    "insitu_stream": "midnightblue",
    "insitubatch": "tab:orange",
    "xbatcher": "tab:green",
    "workers": "tab:red",
    "chunkaware": "tab:purple",
    "naive": "tab:brown",
    "simple": "tab:pink",
    "tensorstore": "tab:cyan",
    "ceiling_decode": "black",
    "ceiling_decode_out": "dimgray",
    "ceiling_decode_keep": "silver",
    "ceiling_gather": "tab:gray",
    "ceiling_rawget": "tab:olive",
    "ceiling_fetch_keep": "darkkhaki",
}

# The plots docs/benchmarks.md shows, in order, with a caption where the figure needs one.
DOC_IMAGES = ("throughput_vs_chunk.png", "ttfb.png", "memory.png", "cold_warm.png", "inflight.png")
CAPTIONS = {
    "memory.png": "Peak RSS of the process tree (local disk, best tuning). The hatched top of a bar is "
    "the cache the engine holds at the end of the cold epoch; the solid part below it is the working "
    "memory: peak RSS of the process tree - the bytes the engine's cache holds at the end of the cold "
    "epoch (0 for engines without a cache).",
    "inflight.png": "The limit on requests in flight that insitu's concurrency controller chose over "
    "one cold epoch (at the defaults unless the legend names a tuning): it starts from its start "
    "value, doubles while throughput follows and halves on congestion (a throttled, timed-out or "
    "failed request).",
}


# The per-condition table: the best tuning of every engine in each case.
CONDITION_COLUMNS = (
    "case",
    "engine",
    "best tuning",
    "samples/s",
    "MB/s",
    "TTFB ms",
    "peak RSS MB (tree)",
    "working MB",
    "working / insitubatch peak",
    "vs insitubatch",
    "vs best worker stack",
    "vs best per-sample stack",
    "vs decode ceiling",
    "vs decode+write ceiling",
    "vs keep ceiling",
    "vs local disk",
)


def _order(items: list[str], order: tuple[str, ...]) -> list[str]:
    return sorted(items, key=lambda x: (order.index(x) if x in order else len(order), x))


def _best_warm(results: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Per (condition, case, engine): the tuning with the fastest warm epoch.

    Not the best cold tuning: a cache budget smaller than the data can win
    the cold epoch (fresh pages are reused) and then caches little, so the
    cold-vs-warm comparison shows each engine's best warm setting, with its
    own cold number.
    """
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for e in results.get("summary", []):
        if not e.get("warm_MBps"):
            continue
        key = (e["condition"], e["case"], e["engine"])
        if key not in out or e["warm_MBps"] > out[key]["warm_MBps"]:
            out[key] = e
    return out


def _best(results: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(b["condition"], b["case"], b["engine"]): b for b in results.get("best", [])}


def _fmt(v: float | None, digits: int = 0) -> str:
    return "–" if v is None else f"{v:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "–" if not a or not b else f"{a / b:.2f}×"


def _mismatched(results: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    return {
        (m["condition"], m["case"], m["engine"], m["tuning_label"])
        for m in results.get("checks", {}).get("checksum_mismatches", [])
    }


def tables(results: dict[str, Any]) -> str:
    """Markdown: one table per condition, a cold/warm table and the checks."""
    best = _best(results)
    bad = _mismatched(results)
    settings = results.get("settings", {})
    lines: list[str] = []
    conditions = [c for c in CONDITION_ORDER if any(k[0] == c for k in best)]
    for cond in conditions:
        title = CONDITION_TITLES[cond].format(latency_ms=settings.get("latency_ms", 20))
        lines += [
            f"### {cond}: {title}",
            "",
            "| " + " | ".join(CONDITION_COLUMNS) + " |",
            "|" + "---|" * 3 + "--:|" * (len(CONDITION_COLUMNS) - 3),
        ]
        cases = _order(list({k[1] for k in best if k[0] == cond}), CASE_ORDER)
        for case in cases:
            ib = best.get((cond, case, "insitubatch"), {}).get("MBps")
            ib_peak = best.get((cond, case, "insitubatch"), {}).get("peak_rss_MB")
            workers = [best.get((cond, case, w), {}).get("MBps") for w in WORKER_STACKS]
            bw = max((w for w in workers if w), default=None)
            # The stacks that read one sample at a time (and so decode a chunk once per sample in it).
            per_sample = [best.get((cond, case, w), {}).get("MBps") for w in PER_SAMPLE_STACKS]
            bps = max((w for w in per_sample if w), default=None)
            ceiling, ceiling_out = (
                next(
                    (b["MBps"] for (c, k, e), b in best.items() if k == case and e == name and b["MBps"]),
                    None,
                )
                for name in ("ceiling_decode", "ceiling_decode_out")
            )
            keep = _keep_ceiling(best, cond, case)
            engines = _order([k[2] for k in best if k[0] == cond and k[1] == case], ENGINE_ORDER)
            for engine in engines:
                b = best[(cond, case, engine)]
                label = b["tuning_label"]
                if b["MBps"] is None:
                    why = "; ".join(b.get("problems", [])) or "no result"
                    blanks = "  |" * (len(CONDITION_COLUMNS) - 3)
                    lines.append(f"| {case} | {engine} | {b['statuses'][0]}: {why[:80]} |{blanks}")
                    continue
                flags = " (truncated)" if b.get("truncated") else ""
                local = best.get(("local", case, engine), {}).get("MBps") if cond != "local" else None
                if (cond, case, engine, label) in bad:
                    flags += " **checksum mismatch**"
                # Older results files carry no working memory: shown as unknown.
                work = b.get("work_MB")
                vs_ib_peak = _ratio(work, ib_peak) if engine in INSITU_ENGINES else "–"
                lines.append(
                    f"| {case} | {engine}{flags} | {label} | {_fmt(b['samples_per_s'])} | {_fmt(b['MBps'])} "
                    f"| {_fmt(b['ttfb_ms'], 1)} | {_fmt(b['peak_rss_MB'])} | {_fmt(work)} | {vs_ib_peak} "
                    f"| {_ratio(b['MBps'], ib)} "
                    f"| {_ratio(b['MBps'], bw)} | {_ratio(b['MBps'], bps)} | {_ratio(b['MBps'], ceiling)} "
                    f"| {_ratio(b['MBps'], ceiling_out)} | {_ratio(b['MBps'], keep)} | {_ratio(b['MBps'], local)} |"
                )
        if any(k[0] == cond and k[2] == "ceiling_rawget" for k in best):
            lines += ["", "ceiling_rawget's MB/s counts stored (compressed) bytes; compare its samples/s."]
        lines.append("")
    warm = list(_best_warm(results).values())
    if warm:
        lines += [
            "### Cold vs warm epoch",
            "",
            "| condition | case | engine | tuning | cold MB/s | warm MB/s | warm / cold |",
            "|---|---|---|---|--:|--:|--:|",
        ]
        warm.sort(
            key=lambda b: (
                CONDITION_ORDER.index(b["condition"]) if b["condition"] in CONDITION_ORDER else 9,
                CASE_ORDER.index(b["case"]) if b["case"] in CASE_ORDER else len(CASE_ORDER),
                ENGINE_ORDER.index(b["engine"]) if b["engine"] in ENGINE_ORDER else len(ENGINE_ORDER),
            )
        )
        for b in warm:
            lines.append(
                f"| {b['condition']} | {b['case']} | {b['engine']} | {b['tuning_label']} | {_fmt(b['MBps'])} "
                f"| {_fmt(b['warm_MBps'])} | {_ratio(b['warm_MBps'], b['MBps'])} |"
            )
        lines.append("")
    lines += _keep_cost(results, best)
    lines += _checks(results)
    return "\n".join(lines)


def _keep_ceiling(best: dict[tuple[str, str, str], dict[str, Any]], cond: str, case: str) -> float | None:
    """MB/s of the least a cold pass that keeps the epoch does: decoding into fresh memory with the
    bytes in memory (``ceiling_decode_keep``, measured once per case) on local disk; through the
    condition's store, fetching as well (``ceiling_fetch_keep`` of that condition) elsewhere."""
    if cond == "local":
        name, where = "ceiling_decode_keep", None
    else:
        name, where = "ceiling_fetch_keep", cond
    for (c, k, e), b in best.items():
        if k == case and e == name and b["MBps"] and (where is None or c == where):
            return float(b["MBps"])
    return None


def _keep_cost(results: dict[str, Any], best: dict[tuple[str, str, str], dict[str, Any]]) -> list[str]:
    """Markdown: the default's cold pass (it keeps the epoch for the next) against streaming, per
    condition and case, beside the machine's bound for that ratio (decode into fresh memory vs
    decode plus one write to warm memory)."""
    keep = {k: b["MBps"] for (_, k, e), b in best.items() if e == "ceiling_decode_keep" and b["MBps"]}
    out_ = {k: b["MBps"] for (_, k, e), b in best.items() if e == "ceiling_decode_out" and b["MBps"]}
    rows = []
    for cond in CONDITION_ORDER:
        for case in CASE_ORDER:
            cached = best.get((cond, case, "insitu"), {}).get("MBps")
            streamed = best.get((cond, case, "insitu_stream"), {}).get("MBps")
            if not cached or not streamed:
                continue
            bound = _ratio(keep.get(case), out_.get(case))
            rows.append(
                f"| {cond} | {case} | {_fmt(cached)} | {_fmt(streamed)} | {_ratio(cached, streamed)} | {bound} |"
            )
    if not rows:
        return []
    return [
        "### What keeping the cold epoch costs",
        "",
        "insitu at its default budget keeps every decoded chunk of the first epoch for the next; "
        "insitu_stream keeps nothing. The bound is ceiling_decode_keep (decoding into memory never "
        "touched before, which the kernel commits page by page) over ceiling_decode_out (decoding "
        "into warm memory): how close a pass that keeps its data can come to one that does not, "
        "where decoding is all the work.",
        "",
        "| condition | case | insitu cold MB/s | insitu_stream cold MB/s | insitu / stream | bound (keep / out) |",
        "|---|---|--:|--:|--:|--:|",
        *rows,
        "",
    ]


def _checks(results: dict[str, Any]) -> list[str]:
    checks = results.get("checks", {})
    out = ["### Checks", ""]
    mism = checks.get("checksum_mismatches", [])
    if mism:
        out.append(
            f"**{len(mism)} runs delivered data whose checksum disagrees with the rest of their case:**"
        )
        out.append("")
        out += [
            f"- {m['condition']} {m['case']} {m['engine']} [{m['tuning_label']}] repeat {m['repeat']}: "
            f"{m['checksum']!r} (others: {m['reference']!r})"
            for m in mism
        ]
    else:
        out.append("- Checksums agree across engines for every case (relative tolerance 1e-6).")
    out += _memory_checks(results)
    errors = checks.get("errors", [])
    if errors:
        out.append(f"- {len(errors)} runs failed or timed out:")
        out += [
            f"  - {e['condition']} {e['case']} {e['engine']} [{e['tuning_label']}] repeat {e['repeat']}: "
            f"{e['status']}: {(e.get('error') or '?')[:200]}"
            for e in errors[:20]
        ]
        if len(errors) > 20:
            out.append(f"  - … and {len(errors) - 20} more (see the JSON)")
    unsupported = sorted(
        {
            (r["engine"], r["case"], r["condition"], r.get("reason", ""))
            for r in results.get("rows", [])
            if r["status"] == "unsupported"
        }
    )
    for engine, case, cond, reason in unsupported:
        out.append(f"- unsupported: {engine} on {case} ({cond}): {reason}")
    truncated = sorted(
        {(b["engine"], b["case"], b["condition"]) for b in results.get("best", []) if b.get("truncated")}
    )
    if truncated:
        settings = results.get("settings", {})
        caps = settings.get("engine_max_seconds") or {}
        out.append(
            "- stopped early at the time cap (rates over the samples delivered): "
            + ", ".join(
                f"{e} {c} ({k}, {caps.get(e, settings.get('max_seconds'))} s)" for e, c, k in truncated
            )
        )
    out += [f"- {n}" for n in results.get("notes", [])]
    out.append("")
    return out


def _insitu_entries(
    results: dict[str, Any], best: dict[tuple[str, str, str], dict[str, Any]], key: tuple[str, str, str]
) -> list[dict[str, Any]]:
    """The summary entries of ``key`` (condition, case, engine) to hold to a memory bound: its
    untuned run (``defaults``) and its best tuning (from ``best``), each once."""
    entries = [
        s
        for s in results.get("summary", [])
        if (s["condition"], s["case"], s["engine"]) == key and s["tuning_label"] == "defaults"
    ]
    top = best.get(key)
    if top is not None and all(e["tuning_label"] != top["tuning_label"] for e in entries):
        entries.append(top)
    return entries


def _memory_checks(results: dict[str, Any]) -> list[str]:
    """Markdown lines, one per condition and case where insitu's working memory (its defaults or its
    best tuning; insitu_stream's too) is above insitubatch's best-tuned peak RSS. Entries without a
    working memory (older results files) or without an insitubatch peak are not judged."""
    best = _best(results)
    out: list[str] = []
    compared = 0
    for cond, case in _order_pairs({(k[0], k[1]) for k in best}):
        peer = best.get((cond, case, "insitubatch"), {})
        peak = peer.get("peak_rss_MB")
        if not peak:
            continue
        over = []
        for engine in INSITU_ENGINES:
            for e in _insitu_entries(results, best, (cond, case, engine)):
                work = e.get("work_MB")
                if work is None:
                    continue
                compared += 1
                if work > peak:
                    over.append(f"{engine} [{e['tuning_label']}] {work:,.0f} MB ({work / peak:.2f}×)")
        if over:
            out.append(
                f"- {cond} {case}: working memory above insitubatch's best peak RSS of {peak:,.0f} MB "
                f"[{peer.get('tuning_label', '?')}]: " + ", ".join(over)
            )
    if not out and compared:
        out.append("- insitu's working memory is at or below insitubatch's best peak RSS in every case.")
    return out


def _order_pairs(pairs: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """(condition, case) pairs in the report's order: conditions, then cases, unknown ones last."""

    def rank(name: str, order: tuple[str, ...]) -> tuple[int, str]:
        return (order.index(name) if name in order else len(order), name)

    return sorted(pairs, key=lambda p: (rank(p[0], CONDITION_ORDER), rank(p[1], CASE_ORDER)))


def header(results: dict[str, Any]) -> str:
    s = results.get("settings", {})
    m = results.get("machine", {})
    return (
        f"{results.get('mode', '?')} mode: {s.get('samples')} samples per case (181×360 float32 fields, zstd), "
        f"batch {s.get('batch_size')}, medians of {s.get('repeats')} fresh processes per engine and tuning; "
        f"{m.get('cpus')} CPUs ({m.get('cpu_model', '?')}), {m.get('ram_GB')} GB RAM. "
        "MB/s counts delivered sample bytes; TTFB is from construction (store opening included) to the "
        "first batch; peak RSS sums the runner and all its child processes; "
        f"{WORKING_MEMORY}: what a cold pass holds besides the decoded chunks kept for later epochs "
        "(insitu's pool; the other engines report no cache bytes, so their working memory is their peak). "
        "The column working / insitubatch peak divides insitu's working memory by the best "
        "insitubatch's peak RSS of the same case and condition. The vs columns divide MB/s by the "
        "best insitubatch, the best worker stack (xbatcher, workers, chunkaware), the best per-sample "
        "stack (xbatcher, workers: one read per sample, so a chunk is decoded once per sample in it), "
        "the decode ceiling (decoding into a reused, cache-resident buffer), the decode+write ceiling "
        "(decoding into memory beyond the caches, as any loader's output must go) of the same case, the "
        "keep ceiling (what a cold pass that keeps the epoch does at least: on local disk decoding into "
        "fresh memory, ceiling_decode_keep; through any other store fetching every chunk through it as "
        "well, ceiling_fetch_keep of that condition) and the same engine's local-disk throughput. insitu runs with its defaults (cache_budget_bytes="
        "'auto'), insitu_stream with no cache (cache_budget_bytes=0).\n"
    )


def machine_text(results: dict[str, Any]) -> str:
    m = results.get("machine", {})
    lines = [
        f"- Machine: {m.get('cpus')} CPUs, {m.get('cpu_model', 'unknown CPU')}, {m.get('ram_GB')} GB RAM, "
        f"{m.get('platform', '')}",
    ]
    by_python: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for engine, info in (results.get("interpreters") or {}).items():
        if info:
            by_python.setdefault(info["executable"], (info, []))[1].append(engine)
    for info, engines in by_python.values():
        pkgs = ", ".join(f"{k} {v}" for k, v in sorted(info.get("packages", {}).items()))
        lines.append(f"- Python {info['python']} ({', '.join(_order(engines, ENGINE_ORDER))}): {pkgs}")
    lines.append(f"- Command: `{results.get('command', '')}` ({results.get('created', '')})")
    if results.get("wall_s"):
        lines.append(f"- Wall time of the run: {results['wall_s']:.0f} s")
    return "\n".join(lines) + "\n"


# --- plots ----------------------------------------------------------------------------------------


def plots(results: dict[str, Any], img_dir: Path) -> list[Path]:
    """PNGs: throughput vs samples per chunk, TTFB, peak RSS (split into working memory and the
    cache where a run reports one), cold vs warm, insitu's in-flight limit over an epoch. Returns the
    files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img_dir.mkdir(parents=True, exist_ok=True)
    best = _best(results)
    written: list[Path] = []
    cases = results.get("cases", {})

    # Throughput vs samples per chunk (single-variable cases), one panel per condition. The decode
    # ceiling is store-free (measured once per case) and drawn on every panel; away from local disk
    # the worker stacks are one line, the best of them per case.
    spectrum = [c for c in ("c1", "c2", "c8", "c32") if c in cases]
    conds = [c for c in ("local", "latency", "http") if any(k[0] == c and k[1] in spectrum for k in best)]
    if spectrum and conds:
        spc = {c: cases[c]["samples_per_chunk"] for c in spectrum}
        decode = {k: b["MBps"] for (_, k, e), b in best.items() if e == "ceiling_decode" and b["MBps"]}
        fig, axes = plt.subplots(1, len(conds), figsize=(6.5 * len(conds), 4.8), squeeze=False)
        handles: dict[str, Any] = {}
        for ax, cond in zip(axes[0], conds, strict=True):
            lines: dict[str, list[tuple[int, float]]] = {}
            for (c, k, e), b in best.items():
                if c != cond or k not in spectrum or not b["MBps"] or e == "ceiling_decode":
                    continue
                name = "best worker stack" if cond != "local" and e in WORKER_STACKS else e
                pts = lines.setdefault(name, [])
                prev = next((i for i, (x, _) in enumerate(pts) if x == spc[k]), None)
                if prev is None:
                    pts.append((spc[k], b["MBps"]))
                elif b["MBps"] > pts[prev][1]:
                    pts[prev] = (spc[k], b["MBps"])
            lines["ceiling_decode"] = [(spc[k], v) for k, v in decode.items() if k in spectrum]
            for name in _order(list(lines), (*ENGINE_ORDER[:2], "best worker stack", *ENGINE_ORDER[2:])):
                if not lines[name]:
                    continue
                xs, ys = zip(*sorted(lines[name]), strict=True)
                style = "--" if name in CEILINGS else "-"
                color = COLORS.get(name, "tab:cyan")
                label = "ceiling_rawget (stored bytes)" if name == "ceiling_rawget" else name
                (handles[label],) = ax.plot(xs, ys, style, marker="o", label=label, color=color)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(sorted(spc.values()))
            ax.set_xticklabels([str(v) for v in sorted(spc.values())])
            ax.set_xlabel("samples per chunk")
            ax.set_ylabel("MB/s (best tuning, median)")
            ax.set_title(cond)
            ax.grid(True, which="both", alpha=0.3)
        fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=6, fontsize=8)
        fig.tight_layout(rect=(0, 0.1, 1, 1))
        written.append(_save(fig, img_dir / "throughput_vs_chunk.png"))
        plt.close(fig)

    local_cases = _order(list({k[1] for k in best if k[0] == "local"}), CASE_ORDER)
    for metric, name, ylabel, log, overlay in (
        ("ttfb_ms", "ttfb.png", "time to first batch, ms", True, None),
        ("peak_rss_MB", "memory.png", "peak RSS of the process tree, MB", False, "work_MB"),
    ):
        # On memory.png the solid part of a bar is working memory, the hatched top the cache.
        engines = _order(
            [e for e in {k[2] for k in best if k[0] == "local"} if e not in CEILINGS], ENGINE_ORDER
        )
        if local_cases and engines:
            written.append(
                _bars(
                    plt,
                    best,
                    "local",
                    local_cases,
                    engines,
                    metric,
                    img_dir / name,
                    ylabel,
                    log,
                    overlay,
                    "cache at the end of the cold epoch (hatched)",
                )
            )

    best_warm = _best_warm(results)
    warm_engines = [
        e for e in ("insitu", "insitu_stream", "insitubatch") if any(k[2] == e for k in best_warm)
    ]
    warm_cases = [
        c
        for c in local_cases
        if any(best_warm.get(("local", c, e), {}).get("warm_MBps") for e in warm_engines)
    ]
    if warm_cases:
        fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(warm_cases) + 2), 4.5))
        width = 0.8 / (2 * len(warm_engines))
        i = 0
        for engine in warm_engines:
            for kind, key, hatch in (("cold", "MBps", ""), ("warm", "warm_MBps", "//")):
                ys = [best_warm.get(("local", c, engine), {}).get(key) or 0 for c in warm_cases]
                xs = [j + (i - (2 * len(warm_engines) - 1) / 2) * width for j in range(len(warm_cases))]
                ax.bar(
                    xs,
                    ys,
                    width,
                    label=f"{engine} {kind}",
                    color=COLORS[engine],
                    hatch=hatch,
                    alpha=1.0 if kind == "cold" else 0.6,
                )
                i += 1
        ax.set_xticks(range(len(warm_cases)))
        ax.set_xticklabels(warm_cases)
        ax.set_ylabel("MB/s (local)")
        ax.set_title("cold vs warm epoch")
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
        fig.tight_layout()
        written.append(_save(fig, img_dir / "cold_warm.png"))
        plt.close(fig)

    inflight = _inflight_plot(plt, results, img_dir / "inflight.png")
    if inflight is not None:
        written.append(inflight)
    return written


class Trajectory(NamedTuple):
    """insitu's in-flight limit over one cold epoch, as one run recorded it."""

    label: str  # the run's tuning ("defaults" when untuned)
    points: list[list[float]]  # [at_s, limit] per change, at_s from the first completed read
    end_s: float  # the epoch's end on the same clock, its earliest bound (see _epoch_end)


def _trajectories(results: dict[str, Any]) -> dict[str, dict[str, Trajectory]]:
    """condition -> case -> insitu's in-flight limit over one cold epoch, from the first repeat of
    its untuned run, or (a sweep has none) of its best tuning. Runs without a trajectory (local
    files, results from before it was recorded) are left out."""
    best = _best(results)
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results.get("rows", []):
        if r.get("engine") == "insitu" and r.get("status") == "ok" and _trajectory(r):
            runs.setdefault((r["condition"], r["case"]), []).append(r)
    out: dict[str, dict[str, Trajectory]] = {}
    for (cond, case), rs in runs.items():
        chosen = [r for r in rs if not r.get("tuning")] or [
            r for r in rs if r["tuning_label"] == best.get((cond, case, "insitu"), {}).get("tuning_label")
        ]
        if chosen:
            first = min(chosen, key=lambda r: r.get("repeat", 0))
            points = _trajectory(first)
            out.setdefault(cond, {})[case] = Trajectory(
                first["tuning_label"], points, _epoch_end(first, points)
            )
    return out


def _trajectory(row: dict[str, Any]) -> list[list[float]]:
    """A run's recorded in-flight limits, ``[[at_s, limit], ...]`` (empty when it has none)."""
    return list((row.get("extra") or {}).get("inflight_trajectory") or [])


def _epoch_end(row: dict[str, Any], points: list[list[float]]) -> float:
    """When the run's cold epoch ended, on its trajectory's clock (from the first completed read).

    The epoch is timed from construction and the first read completes before the first batch, so
    ``elapsed_s - ttfb_s`` is the earliest the end can be: the last limit is drawn until then, never
    past the epoch (and at least to the last change)."""
    last = points[-1][0]
    elapsed, ttfb = row.get("elapsed_s"), row.get("ttfb_s")
    if elapsed is None or ttfb is None:
        return last
    return max(last, elapsed - ttfb)


def _inflight_plot(plt: Any, results: dict[str, Any], path: Path) -> Path | None:
    """insitu's in-flight limit against seconds into the cold epoch: a panel per condition, a line per
    case. None (nothing drawn) when no run recorded a trajectory."""
    found = _trajectories(results)
    conds = _order(list(found), CONDITION_ORDER)
    if not conds:
        return None
    from matplotlib.ticker import ScalarFormatter

    # At most three panels a row: five remote conditions side by side would be too wide to read.
    ncols = min(3, len(conds))
    nrows = -(-len(conds) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.5 * ncols, 4.5 * nrows), squeeze=False)
    for ax in axes.flat[len(conds) :]:
        ax.set_visible(False)
    cmap = plt.get_cmap("tab10")
    all_cases = _order(list({c for by_case in found.values() for c in by_case}), CASE_ORDER)
    for ax, cond in zip(axes.flat, conds, strict=False):
        for case in _order(list(found[cond]), CASE_ORDER):
            t = found[cond][case]
            xs = [p[0] for p in t.points]
            ys = [p[1] for p in t.points]
            # Each limit holds from its change until the next, and the last one until the epoch
            # ends: a step drawn after each point, with a marker at each change.
            name = case if t.label == "defaults" else f"{case} ({t.label})"
            color = cmap(all_cases.index(case) % 10)  # a case keeps its colour across panels
            ax.step([*xs, t.end_s], [*ys, ys[-1]], where="post", label=name, color=color)
            ax.plot(xs, ys, ".", markersize=4, color=color)
        ax.set_yscale("log", base=2)  # doubling and halving are equal steps
        ax.yaxis.set_major_formatter(ScalarFormatter())  # 32, 64, ... rather than 2^5, 2^6, ...
        ax.set_xlabel("seconds into the cold epoch (from the first completed read)")
        ax.set_ylabel("requests in flight allowed")
        ax.set_title(f"insitu in-flight limit ({cond})")
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    out = _save(fig, path)
    plt.close(fig)
    return out


def _bars(
    plt: Any,
    best: dict[tuple[str, str, str], dict[str, Any]],
    cond: str,
    cases: list[str],
    engines: list[str],
    metric: str,
    path: Path,
    ylabel: str,
    log: bool,
    overlay: str | None = None,
    overlay_label: str = "",
) -> Path:
    """Grouped bars of ``metric`` per case, one per engine. ``overlay``: a second metric, known and
    smaller than the first, splits a bar: the part above it is hatched (memory.png: working memory,
    with the engine's cache hatched on top), labelled ``overlay_label`` in the legend."""
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(cases) + 2), 4.5))
    width = 0.8 / len(engines)
    hatched = False
    for i, engine in enumerate(engines):
        ys = [best.get((cond, c, engine), {}).get(metric) or 0 for c in cases]
        xs = [j + (i - (len(engines) - 1) / 2) * width for j in range(len(cases))]
        ax.bar(xs, ys, width, label=engine, color=COLORS.get(engine))
        if overlay is None:
            continue
        # Hatch the part above the overlay (the cache), so engines without one keep a plain bar.
        inner = [best.get((cond, c, engine), {}).get(overlay) for c in cases]
        shown = [(x, v, y) for x, v, y in zip(xs, inner, ys, strict=True) if v is not None and 0 < v < y]
        if shown:
            ax.bar(
                [x for x, _, _ in shown],
                [y - v for _, v, y in shown],
                width,
                bottom=[v for _, v, _ in shown],
                fill=False,
                hatch="///",
                edgecolor="black",
                linewidth=0,
                label=None if hatched else overlay_label,
            )
            hatched = True
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(cases)
    ax.set_ylabel(ylabel)
    ax.set_title(f"{ylabel} ({cond}, best tuning)")
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=8, ncol=2)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    out = _save(fig, path)
    plt.close(fig)
    return out


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    return path


# --- outputs --------------------------------------------------------------------------------------


def write_report(results: dict[str, Any], out: Path, img_dir: Path) -> str:
    """``out/suite.md`` (returned) and the plots in ``img_dir``."""
    images = plots(results, img_dir)
    text = (
        "## Benchmark results\n\n" + header(results) + "\n" + machine_text(results) + "\n" + tables(results)
    )
    if images:
        rel = [os.path.relpath(p, out) for p in images]
        text += "\n" + "\n".join(_image_md(Path(r)) for r in rel)
    text = portable_paths(text)
    (out / "suite.md").write_text(text)
    return text


def update_docs(results: dict[str, Any], target: Path, img_dir: Path) -> bool:
    """Rewrite the marked results section of ``target``; False when the file or markers are missing."""
    if not target.exists():
        return False
    doc = target.read_text()
    if START not in doc or END not in doc:
        return False
    # Only plots present in img_dir: a link to a missing image fails the strict docs build (a
    # figure with nothing to draw, such as inflight.png without remote runs, is not written).
    images = [p for p in (img_dir / n for n in DOC_IMAGES) if p.exists()]
    date = (results.get("created") or datetime.date.today().isoformat())[:10]
    body = [
        f"Measured {date}. " + header(results),
        machine_text(results),
        tables(results),
        *[_image_md(Path(os.path.relpath(p, target.parent))) for p in images],
    ]
    # Commands in older results files, and error messages quoting source files, carry absolute paths.
    section = START + "\n" + portable_paths("\n".join(body).rstrip()) + "\n" + END
    new = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: section, doc, count=1, flags=re.S)
    target.write_text(new)
    return True


def _image_md(rel: Path) -> str:
    """Markdown for one plot at ``rel``, with its caption (as a paragraph under it) when it has one."""
    caption = CAPTIONS.get(rel.name)
    return f"![{rel.stem}]({rel.as_posix()})\n" + (f"\n{caption}\n" if caption else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--out", type=Path, help="folder for suite.md (default: the results' folder)")
    ap.add_argument(
        "--docs", action="store_true", help="plots into docs/img/bench, rewrite docs/benchmarks.md"
    )
    args = ap.parse_args()
    results = json.loads(args.results.read_text())
    out = args.out or args.results.parent
    repo = Path(__file__).resolve().parents[2]
    img_dir = repo / "docs" / "img" / "bench" if args.docs else out / "img"
    print(write_report(results, out, img_dir))
    if args.docs and not update_docs(results, repo / "docs" / "benchmarks.md", img_dir):
        print("docs/benchmarks.md missing or without bench:results markers: left alone")


if __name__ == "__main__":
    main()
