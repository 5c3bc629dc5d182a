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

from insitu.arrays.coregistration import Scale
from insitu.errors import ConfigError
from insitu.plan.patch_weights import (
    BALANCE,
    COVERAGE,
    PositionWeighting,
    RegionSummary,
    box_values,
    footprint_box,
    integral_image,
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
) -> np.ndarray | None:
    """The values under ``weighting`` (coverage or centre class) of the positions of a region's
    ``boxes``, box after box as :meth:`PatchSet.positions` lists them, from the weighting array's
    footprint of them; with ``skip_empty``, ``None`` when a coverage rule's footprint holds no
    foreground at all (then no position is listed)."""
    grid = patches.grid
    per_box: list[tuple[np.ndarray, ...]] = []
    for b in boxes.tolist():
        axes = []
        for d, (axis, k) in enumerate(zip(grid.axes, scale, strict=True)):
            o = axis.origins(np.arange(patches.lo[b, d], patches.hi[b, d], dtype=np.int64))
            axes.append(o if k == 1 else (o * k.numerator) // k.denominator)
        per_box.append(tuple(axes))
    lo, hi = footprint_box(weighting, per_box, own_box, shape)
    footprint = values_of(lo, hi)
    coverage = weighting.mode != BALANCE
    if skip_empty and coverage and not footprint.any():
        return None
    integral = integral_image(footprint) if coverage else None
    parts = [box_values(weighting, footprint, lo, origins, own_box, integral) for origins in per_box]
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


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
        positions = patches.positions(boxes)
        values = region_values(
            self.weighting, patches, boxes, self.scale, self.own_box, self.shape, values_of
        )
        assert values is not None  # asked without skip_empty
        weights = position_weights(self.weighting, self.summary, values)
        total = float(weights.sum())
        if not total > 0:
            raise RuntimeError(
                f"region {region} of {self.weighting.label!r} has no weight in its decoded values, though "
                "its summary gave it some: the array changed after its summary was computed"
            )
        chosen = rng.choice(len(positions), size=count, p=weights / total)
        return positions[chosen]
