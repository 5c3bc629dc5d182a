"""``Negate``: a chunk transform that flips the sign of every value (dtype and shape unchanged)."""

from __future__ import annotations

import numpy as np


class Negate:
    """Multiply every decoded chunk by -1."""

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        """Return ``-block``; ``name`` is the array the chunk belongs to."""
        return np.negative(block)

    def out_spec(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[tuple[int, ...], np.dtype]:
        """Shape and dtype are unchanged."""
        return shape, dtype

    def fingerprint(self) -> str:
        """Names the transform in a persisted cache's identity."""
        return "insitu_example_plugin.Negate/v1"
