"""Resume states on real data: read strictly, tied to the data they were made on, and loadable at
another world size (elastic resume) with every remaining sample delivered once."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from conftest import field, write_array

import insitu
from insitu.arrays.geometry import ArrayGeometry
from insitu.errors import ConfigError

BATCH = 3


@pytest.fixture
def root(tmp_path: Path) -> Path:
    write_array(tmp_path / "d", "x", field(96, (2, 3), seed=4), (4, 2, 3))  # 24 chunks of 4
    return tmp_path / "d"


def _dataset(root: Path, **kw) -> insitu.InSituDataset:
    store = insitu.open_store(root)
    manifest = insitu.split_by_chunk(insitu.open_geometries(store)["x"], (0.75, 0.25))
    params = dict(batch_size=BATCH, block_chunks=2, seed=5, cache_budget_bytes=0) | kw
    return insitu.InSituDataset(store, manifest, **params)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("batches_done", True),
        ("batches_done", 3.7),
        ("batches_done", "3"),
        ("batches_done", -1),
        ("epoch", "2"),
        ("epoch", None),
        ("epoch", 1.0),
    ],
)
def test_counts_must_be_integers(root: Path, key: str, value: object) -> None:
    with _dataset(root) as ds:
        state = ds.train.state_dict() | {key: value}
        with pytest.raises(
            ConfigError, match=rf"state\['{key}'\] must be a non-negative integer, got {value!r}"
        ):
            ds.train.load_state_dict(state)


def test_a_count_beyond_the_pass_is_refused_naming_its_length(root: Path) -> None:
    with _dataset(root) as ds:
        n = len(ds.train)
        state = ds.train.state_dict() | {"batches_done": 10**6}
        with pytest.raises(ConfigError, match=f"batches_done=1000000, .* is {n} batch"):
            ds.train.load_state_dict(state)
        ds.train.load_state_dict(state | {"batches_done": n})  # the end of the pass is a valid stop
        assert list(ds.train) == []


def test_a_state_made_on_another_store_of_the_same_shape_is_refused(root: Path, tmp_path: Path) -> None:
    other = tmp_path / "copy"
    shutil.copytree(root, other)
    with _dataset(root) as ds:
        state = ds.train.state_dict()
    with _dataset(other) as ds, pytest.raises(ConfigError, match=r"store=.*saved on another store"):
        ds.train.load_state_dict(state)
    # Other metadata (here an attribute) on the same store: the arrays differ.
    zarr.open_array(root / "x", mode="r+").attrs["units"] = "K"
    with _dataset(root) as ds, pytest.raises(ConfigError, match=r"arrays=.*metadata differ"):
        ds.train.load_state_dict(state)


def test_a_state_of_the_previous_format_still_loads(root: Path) -> None:
    with _dataset(root) as ds:
        full = [b.sample_indices.tolist() for b in ds.train]
        state = ds.train.state_dict() | {"format": "insitu.ViewState/1", "batches_done": 2}
        for key in ("store", "arrays", "resumed_from"):
            del state[key]
        ds.train.load_state_dict(state)
        assert [b.sample_indices.tolist() for b in ds.train] == full[2:]


@pytest.mark.parametrize(("w1", "w2", "uneven"), [(3, 2, "drop"), (2, 5, "pad"), (4, 1, "drop")])
def test_an_epoch_stopped_at_one_world_size_finishes_at_another(
    root: Path, w1: int, w2: int, uneven: str
) -> None:
    source = np.asarray(zarr.open_array(root / "x", mode="r")[...])
    with _dataset(root, uneven=uneven) as ds:
        ds.set_epoch(2)
        before: list[int] = []
        states = []
        for r in range(w1):  # the old ranks, in lockstep: 2 batches each
            view = ds.train.shard(r, w1)
            it = iter(view)
            for _ in range(2):
                b = next(it)
                before += b.sample_indices[b.valid if b.valid is not None else slice(None)].tolist()
            it.close()
            states.append(view.state_dict())
        epoch = set()
        for r in range(w1):
            view = ds.train.shard(r, w1)
            order = view.plan().order
            epoch |= set(order.anchors[: order.n_valid if order.n_valid >= 0 else None].tolist())
    with _dataset(root, uneven=uneven) as ds:
        ds.set_epoch(0)
        after: list[int] = []
        counts = set()
        for r in range(w2):
            view = ds.train.shard(r, w2)
            view.load_state_dict(states[0])  # one rank's state stands for all (lockstep)
            assert ds.epoch == 2
            batches = list(view)
            counts.add(len(batches))
            assert len(batches) == len(view)
            for b in batches:
                np.testing.assert_array_equal(b["x"], source[b.sample_indices])
                after += b.sample_indices[b.valid if b.valid is not None else slice(None)].tolist()
            state = view.state_dict()
            assert state["resumed_from"] == [{"world_size": w1, "batches_done": [2] * w1}]
            assert state["batches_done"] == len(batches)
            # The next epoch is an ordinary one at the new world size.
            ds.set_epoch(3)
            assert view.plan() is ds.plan("train", True, 3, rank=r, world_size=w2)
            ds.set_epoch(2)
        everything = before + after
        assert len(everything) == len(set(everything))
        assert len(counts) == 1
        missing = epoch - set(everything)
        assert len(missing) < (w2 * 4 if uneven == "drop" else 1)


def test_every_old_ranks_state_may_be_given(root: Path) -> None:
    """Ranks that did not move in lockstep: the list of their states says what each handed out."""
    with _dataset(root) as ds:
        before: list[int] = []
        states = []
        for r, k in enumerate([0, 3, 1]):
            view = ds.train.shard(r, 3)
            it = iter(view)
            before += [i for _ in range(k) for i in next(it).sample_indices.tolist()]
            it.close()
            states.append(view.state_dict())
        after = []
        for r in range(2):
            view = ds.train.shard(r, 2)
            view.load_state_dict(states[::-1])
            after += [i for b in view for i in b.sample_indices.tolist()]
        assert len(before + after) == len(set(before + after))
        assert len(set(before + after)) >= 72 - 2 * 4  # less than a chunk per new rank dropped
        with pytest.raises(ConfigError, match=r"one state per rank 0..2 .* got ranks \[0, 2\]"):
            ds.train.shard(0, 2).load_state_dict([states[0], states[2]])


@pytest.mark.parametrize(
    "fractions", [(1.0,), (0.8, 0.1, 0.1), (0.5, 0.5, 0.0)], ids=["one-split", "three", "an-empty-split"]
)
def test_manifest_digest_is_that_of_its_json_text(fractions) -> None:
    """States carry the manifest's digest: written a slab at a time (at 10**7 chunks the whole
    text costs a GB), it must stay the digest of the JSON text, or saved states stop loading."""
    import hashlib

    from insitu.plan import splits

    g = ArrayGeometry(name="x", path="x", shape=(3000, 2), dtype=np.dtype("f4"), chunk_shape=(2, 2))
    manifest = splits.split_by_chunk(g, fractions, names=["a", "b", "c"][: len(fractions)], contiguous=False)
    want = hashlib.sha256(manifest.to_json().encode()).hexdigest()[:16]
    original = splits._DIGEST_SLAB
    splits._DIGEST_SLAB = 7  # several slabs per split, one cut inside the last
    try:
        assert splits.SplitManifest.from_json(manifest.to_json()).digest == want
    finally:
        splits._DIGEST_SLAB = original
    assert manifest.digest == want
