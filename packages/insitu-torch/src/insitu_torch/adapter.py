"""Hand insitu batches to PyTorch.

torch is imported inside the functions: importing this module (which the
plugin registry does) must not pull in a framework.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch
    from torch.utils.data import IterableDataset


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise ImportError(
            "insitu-torch needs PyTorch: pip install torch (or the build for your CUDA from pytorch.org)"
        ) from exc
    return torch


def _as_tensor_source(array: np.ndarray) -> np.ndarray:
    """An array ``torch.from_numpy`` can share: native byte order, no negative strides."""
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    if any(stride < 0 for stride in array.strides):
        array = np.ascontiguousarray(array)
    return array


def to_torch(
    batch: Mapping[str, np.ndarray], *, device: str | torch.device | None = None, non_blocking: bool = True
) -> dict[str, torch.Tensor]:
    """``{label: tensor}`` for one batch.

    On CPU the tensors share memory with the batch arrays (``torch.from_numpy``,
    no copy). With ``device`` (``"cuda"``, ``"cuda:1"``...) each tensor is
    moved there; ``non_blocking`` lets the copy overlap compute when the
    source memory is pinned.
    """
    torch = _import_torch()
    tensors = {
        label: torch.from_numpy(_as_tensor_source(np.asarray(array))) for label, array in batch.items()
    }
    if device is None:
        return tensors
    target = torch.device(device)
    if target.type == "cpu":
        return tensors
    return {label: t.to(target, non_blocking=non_blocking) for label, t in tensors.items()}


def as_torch(
    view: Any, *, device: str | torch.device | None = None
) -> IterableDataset[dict[str, torch.Tensor]]:
    """A ``torch.utils.data.IterableDataset`` over an insitu view (``ds.train``...).

    Each item is one whole batch as ``{label: tensor}``, so use it with
    ``DataLoader(dataset, batch_size=None, num_workers=0)``: insitu already
    batches, shuffles and reads in parallel. ``len(dataset)`` is ``len(view)``.
    """
    _import_torch()
    from insitu_torch._dataset import InSituIterableDataset

    return InSituIterableDataset(view, device=device)


__all__ = ["as_torch", "to_torch"]
