"""``TorchBatch``: the tensors of one batch, with where they came from.

This module does not import torch: the class is a ``dict`` whose values
happen to be tensors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


class TorchBatch(dict[str, "torch.Tensor"]):
    """``{label: tensor}`` for one batch, sample axis first, plus its provenance.

    The keys are only the labels, so ``batch["x"]``, ``model(**batch)`` and
    ``batch.items()`` see data and nothing else. Provenance is in attributes:

    - ``sample_indices``: int64 CPU tensor, the anchor index of each row on
      the sample axis (shares memory with the insitu batch).
    - ``read_indices``: ``{label: int64 CPU tensor}``, where each row of that
      label was read (anchor plus the label's offset for shifted labels).
    - ``valid``: ``None`` when every row is a real sample, otherwise a bool
      tensor on the same device as the data, False for the padding rows that
      ``uneven="pad"`` adds so that every rank yields as many batches.
    - ``patch_origins``: patch sampling, an int64 CPU tensor with the first
      element of each row's patch on every axis of the reference array (the
      insitu batch's ``patch_origins``); ``None`` for whole cross-sections.
    - ``split``, ``epoch``, ``index``: the view's split, the epoch and the
      batch's position in that epoch.

    A ``dict`` subclass so that ``DataLoader``'s conversion and its own
    ``pin_memory=True`` keep the attributes (they copy the mapping, then
    update its values).
    """

    sample_indices: torch.Tensor | None
    read_indices: dict[str, torch.Tensor]
    valid: torch.Tensor | None
    patch_origins: torch.Tensor | None
    split: str
    epoch: int
    index: int

    def __init__(
        self,
        tensors: dict[str, torch.Tensor] | None = None,
        *,
        sample_indices: torch.Tensor | None = None,
        read_indices: dict[str, torch.Tensor] | None = None,
        valid: torch.Tensor | None = None,
        patch_origins: torch.Tensor | None = None,
        split: str = "",
        epoch: int = 0,
        index: int = 0,
    ) -> None:
        super().__init__(tensors or {})
        self.sample_indices = sample_indices
        self.read_indices = dict(read_indices or {})
        self.valid = valid
        self.patch_origins = patch_origins
        self.split = split
        self.epoch = epoch
        self.index = index

    @property
    def size(self) -> int:
        """Rows in the batch, padding included (``int(valid.sum())`` counts real ones)."""
        if self.sample_indices is not None:
            return int(self.sample_indices.shape[0])
        first: Any = next(iter(self.values()), None)
        return 0 if first is None else int(first.shape[0])

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}: {v.dtype}{list(v.shape)}@{v.device}" for k, v in self.items())
        padded = "" if self.valid is None else f", valid={int(self.valid.sum())}"
        return (
            f"TorchBatch(split={self.split!r}, epoch={self.epoch}, index={self.index}, "
            f"size={self.size}{padded}, {{{parts}}})"
        )
