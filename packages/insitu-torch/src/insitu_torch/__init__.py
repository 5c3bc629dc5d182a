"""PyTorch adapter for insitu: views as IterableDatasets, batches as tensors."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from insitu_torch._batch import TorchBatch
from insitu_torch.adapter import as_torch, to_torch

if TYPE_CHECKING:
    from insitu_torch._dataset import InSituIterableDataset


def __getattr__(name: str) -> Any:
    # The dataset class subclasses torch's IterableDataset: importing it imports torch,
    # which importing this package must not do.
    if name == "InSituIterableDataset":
        from insitu_torch._dataset import InSituIterableDataset

        return InSituIterableDataset
    raise AttributeError(f"module 'insitu_torch' has no attribute {name!r}")


__all__ = ["InSituIterableDataset", "TorchBatch", "as_torch", "to_torch"]
