"""Refuse the DataLoader settings that would deliver wrong batches from an insitu dataset.

Each item of ``as_torch(view)`` is already a whole batch, and insitu reads in
parallel inside this process, so the one DataLoader that fits is
:data:`LOADER_FIX`. ``DataLoader.__init__`` gives the dataset no say: it only
checks the dataset's class, and calls nothing on it. So the checks sit where
torch does call into insitu, before any batch reaches the caller:

- Worker processes (``num_workers > 0``): every worker would replay the whole
  view, duplicating each sample, in a process where the engine's threads do not
  exist. With the ``spawn``/``forkserver`` start methods the dataset is pickled
  in the calling process by ``iter(loader)``: :func:`refuse_pickling` refuses
  there. With ``fork`` nothing is pickled; the worker's first ``next()`` calls
  :func:`refuse_worker_process`, and the DataLoader re-raises its error on the
  caller's first ``next()``.
- Automatic batching (``batch_size`` not ``None``, default 1): ``default_collate``
  would stack insitu batches along a new leading axis. It looks each element's
  type up in ``default_collate_fn_map``, the extension point its documentation
  describes; :func:`install_collate_refusal` maps :class:`TorchBatch` to
  :func:`refuse_collating`, which raises on the first ``next()``.
  ``batch_size=None`` converts with ``default_convert``, which never consults
  the map, and a custom ``collate_fn`` bypasses it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from insitu.plugin_api import ConfigError
from insitu_torch._batch import TorchBatch

LOADER_FIX = "DataLoader(as_torch(view), batch_size=None, num_workers=0)"


def refuse_worker_process() -> None:
    """Raise ConfigError when called inside a DataLoader worker process."""
    import torch.utils.data

    info = torch.utils.data.get_worker_info()
    if info is not None:
        raise ConfigError(
            f"insitu dataset iterated in DataLoader worker {info.id} of {info.num_workers}: each worker "
            "would replay the whole view (every sample once per worker) without insitu's reader threads. "
            f"insitu reads in parallel in the calling process; use {LOADER_FIX}"
        )


def refuse_pickling() -> NoReturn:
    """Raise ConfigError: what pickling an insitu torch dataset means is sending it to a worker."""
    raise ConfigError(
        "an insitu dataset cannot be sent to another process (DataLoader num_workers > 0 with the "
        "spawn or forkserver start method): each worker would replay the whole view. "
        f"insitu reads in parallel in the calling process; use {LOADER_FIX}"
    )


def refuse_collating(
    batch: list[TorchBatch],
    *,
    collate_fn_map: dict[type | tuple[type, ...], Callable[..., Any]] | None = None,
) -> NoReturn:
    """``default_collate``'s entry for TorchBatch: stacking whole batches is always a mistake."""
    first = batch[0]
    raise ConfigError(
        f"DataLoader's automatic batching would stack {len(batch)} insitu batch(es) of {first.size} samples "
        "along a new leading dimension: each item of as_torch(view) is already a whole batch "
        "(set the batch size on InSituDataset). Turn DataLoader's batching off: "
        f"{LOADER_FIX}"
    )


def install_collate_refusal() -> None:
    """Map TorchBatch to :func:`refuse_collating` in torch's ``default_collate_fn_map`` (idempotent)."""
    try:
        from torch.utils.data._utils.collate import default_collate_fn_map
    except ImportError:  # a torch without the map: batching goes unchecked, nothing else changes
        return
    default_collate_fn_map.setdefault(TorchBatch, refuse_collating)


__all__ = [
    "LOADER_FIX",
    "install_collate_refusal",
    "refuse_collating",
    "refuse_pickling",
    "refuse_worker_process",
]
