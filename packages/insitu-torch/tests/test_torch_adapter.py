from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

import insitu
from insitu.batch import Batch
from insitu.testing import AdapterConformance, assert_entry_point, assert_registers
from insitu_torch import as_torch, to_torch


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


def test_more_than_one_worker_is_refused(view: Any) -> None:
    loader = DataLoader(as_torch(view), batch_size=None, num_workers=2)
    with pytest.raises(RuntimeError, match="num_workers=0"):
        next(iter(loader))
