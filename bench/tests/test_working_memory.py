"""Working memory in the suite: peak RSS of the process tree - the bytes the engine's cache holds at
the end of the cold epoch (0 for engines without a cache). The runner's cache bytes, the driver's
``work_MB`` and its medians, the report's columns and check, and older results files without it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "suite"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "suite" / "engines"))

import report
from common import Case
from driver import METRICS, derive, summarize, working_memory_MB
from run_insitu import cold_cache_bytes

CASE = Case(name="c8", root="unused", variables=["t2m"], n_samples=64, samples_per_chunk=8, shape=[4, 4])
MB = 1_000_000


def _run(engine: str, peak: int, extra: dict[str, Any] | None = None, repeat: int = 0) -> dict[str, Any]:
    """One ok row as ``run_one`` leaves it: the runner's result merged with the driver's peak."""
    row: dict[str, Any] = {
        "condition": "local",
        "case": "c8",
        "engine": engine,
        "tuning": {},
        "tuning_label": "defaults",
        "repeat": repeat,
        "status": "ok",
        "samples": CASE.samples_per_epoch,
        "bytes": CASE.samples_per_epoch * CASE.sample_nbytes,
        "elapsed_s": 1.0,
        "ttfb_s": 0.1,
        "peak_rss_tree": peak,
        "wall_s": 2.0,
    }
    if extra is not None:
        row["extra"] = extra
    return row


def _entry(
    engine: str, peak: float, work: float | None, *, label: str = "defaults", cond: str = "local"
) -> dict:
    """A summary/best entry; ``work=None`` leaves ``work_MB`` out, as in results from before it."""
    entry: dict[str, Any] = {
        "condition": cond,
        "case": "c8",
        "engine": engine,
        "tuning_label": label,
        "statuses": ["ok"],
        "samples_per_s": 1000.0,
        "MBps": 500.0,
        "ttfb_ms": 10.0,
        "peak_rss_MB": peak,
    }
    if work is not None:
        entry["work_MB"] = work
    return entry


def _results(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {"settings": {}, "summary": entries, "best": entries}


def _table_row(text: str, engine: str) -> dict[str, str]:
    """The first per-condition table row of ``engine``, cells keyed by the table's columns."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(report.CONDITION_COLUMNS) and cells[1] == engine:
            return dict(zip(report.CONDITION_COLUMNS, cells, strict=True))
    raise AssertionError(f"no table row for {engine}")


def test_the_runner_reads_the_pools_resident_bytes() -> None:
    assert cold_cache_bytes({"resident_bytes": 3 * 2**20, "budget_bytes": 2**30}) == 3 * 2**20
    assert cold_cache_bytes({"resident_bytes": 0}) == 0  # insitu_stream: nothing kept
    assert cold_cache_bytes({}) is None


def test_work_is_the_peak_less_the_cache_and_the_peak_without_one() -> None:
    cached = _run("insitu", 900 * MB, {"cache_bytes": 600 * MB, "stall_fraction": 0.1})
    plain = _run("xbatcher", 400 * MB, {"num_workers": 2})
    bare = _run("naive", 300 * MB)  # a runner with no extra at all
    for row in (cached, plain, bare):
        derive(row, CASE)
    assert cached["peak_rss_MB"] == 900.0
    assert cached["work_MB"] == 300.0
    assert plain["work_MB"] == plain["peak_rss_MB"] == 400.0
    assert bare["work_MB"] == 300.0
    # Reported without a value: unknown, not a cache of zero.
    assert working_memory_MB(_run("insitu", 900 * MB, {"cache_bytes": None})) is None


def test_work_has_its_median_like_the_other_metrics() -> None:
    assert "work_MB" in METRICS
    rows = [
        _run("insitu", peak * MB, {"cache_bytes": cache * MB}, repeat=i)
        for i, (peak, cache) in enumerate([(900, 600), (1000, 600), (950, 500)])
    ]
    for row in rows:
        derive(row, CASE)
    summary, best = summarize(rows)
    assert summary[0]["work_MB"] == 400.0  # median of 300, 400, 450
    assert best[0]["work_MB"] == 400.0  # the best tuning carries it into the report


def test_the_table_shows_working_memory_beside_the_peak_and_insitus_ratio() -> None:
    text = report.tables(
        _results(
            [
                _entry("insitu", 900.0, 300.0),
                _entry("insitu_stream", 250.0, 250.0),
                _entry("insitubatch", 400.0, 400.0, label="blk=256"),
                _entry("xbatcher", 500.0, 500.0),
            ]
        )
    )
    columns = list(report.CONDITION_COLUMNS)
    assert columns.index("working MB") == columns.index("peak RSS MB (tree)") + 1
    assert "| peak RSS MB (tree) | working MB | working / insitubatch peak |" in text
    insitu = _table_row(text, "insitu")
    assert (insitu["peak RSS MB (tree)"], insitu["working MB"]) == ("900", "300")
    assert insitu["working / insitubatch peak"] == "0.75×"
    assert _table_row(text, "insitu_stream")["working / insitubatch peak"] == "0.62×"
    # Peers get no memory ratio; they keep their working memory column.
    assert _table_row(text, "xbatcher")["working / insitubatch peak"] == "–"
    assert _table_row(text, "xbatcher")["working MB"] == "500"
    assert report.WORKING_MEMORY in report.header({})


def test_the_ratio_is_unknown_without_insitubatch() -> None:
    text = report.tables(_results([_entry("insitu", 900.0, 300.0), _entry("xbatcher", 500.0, 500.0)]))
    assert _table_row(text, "insitu")["working / insitubatch peak"] == "–"
    assert _table_row(text, "insitu")["working MB"] == "300"


def test_the_checks_name_each_case_where_insitu_works_above_insitubatchs_peak() -> None:
    entries = [
        _entry("insitu", 900.0, 500.0),  # defaults: above
        _entry("insitu", 700.0, 350.0, label="blk=64"),  # another tuning, not the best: not judged
        _entry("insitubatch", 400.0, 400.0, label="blk=256"),
        _entry("insitu", 600.0, 300.0, cond="latency"),
        _entry("insitubatch", 400.0, 400.0, cond="latency"),
    ]
    results = {"settings": {}, "summary": entries, "best": [entries[0], *entries[2:]]}
    text = report.tables(results)
    over = [ln for ln in text.splitlines() if "working memory above insitubatch" in ln]
    assert over == [
        "- local c8: working memory above insitubatch's best peak RSS of 400 MB [blk=256]: "
        "insitu [defaults] 500 MB (1.25×)"
    ]
    # Within the bound everywhere: one line says so.
    fine = report.tables(_results([_entry("insitu", 900.0, 300.0), _entry("insitubatch", 400.0, 400.0)]))
    assert "- insitu's working memory is at or below insitubatch's best peak RSS in every case." in fine


def test_the_best_tuning_is_judged_beside_the_defaults() -> None:
    defaults = _entry("insitu", 600.0, 300.0)
    tuned = _entry("insitu", 900.0, 450.0, label="blk=256 cache=512MiB")
    peer = _entry("insitubatch", 400.0, 400.0)
    results = {"settings": {}, "summary": [defaults, tuned, peer], "best": [tuned, peer]}
    (line,) = [ln for ln in report.tables(results).splitlines() if "working memory above" in ln]
    assert line.endswith("insitu [blk=256 cache=512MiB] 450 MB (1.12×)")


def test_results_from_before_working_memory_still_render(tmp_path: Path) -> None:
    old = _results(
        [
            _entry("insitu", 900.0, None),
            _entry("insitubatch", 400.0, None),
            _entry("xbatcher", 500.0, None),
        ]
    )
    text = report.tables(old)
    insitu = _table_row(text, "insitu")
    assert (insitu["peak RSS MB (tree)"], insitu["working MB"]) == ("900", "–")
    assert insitu["working / insitubatch peak"] == "–"
    assert _table_row(text, "insitubatch")["working MB"] == "–"
    assert "working memory" not in text.split("### Checks", 1)[1]  # nothing to judge
    written = report.plots(old, tmp_path)
    assert tmp_path / "memory.png" in written


def test_the_memory_plot_draws_with_working_memory(tmp_path: Path) -> None:
    results = _results([_entry("insitu", 900.0, 300.0), _entry("insitubatch", 400.0, 400.0)])
    assert tmp_path / "memory.png" in report.plots(results, tmp_path)
    assert "working memory" in report.CAPTIONS["memory.png"]
