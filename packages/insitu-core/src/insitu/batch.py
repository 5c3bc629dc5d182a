"""The unit a view yields: a mapping of label to array, plus provenance."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, eq=False)
class Batch(Mapping[str, np.ndarray]):
    """One batch: ``{label: ndarray}`` with the sample axis first.

    ``sample_indices`` are the anchor positions along the sample axis (the
    index a user would use on the source array for an unshifted variable).
    ``read_indices[label]`` is where each row of ``data[label]`` was read:
    ``sample_indices + offset`` for a shifted (windowed) label.
    """

    data: Mapping[str, np.ndarray]
    sample_indices: np.ndarray
    read_indices: Mapping[str, np.ndarray] = field(default_factory=dict)
    split: str = ""
    epoch: int = 0
    index: int = 0
    valid: np.ndarray | None = None  # with uneven="pad": False for padding rows; None: all rows real

    def __getitem__(self, label: str) -> np.ndarray:
        return self.data[label]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    @property
    def size(self) -> int:
        """Number of samples in the batch."""
        return int(self.sample_indices.shape[0])

    def replace(self, data: Mapping[str, np.ndarray]) -> Batch:
        """A copy of this batch with new arrays (used by batch transforms)."""
        return Batch(
            dict(data), self.sample_indices, self.read_indices, self.split, self.epoch, self.index, self.valid
        )

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self.data.items())
        return f"Batch(split={self.split!r}, epoch={self.epoch}, index={self.index}, size={self.size}, {{{parts}}})"
