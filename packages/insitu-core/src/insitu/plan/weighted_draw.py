"""The two stages of a weighted random draw (:mod:`insitu.plan.patch_weights`) for one split.

Stage 1 is :meth:`WeightedDraw.region_shares`: the regions' shares of an epoch's draws, from the
split's region summary. Stage 2 is :meth:`WeightedDraw.draw`: one region's draws among its
positions, by weights computed from the weighting array's values over the region's footprint,
which the pass reads from the block's decoded chunks (``values_of``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from insitu.arrays.coregistration import Scale, scale_origins
from insitu.errors import ConfigError
from insitu.plan.patch_weights import (
    BALANCE,
    COVERAGE,
    PositionWeighting,
    RegionSummary,
    footprint_box,
    position_values,
    position_weights,
    region_weights,
)
from insitu.plan.patches_regions import PatchSet

#: The weighting array's values over the box ``[lo, hi)`` of its own indices.
ValuesOf = Callable[[tuple[int, ...], tuple[int, ...]], np.ndarray]

__all__ = ["ValuesOf", "WeightedDraw", "region_values"]


def region_values(
    weighting: PositionWeighting,
    patches: PatchSet,
    boxes: np.ndarray,
    scale: Scale,
    own_box: tuple[int, ...],
    shape: tuple[int, ...],
    values_of: ValuesOf,
    *,
    skip_empty: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]:
    """The positions of a region's ``boxes`` and their values under ``weighting`` (coverage or
    centre class), from the weighting array's footprint of them; with ``skip_empty``, values
    ``None`` when a coverage rule's footprint holds no foreground at all."""
    positions = patches.positions(boxes)
    own = scale_origins(patches.grid.origins(positions), scale)
    lo, hi = footprint_box(weighting, own, own_box, shape)
    footprint = values_of(lo, hi)
    if skip_empty and weighting.mode != BALANCE and not footprint.any():
        return positions, None
    return positions, position_values(weighting, footprint, lo, own, own_box)


@dataclass(frozen=True, eq=False)
class WeightedDraw:
    """A weighting with the summary of one split's regions, and how the weighting array sits
    against the reference (its index scale, the box a patch reads in it, its shape)."""

    weighting: PositionWeighting
    summary: RegionSummary
    scale: Scale
    own_box: tuple[int, ...]
    shape: tuple[int, ...]

    def region_shares(self, units: np.ndarray, split: str) -> np.ndarray:
        """Every region's share of the draws: ``W(r) / W`` over the regions holding positions."""
        weights = np.where(units > 0, region_weights(self.weighting, self.summary), 0.0)
        total = float(weights.sum())
        if not total > 0:
            w = self.weighting
            if w.mode == COVERAGE:
                why = f"the mask {w.label!r} is zero under every patch position"
            elif w.mode == BALANCE:
                why = f"no position has a class of {w.label!r} at its centre"
            else:
                why = f"no patch reaches coverage {w.min_coverage} of the mask {w.label!r}"
            raise ConfigError(f"split {split!r} has no position to draw: {why}")
        return weights / total

    def draw(
        self,
        patches: PatchSet,
        region: int,
        boxes: np.ndarray,
        count: int,
        rng: np.random.Generator,
        values_of: ValuesOf | None,
    ) -> np.ndarray:
        """``count`` positions of ``region`` (its ``boxes``), drawn with replacement by weight."""
        if count == 0:
            return np.zeros(0, dtype=np.int64)
        if values_of is None:
            raise RuntimeError(
                "internal error: a weighted order's positions are drawn from the weighting array's "
                "decoded values, which only a pass reading its chunks can give"
            )
        positions, values = region_values(
            self.weighting, patches, boxes, self.scale, self.own_box, self.shape, values_of
        )
        assert values is not None  # only a coverage rule skips an empty footprint
        weights = position_weights(self.weighting, self.summary, values)
        total = float(weights.sum())
        if not total > 0:
            raise RuntimeError(
                f"region {region} of {self.weighting.label!r} has no weight in its decoded values, though "
                "its summary gave it some: the array changed after its summary was computed"
            )
        chosen = rng.choice(len(positions), size=count, p=weights / total)
        return positions[chosen]
