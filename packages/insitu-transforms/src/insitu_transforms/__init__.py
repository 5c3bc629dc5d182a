"""Transforms for insitu: a streaming-fitted StandardScaler and small chunk transforms."""

from __future__ import annotations

from insitu_transforms.chunk import Cast, NanToNum
from insitu_transforms.scaler import StandardScaler, base_label

__all__ = ["Cast", "NanToNum", "StandardScaler", "base_label"]
