"""Small batches are gathered on the event loop (the hop to the gather thread and back cost more
than the copy); large ones, batches with a batch transform and patch batches on the gather thread.
Either way every sample arrives once, equal to the source."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import zarr

import insitu
from insitu.engine import gather as gather_mod


def _store(tmp_path: Path, n: int, sample: tuple[int, ...]) -> tuple[np.ndarray, str]:
    data = np.arange(n * int(np.prod(sample)), dtype=np.float32).reshape(n, *sample)
    root = str(tmp_path / "d.zarr")
    arr = zarr.create_array(root, name="x", shape=data.shape, chunks=(1, *sample), dtype="f4")
    arr[:] = data
    return data, root


def _threads_of_one_epoch(monkeypatch, root: str, data: np.ndarray, **kw) -> set[str]:
    """Run one epoch; return the names of the threads batches were gathered on."""
    names: set[str] = set()
    real = gather_mod.Gatherer.gather

    def spy(self, *args, **kwargs):
        names.add(threading.current_thread().name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(gather_mod.Gatherer, "gather", spy)
    store = insitu.open_store(root)
    geom = insitu.open_geometries(store, ["x"])["x"]
    manifest = insitu.split_by_chunk(geom, (1.0,), names=("train",))
    with insitu.InSituDataset(store, manifest, [geom], seed=3, **kw) as ds:
        rows = np.concatenate([b[geom.label] for b in ds.train])
    order = np.argsort(rows.reshape(len(rows), -1)[:, 0])
    np.testing.assert_array_equal(rows[order], data)  # every sample once, as stored
    return names


def test_small_batches_are_gathered_on_the_loop(tmp_path: Path, monkeypatch) -> None:
    data, root = _store(tmp_path, 500, (4, 4))  # 64 bytes a sample: a batch of 32 is 2 kB
    names = _threads_of_one_epoch(monkeypatch, root, data, batch_size=32)
    assert names == {"insitu-loop"}


def test_large_batches_go_to_the_gather_thread(tmp_path: Path, monkeypatch) -> None:
    data, root = _store(tmp_path, 96, (128, 128))  # 64 kB a sample: a batch of 8 is 512 kB
    assert 8 * data[0].nbytes > gather_mod.INLINE_GATHER_BYTES
    names = _threads_of_one_epoch(monkeypatch, root, data, batch_size=8)
    assert names
    assert all(n.startswith("insitu-gather") for n in names)


def test_a_batch_transform_keeps_even_small_batches_off_the_loop(tmp_path: Path, monkeypatch) -> None:
    data, root = _store(tmp_path, 200, (4, 4))
    seen: set[str] = set()

    def note_thread(batch):
        seen.add(threading.current_thread().name)
        return batch

    names = _threads_of_one_epoch(monkeypatch, root, data, batch_size=32, batch_transforms=[note_thread])
    assert names
    assert all(n.startswith("insitu-gather") for n in names)
    assert seen == names  # the user's transform ran there too, never on the loop


@pytest.mark.parametrize(("batch_size", "inline"), [(1, True), (4096, True), (4097, False)])
def test_the_limit_counts_every_label_of_a_batch(batch_size: int, inline: bool) -> None:
    class Spec:
        sample_nbytes = 64

    g = gather_mod.Gatherer.__new__(gather_mod.Gatherer)
    g.batch_transforms, g.statics, g.specs = (), {}, {"x": Spec()}
    assert gather_mod.INLINE_GATHER_BYTES == 64 * 4096
    assert g.gathers_inline(batch_size) is inline
    g.statics = {"mask": np.zeros(1, dtype=np.uint8)}  # statics are copied into every batch too
    assert g.gathers_inline(4096) is False
