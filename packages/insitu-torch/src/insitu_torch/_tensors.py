"""One insitu batch as torch tensors (``to_torch``): the conversion both the adapter and the
dataset class use, below both so neither imports the other for it.

torch is imported inside the functions: importing this module (which the
plugin registry does, through the adapter) must not pull in a framework.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from insitu_torch._batch import TorchBatch

if TYPE_CHECKING:
    import torch


def import_torch() -> Any:
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


_warned_no_pinning = False


def _can_pin(torch: Any) -> bool:
    """Whether page-locked host memory exists here (it needs an accelerator runtime)."""
    global _warned_no_pinning
    accelerator = getattr(torch, "accelerator", None)
    available = accelerator.is_available() if accelerator is not None else torch.cuda.is_available()
    if not available and not _warned_no_pinning:
        # Same policy as DataLoader(pin_memory=True): warn once and carry on unpinned.
        warnings.warn(
            "pin_memory=True but no accelerator is available: batches stay in ordinary memory",
            stacklevel=3,
        )
        _warned_no_pinning = True
    return bool(available)


def to_torch(
    batch: Mapping[str, np.ndarray],
    *,
    device: str | torch.device | None = None,
    pin_memory: bool = False,
    non_blocking: bool = True,
) -> TorchBatch:
    """One batch as a :class:`TorchBatch` (``{label: tensor}`` plus provenance).

    - No ``device`` (or ``"cpu"``) and no ``pin_memory``: no copy. Every
      tensor shares memory with the batch array (``torch.from_numpy``); only a
      non-native byte order or a negative stride forces a copy.
    - ``pin_memory=True``: one copy into page-locked host memory, so the
      transfer to the GPU can run asynchronously. Without an accelerator it
      warns once and skips pinning (like ``DataLoader(pin_memory=True)``).
    - ``device="cuda"`` (``"cuda:1"``...): tensors and the ``valid`` mask are
      copied there; ``non_blocking`` lets that copy overlap compute when the
      source is pinned. Sample indices stay on the CPU.
    """
    torch = import_torch()
    tensors = {
        label: torch.from_numpy(_as_tensor_source(np.asarray(array))) for label, array in batch.items()
    }
    valid_np = getattr(batch, "valid", None)
    valid = None if valid_np is None else torch.from_numpy(_as_tensor_source(np.asarray(valid_np)))
    if pin_memory and _can_pin(torch):
        tensors = {label: t.pin_memory() for label, t in tensors.items()}
        valid = None if valid is None else valid.pin_memory()
    target = None if device is None else torch.device(device)
    if target is not None and target.type != "cpu":
        tensors = {label: t.to(target, non_blocking=non_blocking) for label, t in tensors.items()}
        valid = None if valid is None else valid.to(target, non_blocking=non_blocking)
    indices = getattr(batch, "sample_indices", None)
    origins = getattr(batch, "patch_origins", None)
    reads = getattr(batch, "read_indices", None) or {}
    return TorchBatch(
        tensors,
        sample_indices=None if indices is None else torch.from_numpy(_as_tensor_source(np.asarray(indices))),
        read_indices={k: torch.from_numpy(_as_tensor_source(np.asarray(v))) for k, v in reads.items()},
        valid=valid,
        patch_origins=None if origins is None else torch.from_numpy(_as_tensor_source(np.asarray(origins))),
        split=str(getattr(batch, "split", "")),
        epoch=int(getattr(batch, "epoch", 0)),
        index=int(getattr(batch, "index", 0)),
    )
