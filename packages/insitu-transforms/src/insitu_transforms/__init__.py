"""Transforms for insitu: regridding, crops, coarsening, scaling, casts, and a transform checker.

Names are imported on first use (``from insitu_transforms import Regrid``
imports scipy then, not when the plugin registry loads this package).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from insitu_transforms.checker import TransformReport, check_transform
    from insitu_transforms.chunk import Cast, FillNaN, NanToNum
    from insitu_transforms.coarsen import Coarsen
    from insitu_transforms.compose import Compose, ComposeBatch
    from insitu_transforms.crop import Crop, RandomCrop
    from insitu_transforms.regrid import Grid, Regrid
    from insitu_transforms.scaler import StandardScaler, base_label

_WHERE = {
    "TransformReport": "checker",
    "check_transform": "checker",
    "Cast": "chunk",
    "FillNaN": "chunk",
    "NanToNum": "chunk",
    "Coarsen": "coarsen",
    "Compose": "compose",
    "ComposeBatch": "compose",
    "Crop": "crop",
    "RandomCrop": "crop",
    "Grid": "regrid",
    "Regrid": "regrid",
    "StandardScaler": "scaler",
    "base_label": "scaler",
}

__all__ = [
    "Cast",
    "Coarsen",
    "Compose",
    "ComposeBatch",
    "Crop",
    "FillNaN",
    "Grid",
    "NanToNum",
    "RandomCrop",
    "Regrid",
    "StandardScaler",
    "TransformReport",
    "base_label",
    "check_transform",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'insitu_transforms' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"insitu_transforms.{module}"), name)
    globals()[name] = value  # once imported, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
