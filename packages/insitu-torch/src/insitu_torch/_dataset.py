"""The IterableDataset class. This module imports torch; ``adapter.as_torch`` imports it lazily."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import IterableDataset

from insitu_torch._batch import TorchBatch
from insitu_torch.adapter import to_torch


class InSituIterableDataset(IterableDataset[TorchBatch]):
    """Yields one :class:`TorchBatch` per insitu batch; one pass over ``view`` per iteration.

    Built by :func:`insitu_torch.as_torch`. ``view`` is the (already
    sharded) view this process reads.
    """

    def __init__(
        self,
        view: Any,
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

    def __iter__(self) -> Iterator[TorchBatch]:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            # Every worker would replay the whole view: duplicated batches and reads.
            raise RuntimeError(
                "insitu reads in parallel itself; use DataLoader(..., batch_size=None, num_workers=0)"
            )
        # A generator: nothing starts until the first batch is asked for, so a
        # loader that calls iter() before load_state_dict() (StatefulDataLoader)
        # starts no read it would throw away.
        for batch in self.view:
            yield to_torch(
                batch, device=self.device, pin_memory=self.pin_memory, non_blocking=self.non_blocking
            )

    def __len__(self) -> int:
        return len(self.view)

    def set_epoch(self, epoch: int) -> None:
        """Forward to the underlying dataset, so the next pass uses that epoch's order."""
        self.view.set_epoch(epoch)

    # -- exact resume (torch.distributed.checkpoint / torchdata Stateful convention) ----------
    def state_dict(self) -> dict[str, Any]:
        """Epoch and batches handed out so far, plus what must match to resume (JSON-able).

        Counts batches this dataset has yielded; take it between steps, after
        the batch you last trained on.
        """
        return dict(self.view.state_dict())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue after the batches recorded in ``state`` on the next iteration.

        The dataset must be built the same way (manifest, seed, batch size,
        ranks...); a mismatch raises ``insitu.ConfigError`` naming the field.
        """
        self.view.load_state_dict(state)

    def __repr__(self) -> str:
        return f"InSituIterableDataset({self.view!r}, device={self.device!r}, pin_memory={self.pin_memory})"
