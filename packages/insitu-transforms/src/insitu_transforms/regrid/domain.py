"""Refuse targets that a regional source cannot say anything about.

A target point (cell centre) must lie within the source's cells: for a
rectilinear source, between its outer cell edges in latitude and, unless the
source goes round the globe, in longitude. Points between the outermost
centre and the outer edge are inside (each method says what it does there).
Curvilinear sources are checked while their weights are built
(:mod:`.curvilinear`), where the neighbour search already runs.
"""

from __future__ import annotations

import numpy as np

from insitu.plugin_api import ConfigError
from insitu_transforms.regrid.axes import lat_outside, lon_outside
from insitu_transforms.regrid.grids import Grid


def check_target_inside(source: Grid, target: Grid) -> None:
    """Raise ConfigError naming the first target latitude or longitude outside a rectilinear source."""
    if source.curvilinear:
        return
    if target.curvilinear:
        lat, lon = target.points()
    else:
        lat, lon = target.lat, target.lon
    lat_axis, lon_axis = source.lat_axis, source.lon_axis
    bad = lat_outside(lat_axis, lat)
    if bad.any():
        lo, hi = lat_axis.extent
        raise ConfigError(
            f"target latitude {float(lat[bad][0]):g} lies outside the source grid {source.name} "
            f"(latitude {lo:g} to {hi:g}); crop the target to the source's region"
        )
    bad = lon_outside(lon_axis, lon)
    if bad.any():
        lo, hi = lon_axis.extent
        raise ConfigError(
            f"target longitude {float(np.asarray(lon)[bad][0]):g} lies outside the regional source grid "
            f"{source.name} (longitude {lo:g} to {hi:g} east); crop the target to the source's region"
        )
