from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _support import open_dataset, write_store
from torch.utils.data import DataLoader, IterableDataset

import insitu
import insitu_torch._tensors
from insitu.batch import Batch
from insitu.testing import AdapterConformance, assert_entry_point, assert_registers
from insitu.testing.adapters import BatchSource, make_batches
from insitu_torch import InSituIterableDataset, TorchBatch, as_torch, to_torch

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (CI has none)")


class TestAsTorchConformance(AdapterConformance):
    def adapter(self) -> Any:
        return as_torch

    def to_numpy(self, value: Any) -> np.ndarray:
        return value.numpy()


class TestToTorchConformance(AdapterConformance):
    per_batch = True

    def adapter(self) -> Any:
        return to_torch

    def to_numpy(self, value: Any) -> np.ndarray:
        return value.numpy()


def test_to_torch_shares_memory_on_cpu() -> None:
    x = np.arange(12, dtype="float32").reshape(3, 4)
    tensors = to_torch(Batch({"x": x}, np.arange(3)))
    assert np.shares_memory(tensors["x"].numpy(), x)
    assert to_torch(Batch({"x": x}, np.arange(3)), device="cpu")["x"].data_ptr() == x.ctypes.data


def test_to_torch_handles_reversed_and_big_endian_arrays() -> None:
    x = np.arange(6, dtype=">f4")[::-1]
    out = to_torch(Batch({"x": x}, np.arange(6)))["x"]
    np.testing.assert_array_equal(out.numpy(), [5, 4, 3, 2, 1, 0])


def test_as_torch_is_an_iterable_dataset_with_the_view_length(view: Any) -> None:
    dataset = as_torch(view)
    assert isinstance(dataset, IterableDataset)
    assert len(dataset) == len(view)
    loader = DataLoader(dataset, batch_size=None, num_workers=0)
    assert len(loader) == len(view)
    items = list(loader)
    assert len(items) == len(view)
    assert set(items[0]) == {"x", "y"}
    assert items[0]["x"].dtype == torch.float32
    assert items[0]["x"].shape == (32, 4)
    assert sum(item["x"].shape[0] for item in items) == sum(batch.size for batch in view)


def test_as_torch_set_epoch_reaches_the_dataset(view: Any) -> None:
    dataset = as_torch(view)
    dataset.set_epoch(3)
    assert view.dataset.epoch == 3


def test_a_linear_model_learns_through_the_loader(view: Any) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(as_torch(view), batch_size=None, num_workers=0)
    epoch_losses = []
    for epoch in range(5):
        view.set_epoch(epoch)
        losses = []
        for batch in loader:
            loss = torch.nn.functional.mse_loss(model(batch["x"]), batch["y"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        epoch_losses.append(float(np.mean(losses)))
    assert epoch_losses[-1] < 0.01 * epoch_losses[0], epoch_losses


def test_plugin_registers_both_adapters() -> None:
    assert_registers("insitu_torch.plugin", "adapters", ["as_torch", "to_torch"], exact=True)
    assert_entry_point("torch", "insitu_torch.plugin")
    assert insitu.as_torch is as_torch
    assert insitu.to_torch is to_torch


def test_importing_the_plugin_does_not_import_torch() -> None:
    code = "import sys, insitu, insitu_torch, insitu_torch.plugin; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_loader_items_carry_sample_indices_and_batch_position(view: Any) -> None:
    want = [(batch.sample_indices.copy(), batch.index) for batch in view]
    items = list(DataLoader(as_torch(view), batch_size=None, num_workers=0))
    assert len(items) == len(want)
    for item, (indices, index) in zip(items, want, strict=True):
        # DataLoader copies the mapping on the way out: the provenance must survive it.
        assert isinstance(item, TorchBatch)
        assert set(item) == {"x", "y"}, "provenance is not mixed into the label keys"
        np.testing.assert_array_equal(item.sample_indices.numpy(), indices)
        assert item.sample_indices.dtype == torch.int64
        assert (item.index, item.split, item.epoch) == (index, "train", 0)
        assert item.valid is None
        assert item.size == len(indices)
        np.testing.assert_array_equal(item.read_indices["x"].numpy(), indices)


def test_the_loader_hands_over_the_batch_memory_without_copying() -> None:
    batches = make_batches(3, 4, {"x": "float32", "y": "int64"}, {"x": (3,), "y": ()})
    items = list(DataLoader(as_torch(BatchSource(batches, batch_size=4)), batch_size=None, num_workers=0))
    for item, batch in zip(items, batches, strict=True):
        for label in ("x", "y"):
            assert np.shares_memory(item[label].numpy(), batch[label])
        assert np.shares_memory(item.sample_indices.numpy(), batch.sample_indices)


def test_padding_rows_are_marked_invalid(tmp_path: Path) -> None:
    store = write_store(tmp_path / "store.zarr")
    with open_dataset(store, uneven="pad") as ds:
        shards = [as_torch(ds.train, rank=r, world_size=2) for r in range(2)]
        runs = [list(DataLoader(shard, batch_size=None, num_workers=0)) for shard in shards]
    assert len(runs[0]) == len(runs[1])
    real = [
        [
            i
            for b in run
            for i in (b.sample_indices if b.valid is None else b.sample_indices[b.valid]).tolist()
        ]
        for run in runs
    ]
    assert sorted(real[0] + real[1]) == list(range(296)), "the real rows are every sample once"
    masks = [b.valid for run in runs for b in run if b.valid is not None]
    assert masks, "the store's ranks are uneven: one of them must be padded"
    assert all(m.dtype == torch.bool for m in masks)
    assert sum(int((~m).sum()) for m in masks) == abs(len(real[0]) - len(real[1]))


def test_explicit_rank_reads_that_shard(view: Any) -> None:
    dataset = as_torch(view, rank=1, world_size=2)
    assert isinstance(dataset, InSituIterableDataset)
    assert (dataset.view.rank, dataset.view.world_size) == (1, 2)
    want = [batch.sample_indices.copy() for batch in view.shard(1, 2)]
    got = [item.sample_indices.numpy() for item in DataLoader(dataset, batch_size=None, num_workers=0)]
    assert len(dataset) == len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    own = {int(i) for w in want for i in w}
    other = {int(i) for b in view.shard(0, 2) for i in b.sample_indices}
    assert own.isdisjoint(other)


def test_rank_without_world_size_is_refused(view: Any) -> None:
    with pytest.raises(insitu.ConfigError, match="rank and world_size together"):
        as_torch(view, rank=0)


def test_world_size_beyond_the_chunk_count_is_refused_up_front(view: Any) -> None:
    n_chunks = len(view.dataset.manifest.chunks("train"))
    with pytest.raises(insitu.ConfigError, match=f"world_size={n_chunks + 1} exceeds"):
        as_torch(view, rank=0, world_size=n_chunks + 1)


def test_a_view_of_a_closed_dataset_fails_clearly_when_iterated(view: Any) -> None:
    loader = DataLoader(as_torch(view), batch_size=None, num_workers=0)
    view.dataset.close()
    with pytest.raises(insitu.DatasetClosedError, match="closed"):
        next(iter(loader))


def test_rank_comes_from_an_initialised_process_group(view: Any, tmp_path: Path) -> None:
    dist = torch.distributed
    if not (dist.is_available() and dist.is_gloo_available()):
        pytest.skip("this torch build has no gloo backend")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        assert as_torch(view).view.world_size == 1  # a group of one: the whole view
        with pytest.raises(insitu.ConfigError, match=r"torch\.distributed says rank 0 of 1"):
            as_torch(view.shard(1, 2))
        assert as_torch(view.shard(1, 2), rank=1, world_size=2).view.rank == 1  # explicit wins
    finally:
        dist.destroy_process_group()


def test_pin_memory_without_an_accelerator_warns_and_stays_zero_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    if torch.accelerator.is_available():
        pytest.skip("an accelerator is present: pinning happens (see the CUDA tests)")
    monkeypatch.setattr(insitu_torch._tensors, "_warned_no_pinning", False)
    x = np.arange(12, dtype="float32").reshape(3, 4)
    with pytest.warns(UserWarning, match="no accelerator"):
        out = to_torch(Batch({"x": x}, np.arange(3)), pin_memory=True)
    assert np.shares_memory(out["x"].numpy(), x)


@needs_cuda
def test_pinned_host_copy_then_device_copy() -> None:
    x = np.arange(12, dtype="float32").reshape(3, 4)
    valid = np.array([True, True, False])
    batch = Batch({"x": x}, np.arange(3), valid=valid)
    pinned = to_torch(batch, pin_memory=True)
    assert pinned["x"].is_pinned()
    assert pinned.valid is not None
    assert pinned.valid.is_pinned()
    assert not np.shares_memory(pinned["x"].numpy(), x)
    on_gpu = to_torch(batch, device="cuda", pin_memory=True, non_blocking=True)
    assert on_gpu["x"].device.type == "cuda"
    assert on_gpu.valid is not None
    assert on_gpu.valid.device.type == "cuda"
    assert on_gpu.sample_indices is not None
    assert on_gpu.sample_indices.device.type == "cpu"  # bookkeeping stays on the host
    torch.cuda.synchronize()
    np.testing.assert_array_equal(on_gpu["x"].cpu().numpy(), x)
    np.testing.assert_array_equal(on_gpu.valid.cpu().numpy(), valid)


@needs_cuda
def test_as_torch_delivers_on_the_device(view: Any) -> None:
    items = list(DataLoader(as_torch(view, device="cuda", pin_memory=True), batch_size=None, num_workers=0))
    assert all(item["x"].device.type == "cuda" for item in items)
    assert len(items) == len(view)


def test_as_torch_serves_patches_with_their_origins(tmp_path: Path) -> None:
    """Patch sampling through the adapter: tensors of the patch's shape, equal to the source at
    each row's origin, which the batch carries."""
    import zarr

    src = np.random.default_rng(0).standard_normal((3, 40, 40)).astype("float32")
    z = zarr.open_array(
        str(tmp_path / "p.zarr"),
        mode="w",
        shape=src.shape,
        chunks=(1, 16, 16),
        dtype="f4",
        dimension_names=("t", "y", "x"),
    )
    z[:] = src
    store = insitu.open_store(str(tmp_path / "p.zarr"))
    (geom,) = insitu.open_geometries(store).values()
    manifest = insitu.split_by_chunk(geom, fractions=(1.0,), names=("train",))
    ds = insitu.InSituDataset(store, manifest, [geom], patch={"y": 12, "x": 12}, batch_size=5)
    n = 0
    for batch in DataLoader(as_torch(ds.train), batch_size=None, num_workers=0):
        assert isinstance(batch, TorchBatch)
        assert batch.patch_origins is not None
        assert batch[geom.label].shape[1:] == (12, 12)
        for row, (t, y, x) in zip(batch[geom.label], batch.patch_origins.tolist(), strict=True):
            np.testing.assert_array_equal(row.numpy(), src[t, y : y + 12, x : x + 12])
        n += batch.size
    assert n == 3 * 4 * 4
