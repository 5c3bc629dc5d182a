"""Hand insitu views to PyTorch: ``as_torch`` (``to_torch``, one batch, lives in ``_tensors``).

torch is imported inside the functions: importing this module (which the
plugin registry does) must not pull in a framework.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from insitu.plugin_api import (
    BatchedView,
    ConfigError,
    ShardableView,
    require_batched_view,
    require_shardable_view,
)
from insitu_torch._tensors import import_torch, to_torch

if TYPE_CHECKING:
    import torch

    from insitu_torch._dataset import InSituIterableDataset


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
    import_torch()
    from insitu_torch._dataset import InSituIterableDataset

    shard = _rank_view(view, rank, world_size)
    if isinstance(shard, ShardableView) and shard.world_size > 1:
        len(shard)  # plans the epoch: a world size the split cannot serve fails now, not mid-run
    return InSituIterableDataset(shard, device=device, pin_memory=pin_memory, non_blocking=non_blocking)


__all__ = ["as_torch", "to_torch"]
