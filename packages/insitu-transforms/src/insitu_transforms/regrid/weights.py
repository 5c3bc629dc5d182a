"""Which weights each method builds, and the identity under which they are cached."""

from __future__ import annotations

import hashlib

import scipy.sparse as sp  # type: ignore[import-untyped]  # scipy ships no type information

from insitu.plugin_api import ConfigError
from insitu_transforms.regrid.bilinear import bilinear_weights
from insitu_transforms.regrid.conservative import conservative_weights
from insitu_transforms.regrid.curvilinear import curvilinear_bilinear_weights
from insitu_transforms.regrid.domain import check_target_inside
from insitu_transforms.regrid.grids import Grid
from insitu_transforms.regrid.nearest import nearest_weights

METHODS = ("bilinear", "conservative", "nearest")

#: Bumped whenever a change to the weight code changes the weights: cached files and persisted
#: chunk caches made by the old code are then no longer matched.
WEIGHTS_VERSION = 1


def check_method(method: object) -> str:
    """``method`` if it is one of :data:`METHODS`, else a ConfigError naming it."""
    if not isinstance(method, str) or method not in METHODS:
        raise ConfigError(f"unknown regrid method {method!r}; choose one of {', '.join(map(repr, METHODS))}")
    return method


def check_pair(source: Grid, target: Grid, method: str) -> None:
    """The checks that need no weights: the method suits both grids, and the target lies within a
    rectilinear source (a curvilinear one is checked while its weights are built)."""
    check_method(method)
    if method == "conservative":
        for role, grid in (("source", source), ("target", target)):
            if grid.curvilinear:
                raise ConfigError(
                    f"conservative regridding needs 1-D latitude and longitude; the {role} grid "
                    f"{grid.name} is curvilinear ({grid.describe_shape()} 2-D coordinates); "
                    "use method='bilinear' or 'nearest'"
                )
    check_target_inside(source, target)


def weights_key(source: Grid, target: Grid, method: str) -> str:
    """A hex digest naming the weights from ``source`` to ``target`` by ``method``."""
    text = f"insitu-regrid/{WEIGHTS_VERSION}|{method}|{source.digest}|{target.digest}"
    return hashlib.sha256(text.encode()).hexdigest()


def build_weights(source: Grid, target: Grid, method: str) -> sp.csr_matrix:
    """``(target.size, source.size)`` float64 weights, rows in the target's C order and columns in
    the source's."""
    check_pair(source, target, method)
    if method == "conservative":
        w = conservative_weights(source, target)
    elif method == "nearest":
        w = nearest_weights(source, target)
    elif source.curvilinear:
        w = curvilinear_bilinear_weights(source, target)
    else:
        w = bilinear_weights(source, target)
    w = sp.csr_matrix(w, dtype="float64")
    w.sum_duplicates()
    w.sort_indices()
    return w
