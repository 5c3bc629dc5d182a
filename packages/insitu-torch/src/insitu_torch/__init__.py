"""PyTorch adapter for insitu: views as IterableDatasets, batches as tensors."""

from __future__ import annotations

from insitu_torch.adapter import as_torch, to_torch

__all__ = ["as_torch", "to_torch"]
