"""Rendering ``insitu bench``'s results: progress lines, the report as tables or as JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from insitu.cli.bench.settings import AXES
from insitu.cli.common import print_table

COLUMNS = [
    "",
    "max_inflight",
    "block_chunks",
    "decode_threads",
    "samples/s",
    "MB/s",
    "spread",
    "TTFB ms",
    "need MiB",
    "pool MiB",
    "RSS+ MiB",
    "runs",
    "",
]


def report_json(report: Mapping[str, Any]) -> str:
    """The report as JSON, as ``--out`` and ``--json`` write it."""
    return json.dumps(report, indent=1, default=str)


def setting_text(setting: Mapping[str, int]) -> str:
    """A setting as ``max_inflight=.. block_chunks=.. decode_threads=..``."""
    return " ".join(f"{k}={setting[k]}" for k in AXES)


def run_text(r: Mapping[str, Any]) -> str:
    """One timed run on one progress line."""
    stall = "" if r["stall_fraction"] is None else f", stall {r['stall_fraction']:.2f}"
    return (
        f"TTFB {r['ttfb_s'] * 1e3:.0f} ms, {r['samples_per_s']:.0f} samples/s, {r['MBps']:.1f} MB/s"
        f"{stall} ({r['samples']} samples, {r['epochs']} cold epoch(s), {r['seconds']:.2f} s)"
    )


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


def render(report: Mapping[str, Any]) -> str:
    """The report as text: the baseline, the swept settings, the recommendation."""
    lines = _baseline_lines(report)
    lines += _sweep_lines(report)
    lines += _recommendation_lines(report)
    for note in report["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def _baseline_lines(report: Mapping[str, Any]) -> list[str]:
    """The store, the data and the run with the engine's defaults."""
    d, s, b = report["data"], report["settings"], report["baseline"]
    kind = "local files" if report["local"] else "remote"
    lines = [
        f"store: {report['store']} ({kind})",
        f"data: {', '.join(d['batched'])} along {d['sample_dim'] or 'axis 0'}, {d['samples']} samples in "
        f"{d['chunks']} chunk(s); batch {s['batch_size']}"
        + (f", {s['step_ms']:g} ms simulated step per batch" if s["step_ms"] else ""),
        "",
        f"baseline, the engine's defaults ({setting_text(report['defaults'])}):",
    ]
    if b["error"] is not None:
        lines.append(f"  failed: {b['error']}")
    else:
        lines += [
            f"  time to first batch  {b['ttfb_s'] * 1e3:.0f} ms after construction "
            f"({b['ttfb_from_open_s'] * 1e3:.0f} ms from opening the store)",
            f"  throughput           {b['samples_per_s']:.0f} samples/s, {b['MBps']:.1f} MB/s",
            f"  stall fraction       {b['stall_fraction']:.2f} (time waiting for a batch / time iterating)"
            + ("" if s["step_ms"] else "; nothing trains here: model a step with --step-ms"),
        ]
    return lines


def _sweep_lines(report: Mapping[str, Any]) -> list[str]:
    """The table of swept settings, one row each."""
    s = report["settings"]
    lines = [
        "",
        f"sweep: {len(report['points'])} setting(s) x {s['repeats']} round(s) of {s['run_seconds']:.2f} s, "
        "a fresh dataset each, rounds in shuffled order:",
    ]
    return lines + print_table(COLUMNS, [_point_row(p) for p in report["points"]])


def _point_row(p: Mapping[str, Any]) -> list[Any]:
    mark = "*" if p["recommended"] else "=" if p["tied"] else ""
    st = p["setting"]
    if p["error"] is not None or not p["runs"]:
        why = p["error"] or "not run"
        return [mark, *(st[a] for a in AXES), "failed", "", "", "", "", "", "", why[:60]]
    return [
        mark,
        *(st[a] for a in AXES),
        f"{p['samples_per_s']:.0f}",
        f"{p['MBps']:.1f}",
        "-" if p["spread"] is None else f"{p['spread']:.0%}",
        f"{p['ttfb_s'] * 1e3:.0f}",
        _mib(p["need_bytes"]),
        _mib(p["peak_pool_bytes"]),
        _mib(p["peak_rss_growth_bytes"]),
        len(p["runs"]),
        "default" if p["is_default"] else "",
    ]


def _recommendation_lines(report: Mapping[str, Any]) -> list[str]:
    """The noise, the tie rule, the recommended setting and how it compares with the defaults."""
    n = report["noise"]
    lines = [""]
    if n["median_spread"] is not None:
        lines.append(
            f"noise: the repeats of one setting differ by {n['median_spread']:.0%} (median over settings; "
            f"worst {n['max_spread']:.0%})"
        )
    rec = report["recommendation"]
    if rec is None:
        lines.append("no recommendation: every setting failed")
    else:
        widened = " (the best's own spread)" if rec["tolerance"] > n["tolerance"] else ""
        lines.append(
            f"settings within {rec['tolerance']:.0%}{widened} of the best throughput count as tied ('=')"
        )
        lines.append(
            f"* recommended: {setting_text(rec['setting'])} ({rec['samples_per_s']:.0f} samples/s, "
            f"{rec['MBps']:.1f} MB/s): {rec['reason']}"
        )
        if "vs_default" in rec:
            gain = rec["vs_default"]
            verdict = (
                "within the noise: the defaults are as good here"
                if abs(gain) <= rec["tolerance"]
                else f"{gain:+.0%} over the defaults"
            )
            lines.append(f"  versus the defaults: {verdict}")
    lines.append(
        "  need: pool bytes the setting pins at most (its blocks and read-ahead); pool: peak pool "
        "bytes held; RSS+: peak growth of this process's memory during the run"
    )
    return lines
