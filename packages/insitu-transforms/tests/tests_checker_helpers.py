"""A transform imported by path in the command-line test: it changes dtype without declaring it."""

from __future__ import annotations

import numpy as np


def undeclared(name: str, block: np.ndarray) -> np.ndarray:
    return block.astype(np.float16)
