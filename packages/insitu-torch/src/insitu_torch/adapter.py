"""Hand insitu batches to PyTorch.

torch is imported inside the functions: importing this module (which the
plugin registry does) must not pull in a framework.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from insitu.errors import ConfigError
from insitu.sources import BatchedView, ShardableView, require_batched_view, require_shardable_view
from insitu_torch._batch import TorchBatch

if TYPE_CHECKING:
    import torch

    from insitu_torch._dataset import InSituIterableDataset


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
    torch = _import_torch()
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
    reads = getattr(batch, "read_indices", None) or {}
    return TorchBatch(
        tensors,
        sample_indices=None if indices is None else torch.from_numpy(_as_tensor_source(np.asarray(indices))),
        read_indices={k: torch.from_numpy(_as_tensor_source(np.asarray(v))) for k, v in reads.items()},
        valid=valid,
        split=str(getattr(batch, "split", "")),
        epoch=int(getattr(batch, "epoch", 0)),
        index=int(getattr(batch, "index", 0)),
    )


def _rank_view(view: BatchedView, rank: int | None, world_size: int | None) -> BatchedView:
    """The view this process iterates: explicit rank, else ``torch.distributed``, else ``view``."""
    if (rank is None) != (world_size is None):
        raise ConfigError(f"pass rank and world_size together (got rank={rank!r}, world_size={world_size!r})")
    if rank is not None and world_size is not None:
        return require_shardable_view(view, "as_torch(rank=..., world_size=...)").for_rank(
            rank, world_size, source="rank/world_size"
        )
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return view
    shardable = require_shardable_view(view, "as_torch under an initialised torch.distributed")
    return shardable.for_rank(dist.get_rank(), dist.get_world_size(), source="torch.distributed")


def as_torch(
    view: BatchedView,
    *,
    device: str | torch.device | None = None,
    pin_memory: bool = False,
    non_blocking: bool = True,
    rank: int | None = None,
    world_size: int | None = None,
) -> InSituIterableDataset:
    """A ``torch.utils.data.IterableDataset`` over an insitu view (``ds.train``...).

    Each item is one whole batch as a :class:`TorchBatch`, so use it with
    ``DataLoader(dataset, batch_size=None, num_workers=0)``: insitu already
    batches, shuffles and reads in parallel. Any other ``batch_size`` (the
    default is 1) or ``num_workers > 0`` raises ``insitu.ConfigError``
    naming that fix, by the loader's first batch: ``DataLoader``'s
    constructor does not consult the dataset, so it cannot be refused there.
    ``len(dataset)`` is the number of batches this rank yields per epoch.

    ``view`` is an insitu view (``ds.train``...) or any other
    :class:`insitu.BatchedView`; sharding by rank, ``set_epoch`` and resume
    need an :class:`insitu.sources.ShardableView` (what ``ds.train`` is).
    Anything else raises TypeError naming its type.

    Ranks: with ``rank`` and ``world_size`` the view is ``view.for_rank(rank,
    world_size)``; otherwise, when ``torch.distributed`` is initialised (call
    ``init_process_group`` first), this process's rank and the group size
    are used; otherwise the view is iterated whole. A view already sharded
    some other way raises ``insitu.ConfigError``. Each rank reads disjoint
    chunks and yields the same number of batches. A world size larger than
    the split's chunk count raises ``insitu.ConfigError`` here.

    ``state_dict()`` / ``load_state_dict()`` on the result resume exactly
    (also through torchdata's ``StatefulDataLoader``); ``set_epoch(e)``
    selects the epoch. ``device``, ``pin_memory`` and ``non_blocking`` are
    passed to :func:`to_torch` for every batch; with insitu-gpu installed, a
    CUDA ``device`` goes through its device stage instead (pinned ring, copies
    on their own stream that torch's stream waits on, tensors by DLPack).
    """
    view = require_batched_view(view, "as_torch")
    _import_torch()
    from insitu_torch._dataset import InSituIterableDataset

    shard = _rank_view(view, rank, world_size)
    if isinstance(shard, ShardableView) and shard.world_size > 1:
        len(shard)  # plans the epoch: a world size the split cannot serve fails now, not mid-run
    return InSituIterableDataset(shard, device=device, pin_memory=pin_memory, non_blocking=non_blocking)


__all__ = ["as_torch", "to_torch"]
