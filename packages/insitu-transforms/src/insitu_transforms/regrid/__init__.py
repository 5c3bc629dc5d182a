"""Regridding as a chunk transform: :class:`Regrid` maps each decoded slab from one :class:`Grid` to
another (bilinear, conservative or nearest) with precomputed sparse weights."""

from __future__ import annotations

from insitu_transforms.regrid.grids import Grid, parse_resolution
from insitu_transforms.regrid.transform import Regrid
from insitu_transforms.regrid.weights import METHODS, build_weights

__all__ = ["METHODS", "Grid", "Regrid", "build_weights", "parse_resolution"]
