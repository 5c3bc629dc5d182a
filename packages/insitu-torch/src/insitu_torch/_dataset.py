"""The IterableDataset class. This module imports torch; ``adapter.as_torch`` imports it lazily."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NoReturn

import torch
from torch.utils.data import IterableDataset

from insitu.plugin_api import BatchedView, require_shardable_view
from insitu_torch._batch import TorchBatch
from insitu_torch._device import device_stage_for, from_device_batch
from insitu_torch._loader_checks import install_collate_refusal, refuse_pickling, refuse_worker_process
from insitu_torch._tensors import to_torch

install_collate_refusal()


class InSituIterableDataset(IterableDataset[TorchBatch]):
    """Yields one :class:`TorchBatch` per insitu batch; one pass over ``view`` per iteration.

    Built by :func:`insitu_torch.as_torch`. ``view`` is the (already
    sharded) view this process reads. Only ``DataLoader(dataset,
    batch_size=None, num_workers=0)`` fits: see ``_loader_checks`` for how
    other settings are refused.
    """

    def __init__(
        self,
        view: BatchedView,
        *,
        device: str | torch.device | None = None,
        pin_memory: bool = False,
        non_blocking: bool = True,
    ) -> None:
        super().__init__()
        self.view = view
        self.device = device
        self.pin_memory = pin_memory
        self.non_blocking = non_blocking
        self._stage: Any = None  # insitu-gpu's device stage, for a CUDA device when installed

    def __iter__(self) -> Iterator[TorchBatch]:
        refuse_worker_process()
        # A generator: nothing starts until the first batch is asked for, so a
        # loader that calls iter() before load_state_dict() (StatefulDataLoader)
        # starts no read it would throw away.
        self._stage = device_stage_for(self.view, self.device)
        if self._stage is not None:
            for staged in self._stage:
                yield from_device_batch(staged, self.device)
            return
        for batch in self.view:
            yield to_torch(
                batch, device=self.device, pin_memory=self.pin_memory, non_blocking=self.non_blocking
            )

    def __len__(self) -> int:
        return len(self.view)

    def __getstate__(self) -> NoReturn:
        # Only worker processes started with spawn/forkserver pickle a dataset; each would replay the view.
        refuse_pickling()

    def set_epoch(self, epoch: int) -> None:
        """Forward to the underlying dataset, so the next pass uses that epoch's order."""
        require_shardable_view(self.view, "InSituIterableDataset.set_epoch").set_epoch(epoch)

    # -- exact resume (torch.distributed.checkpoint / torchdata Stateful convention) ----------
    def state_dict(self) -> dict[str, Any]:
        """Epoch and batches handed out so far, plus what must match to resume (JSON-able).

        Counts batches this dataset has yielded; take it between steps, after
        the batch you last trained on.
        """
        view = require_shardable_view(self.view, "InSituIterableDataset.state_dict")
        # The device stage reads a batch ahead; its state leaves that batch out.
        return dict(view.state_dict() if self._stage is None else self._stage.state_dict())

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Continue after the batches recorded in ``state`` on the next iteration.

        The dataset must be built the same way (manifest, seed, batch size,
        ranks...); a mismatch raises ``insitu.ConfigError`` naming the field.
        ``state`` is one rank's state (DDP ranks move in lockstep) or the list of
        every rank's; saved at another world size, the ranks share the rest of
        the epoch (``docs/distributed.md``).
        """
        require_shardable_view(self.view, "InSituIterableDataset.load_state_dict").load_state_dict(state)

    def __repr__(self) -> str:
        return f"InSituIterableDataset({self.view!r}, device={self.device!r}, pin_memory={self.pin_memory})"
