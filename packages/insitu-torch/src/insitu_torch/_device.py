"""``as_torch(view, device="cuda")`` through insitu-gpu's device stage, when insitu-gpu is installed.

The stage copies each batch through a pinned ring on its own CUDA stream and
makes torch's current stream wait on the copy (no host synchronisation);
tensors come from its CuPy arrays by DLPack, without a copy. Without
insitu-gpu (or with a CuPy that cannot reach the GPU) :func:`device_stage_for`
returns None and batches take the plain ``tensor.to(device)`` path.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from insitu_torch._batch import TorchBatch

_warned = False


def device_stage_for(view: Any, device: Any) -> Any | None:
    """A started-on-demand device stage for ``view`` on a CUDA ``device``, else None."""
    global _warned
    import torch

    target = None if device is None else torch.device(device)
    if target is None or target.type != "cuda":
        return None
    try:
        from insitu_gpu import device_stage
    except ImportError:
        return None
    index = target.index if target.index is not None else torch.cuda.current_device()
    try:
        return device_stage(
            view, device_id=index, consumer_stream=lambda: torch.cuda.current_stream(index).cuda_stream
        )
    except ImportError as exc:  # insitu-gpu without a usable CuPy: the plain copy still works
        if not _warned:
            warnings.warn(
                f"insitu-gpu is installed but unusable ({exc}); using tensor.to(device)", stacklevel=3
            )
            _warned = True
        return None


def from_device_batch(batch: Any, device: Any) -> TorchBatch:
    """A :class:`TorchBatch` sharing the device arrays of an insitu-gpu ``DeviceBatch`` (DLPack)."""
    import torch

    valid = (
        None
        if batch.valid is None
        else torch.from_numpy(np.asarray(batch.valid)).to(device, non_blocking=True)
    )
    indices = batch.sample_indices
    origins = getattr(batch, "patch_origins", None)
    return TorchBatch(
        {label: torch.from_dlpack(array) for label, array in batch.items()},
        sample_indices=None if indices is None else torch.from_numpy(np.ascontiguousarray(indices)),
        read_indices={k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in batch.read_indices.items()},
        valid=valid,
        patch_origins=None if origins is None else torch.from_numpy(np.ascontiguousarray(origins)),
        split=batch.split,
        epoch=batch.epoch,
        index=batch.index,
    )
