"""Exact mid-epoch resume: stop after k batches, save, rebuild in a new process, continue."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import field, write_array

import insitu
from insitu.errors import ConfigError

BATCH = 5
BLOCK = 3  # chunks per block; 4 samples per chunk -> 12 samples per (full) block

# A script that builds the same dataset, optionally loads a state, and dumps what it yields.
CHILD = (
    textwrap.dedent(
        """
    import hashlib, json, sys
    import insitu
    root, shuffle, state_path, out_path = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4]
    store = insitu.open_store(root)
    geoms = insitu.open_geometries(store)
    manifest = insitu.SplitManifest.from_json(open(root + "/../manifest.json").read())
    ds = insitu.InSituDataset(store, manifest, batch_size=BATCH, block_chunks=BLOCK, shuffle=shuffle, seed=11)
    view = ds.train
    if state_path != "-":
        view.load_state_dict(json.load(open(state_path)))
    out = [[b.sample_indices.tolist(), hashlib.sha256(b["x"].tobytes()).hexdigest()] for b in view]
    json.dump({"batches": out, "epoch": ds.epoch}, open(out_path, "w"))
    ds.close()
    """
    )
    .replace("BATCH", str(BATCH))
    .replace("BLOCK", str(BLOCK))
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_array(tmp_path / "d", "x", field(64, (3, 4), seed=8), (4, 3, 4))
    store = insitu.open_store(tmp_path / "d")
    manifest = insitu.split_by_chunk(insitu.open_geometries(store)["x"], (0.75, 0.25))
    (tmp_path / "manifest.json").write_text(manifest.to_json())
    return tmp_path / "d"


def _run_child(root: Path, shuffle: bool, state: dict | None, tmp: Path) -> dict:
    state_path = "-"
    if state is not None:
        state_path = str(tmp / "state.json")
        Path(state_path).write_text(json.dumps(state))
    out = tmp / "out.json"
    subprocess.run(
        [sys.executable, "-c", CHILD, str(root), "1" if shuffle else "0", state_path, str(out)],
        check=True,
        env={**__import__("os").environ, "PYTHONPATH": ":".join(sys.path)},
    )
    return json.loads(out.read_text())


def _dataset(root: Path, shuffle: bool, budget: int | str = "auto") -> insitu.InSituDataset:
    store = insitu.open_store(root)
    manifest = insitu.SplitManifest.from_json((root.parent / "manifest.json").read_text())
    return insitu.InSituDataset(
        store,
        manifest,
        batch_size=BATCH,
        block_chunks=BLOCK,
        shuffle=shuffle,
        seed=11,
        cache_budget_bytes=budget,
    )


@pytest.mark.slow
@pytest.mark.parametrize("shuffle", [True, False])
# Blocks hold 8, 12, 12, 12... samples (the first is one batch's worth of chunks), so k=4 stops at
# sample 20, a block boundary; k=2 and k=7 stop inside a block.
@pytest.mark.parametrize("k", [2, 4, 7])
def test_resume_in_a_new_process_continues_exactly(root: Path, tmp_path: Path, shuffle: bool, k: int) -> None:
    full = _run_child(root, shuffle, None, tmp_path)["batches"]
    with _dataset(root, shuffle) as ds:
        ds.set_epoch(0)
        it = iter(ds.train)
        head = [next(it) for _ in range(k)]
        state = ds.train.state_dict()  # a fresh view object: state lives with the dataset
        it.close()
        if k == 4:
            assert int(ds.train.plan().order.block_starts[2]) == k * BATCH
    assert (state["epoch"], state["batches_done"]) == (0, k)
    assert [b.sample_indices.tolist() for b in head] == [b[0] for b in full[:k]]
    rest = _run_child(root, shuffle, state, tmp_path)
    assert rest["epoch"] == 0
    assert rest["batches"] == full[k:]


@pytest.mark.parametrize("budget", ["auto", 0], ids=["pooled", "streamed"])
def test_resume_at_a_block_boundary_and_at_the_end(root: Path, budget: int | str) -> None:
    source = np.asarray(zarr.open_array(root / "x", mode="r")[...])
    with _dataset(root, True, budget) as ds:
        ds.set_epoch(3)
        full = [b.sample_indices.tolist() for b in ds.train]
        plan = ds.train.plan()
        boundary = int(plan.order.block_starts[2]) // BATCH  # a batch that starts in block 2
        inside = boundary + 1  # one that starts inside a block
        for k in (boundary, inside, len(full) - 1, len(full)):
            state = ds.train.state_dict()
            state["batches_done"] = k
            ds.train.load_state_dict(state)
            rest = list(ds.train)
            assert [b.sample_indices.tolist() for b in rest] == full[k:]
            for b in rest:
                np.testing.assert_array_equal(b["x"], source[b.sample_indices])
        # Without a loaded state, iterating again replays the whole epoch.
        assert [b.sample_indices.tolist() for b in ds.train] == full


@pytest.mark.parametrize("budget", ["auto", 0], ids=["pooled", "streamed"])
def test_resume_loads_only_the_remaining_blocks(root: Path, budget: int | str) -> None:
    with _dataset(root, False, budget) as ds:
        state = ds.train.state_dict()
        state["batches_done"] = 6  # 30 samples done
        ds.train.load_state_dict(state)
        plan = ds.train.plan()
        first = plan.block_of(30)
        remaining_chunks = {c for b in plan.order.block_chunks[first:] for c in b}
        batches = list(ds.train)
        assert batches[0].sample_indices[0] == 30
        # Blocks whose samples were all handed out before the stop are never read.
        loaded = ds.stats["slabs_loaded"] + ds.stats["slabs_streamed"]
        assert loaded == len(remaining_chunks) < 12


def test_mismatched_state_is_refused(root: Path) -> None:
    with _dataset(root, True) as ds:
        state = ds.train.state_dict()
    store = insitu.open_store(root)
    manifest = insitu.SplitManifest.from_json((root.parent / "manifest.json").read_text())
    cases = [
        (
            dict(batch_size=BATCH + 1),
            "batch_size=5 in the state, 6 here; batches done are counted in batches",
        ),
        (dict(seed=12), "seed"),
    ]
    for kwargs, match in cases:
        params = dict(batch_size=BATCH, block_chunks=BLOCK, shuffle=True, seed=11)
        params.update(kwargs)
        with (
            insitu.InSituDataset(store, manifest, **params) as other,
            pytest.raises(ConfigError, match=match),
        ):
            other.train.load_state_dict(state)
    other_manifest = insitu.split_by_chunk(insitu.open_geometries(store)["x"], (0.5, 0.5))
    with insitu.InSituDataset(store, other_manifest, batch_size=BATCH, block_chunks=BLOCK, seed=11) as other:
        with pytest.raises(ConfigError, match="manifest"):
            other.train.load_state_dict(state)
        with pytest.raises(ConfigError, match="not an insitu view state"):
            other.train.load_state_dict({"epoch": 0})


@pytest.mark.parametrize("uneven", ["drop", "pad"])
def test_ranks_equal_batches_and_padding_is_marked(root: Path, uneven: str) -> None:
    store = insitu.open_store(root)
    geoms = insitu.open_geometries(store)
    # 16 chunks of 4, the range clipped so the last holds 2 samples: the ranks are uneven.
    manifest = insitu.split_by_chunk(geoms["x"], (1.0,), sample_range=(0, 62))
    src = np.asarray(__import__("zarr").open_array(store, path="x", mode="r")[...])
    with insitu.InSituDataset(store, manifest, batch_size=4, uneven=uneven, seed=2) as ds:
        per_rank = []
        for rank in range(3):
            view = ds.train.shard(rank, 3)
            batches = list(view)
            assert len(batches) == len(view)
            real = []
            for b in batches:
                np.testing.assert_array_equal(b["x"], src[b.sample_indices])
                mask = b.valid if b.valid is not None else np.ones(b.size, bool)
                real.extend(b.sample_indices[mask].tolist())
            per_rank.append((len(batches), real))
    assert len({n for n, _ in per_rank}) == 1, "every rank yields the same number of batches"
    everything = [i for _, real in per_rank for i in real]
    assert len(everything) == len(set(everything)), "no sample twice across ranks"
    if uneven == "pad":
        assert sorted(everything) == list(range(62)), "padding keeps every sample"


def test_for_rank_shards_once_and_refuses_a_different_sharding(root: Path) -> None:
    with _dataset(root, True) as ds:
        view = ds.train.for_rank(1, 2, source="the launcher")
        assert (view.rank, view.world_size) == (1, 2)
        assert view.for_rank(1, 2) is view
        assert ds.train.for_rank(0, 1).world_size == 1
        with pytest.raises(ConfigError, match="sharded as rank 1 of 2, but the launcher says rank 0 of 2"):
            view.for_rank(0, 2, source="the launcher")
