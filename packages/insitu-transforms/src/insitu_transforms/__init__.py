"""Transforms for insitu: regridding, crops, coarsening, scaling, casts, and a transform checker."""

from __future__ import annotations

from insitu_transforms.checker import TransformReport, check_transform
from insitu_transforms.chunk import Cast, FillNaN, NanToNum
from insitu_transforms.coarsen import Coarsen
from insitu_transforms.compose import Compose, ComposeBatch
from insitu_transforms.crop import Crop, RandomCrop
from insitu_transforms.regrid import Grid, Regrid
from insitu_transforms.scaler import StandardScaler, base_label

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
