"""The IterableDataset class. This module imports torch; ``adapter.as_torch`` imports it lazily."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import IterableDataset

from insitu_torch.adapter import to_torch


class InSituIterableDataset(IterableDataset[dict[str, torch.Tensor]]):
    """Yields ``{label: tensor}`` per insitu batch; one pass over ``view`` per iteration."""

    def __init__(self, view: Any, *, device: str | torch.device | None = None) -> None:
        super().__init__()
        self.view = view
        self.device = device

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            # Every worker would replay the whole view: duplicated batches and reads.
            raise RuntimeError(
                "insitu reads in parallel itself; use DataLoader(..., batch_size=None, num_workers=0)"
            )
        for batch in self.view:
            yield to_torch(batch, device=self.device)

    def __len__(self) -> int:
        return len(self.view)

    def set_epoch(self, epoch: int) -> None:
        """Forward to the underlying dataset, so the next pass uses that epoch's order."""
        self.view.dataset.set_epoch(epoch)

    def __repr__(self) -> str:
        return f"InSituIterableDataset({self.view!r}, device={self.device!r})"
