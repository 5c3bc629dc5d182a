"""Random patch positions weighted by a mask, or balanced over label classes, without rejection.

Every position ``p`` of a split gets a weight ``w(p)`` from one sampled array:

- **coverage** (``patch_weights="mask"``): the fraction of the patch's elements where the mask
  is nonzero (NaN counts as zero; past a padded edge, as zero);
- **minimum coverage** (``patch_min_coverage=t`` as well): 1 where that fraction is at least
  ``t``, else 0: uniform over the positions that meet the rule;
- **class balance** (``balance="labels"``): the class ``c(p)`` is the label at the patch's centre;
  ``w(p) = share(c) / N(c)``, ``N(c)`` counting the positions of class ``c``, so that each class
  is drawn with frequency ``share(c)`` (equal over the classes present, unless given).

Positions are drawn with probability ``w(p) / W`` in two stages, exactly:

1. a region (one reference chunk of origins, :mod:`insitu.plan.patches_regions`) with
   probability ``W(r) / W``, ``W(r)`` the sum of its positions' weights: the *region summary*,
   computed once per (array bytes, patch grid, rule) in a streaming pass
   (:mod:`insitu.engine.patch_summaries`) and kept; the epoch's draws are split over the
   regions multinomially, as uniform random sampling splits them by position counts;
2. inside the region, its draws among its positions with probability ``w(p) / W(r)``, the
   weights computed from the array's values around the region (its chunks and the halo its
   patches reach), which the pass decodes anyway for the block.

A region whose summary is zero gets no draw, so its chunks are never read, for the mask or for
any other array: with a mask positive in one quadrant the image's chunks elsewhere are not
fetched.

The footprint of a region (:func:`footprint_box`) is what stage 2 and the summary pass read;
:func:`box_values` turns it into per-position values (a coverage fraction or a centre class)
for each box of positions at once, :func:`position_weights` into weights.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from insitu.errors import ConfigError

__all__ = [
    "PositionWeighting",
    "RegionSummary",
    "box_values",
    "footprint_box",
    "integral_image",
    "position_weights",
    "region_weights",
    "weighting_from_options",
]

COVERAGE, MIN_COVERAGE, BALANCE = "coverage", "min_coverage", "balance"


@dataclass(frozen=True)
class PositionWeighting:
    """The rule that weights random positions: by the coverage of a mask array (``label``), by a
    minimum coverage, or balanced over the classes of an integer label array."""

    mode: str
    label: str
    min_coverage: float | None = None
    shares: Mapping[int, float] | None = None  # balance: wanted frequency per class (None: equal)

    def describe(self) -> dict[str, Any]:
        """The rule as JSON-able values (part of a summary's identity)."""
        shares = None if self.shares is None else {str(k): float(v) for k, v in sorted(self.shares.items())}
        return {"mode": self.mode, "label": self.label, "min_coverage": self.min_coverage, "shares": shares}

    @property
    def summary_rule(self) -> str:
        """What the region summary holds: weight sums (coverage), counts (minimum coverage), or
        positions per class (balance; the shares apply after, so one summary serves any shares)."""
        if self.mode == MIN_COVERAGE:
            return f"min_coverage:{self.min_coverage!r}"
        return self.mode


def weighting_from_options(
    patch_weights: str | None,
    patch_min_coverage: float | None,
    balance: str | Mapping[str, Mapping[int, float]] | None,
    *,
    sampling: str | None,
) -> PositionWeighting | None:
    """The weighting the dataset's keywords ask for (``None``: uniform), after checking them."""
    if patch_weights is None and balance is None:
        if patch_min_coverage is not None:
            raise ConfigError(
                "patch_min_coverage applies to patch_weights: name the mask array with patch_weights="
            )
        return None
    if sampling != "random":
        which = "patch_weights" if patch_weights is not None else "balance"
        got = "no patch" if sampling is None else f"patch_sampling={sampling!r}"
        raise ConfigError(f"{which} weights random patch positions: pass patch_sampling='random' (got {got})")
    if patch_weights is not None and balance is not None:
        raise ConfigError("patch_weights and balance are two rules for the same draw: give one of them")
    if patch_weights is not None:
        if not isinstance(patch_weights, str):
            raise ConfigError(f"patch_weights={patch_weights!r}; expected the name of a mask array")
        if patch_min_coverage is None:
            return PositionWeighting(COVERAGE, patch_weights)
        t = float(patch_min_coverage)
        if not 0.0 < t <= 1.0 or math.isnan(t):
            raise ConfigError(f"patch_min_coverage={patch_min_coverage!r}; expected a fraction in (0, 1]")
        return PositionWeighting(MIN_COVERAGE, patch_weights, min_coverage=t)
    if patch_min_coverage is not None:
        raise ConfigError("patch_min_coverage applies to patch_weights, not to balance")
    if isinstance(balance, str):
        return PositionWeighting(BALANCE, balance)
    if isinstance(balance, Mapping) and len(balance) == 1:
        ((label, shares),) = balance.items()
        if isinstance(label, str) and isinstance(shares, Mapping) and shares:
            parsed: dict[int, float] = {}
            for k, v in shares.items():
                if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
                    raise ConfigError(f"balance class {k!r} of {label!r}: classes are integers")
                share = float(v)
                if not share > 0 or not math.isfinite(share):
                    raise ConfigError(
                        f"balance share {v!r} of class {k} of {label!r}: expected a positive number"
                    )
                parsed[int(k)] = share
            return PositionWeighting(BALANCE, label, shares=parsed)
    raise ConfigError(
        f"balance={balance!r}; expected the name of an integer label array, or "
        "{name: {class: share, ...}} for other frequencies than equal"
    )


@dataclass(frozen=True, eq=False)
class RegionSummary:
    """Per region: the sum of its positions' weights (coverage), how many meet the minimum
    coverage, or (balance) how many positions of each class it holds (``(n_regions,
    len(classes))``)."""

    values: np.ndarray
    classes: np.ndarray | None = None
    fingerprint: str = ""
    _totals: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def class_totals(self) -> np.ndarray:
        """Positions per class over every region (balance)."""
        found = self._totals.get("class")
        if found is None:
            found = self._totals["class"] = self.values.sum(axis=0)
        return found


def _class_shares(weighting: PositionWeighting, summary: RegionSummary) -> np.ndarray:
    """The weight of one position of each class of the summary: ``share(c) / N(c)``."""
    assert summary.classes is not None
    totals = summary.class_totals
    present = summary.classes[totals > 0]
    if weighting.shares is None:
        share = np.where(totals > 0, 1.0, 0.0)
    else:
        missing = sorted(c for c in weighting.shares if c not in set(present.tolist()))
        if missing:
            raise ConfigError(
                f"balance asks for class(es) {missing} of {weighting.label!r}, which no position of the "
                f"split has at its centre (classes present: {present.tolist()})"
            )
        share = np.array([weighting.shares.get(int(c), 0.0) for c in summary.classes], dtype=np.float64)
    share = share / share.sum()
    return np.divide(share, totals, out=np.zeros(len(totals)), where=totals > 0)


def region_weights(weighting: PositionWeighting, summary: RegionSummary) -> np.ndarray:
    """``W(r)`` for every region: what stage 1 draws regions by."""
    if weighting.mode != BALANCE:
        return summary.values.astype(np.float64, copy=False)
    return summary.values @ _class_shares(weighting, summary)


def position_weights(weighting: PositionWeighting, summary: RegionSummary, values: np.ndarray) -> np.ndarray:
    """``w(p)`` from per-position values (:func:`position_values`) of one region."""
    if weighting.mode == COVERAGE:
        return values.astype(np.float64, copy=False)
    if weighting.mode == MIN_COVERAGE:
        assert weighting.min_coverage is not None
        return (values >= weighting.min_coverage - 1e-12).astype(np.float64)
    assert summary.classes is not None
    per_class = _class_shares(weighting, summary)
    index = np.searchsorted(summary.classes, values)
    index = np.minimum(index, len(summary.classes) - 1)
    known = summary.classes[index] == values
    return np.where(known, per_class[index], 0.0)


#: Per axis, the origins (in the weighting array's indices) of one box of positions: the
#: positions are their outer product, in C order, as :meth:`PatchSet.box_positions` numbers them.
AxisOrigins = tuple[np.ndarray, ...]


def footprint_box(
    weighting: PositionWeighting, boxes: list[AxisOrigins], own_box: tuple[int, ...], shape: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The box ``[lo, hi)`` of the weighting array that the positions of ``boxes`` need: their
    whole patches, or their centres (origins are non-decreasing along each axis)."""
    ndim = len(own_box)
    first = [min(int(b[d][0]) for b in boxes) for d in range(ndim)]
    last = [max(int(b[d][-1]) for b in boxes) for d in range(ndim)]
    if weighting.mode == BALANCE:
        lo = [f + (s - 1) // 2 for f, s in zip(first, own_box, strict=True)]
        hi = [e + (s - 1) // 2 + 1 for e, s in zip(last, own_box, strict=True)]
    else:
        lo, hi = first, [e + s for e, s in zip(last, own_box, strict=True)]
    return tuple(lo), tuple(min(h, n) for h, n in zip(hi, shape, strict=True))


def box_values(
    weighting: PositionWeighting,
    footprint: np.ndarray,
    lo: tuple[int, ...],
    origins: AxisOrigins,
    own_box: tuple[int, ...],
    integral: np.ndarray | None = None,
) -> np.ndarray:
    """Per position of one box (C order): the coverage fraction of its patch (coverage rules) or
    the class at its centre (balance), from ``footprint``, the weighting array's values over
    ``[lo, lo + footprint.shape)``; ``integral`` is :func:`integral_image` of it (coverage)."""
    local = [o - start for o, start in zip(origins, lo, strict=True)]
    if weighting.mode == BALANCE:
        centres = [a + (s - 1) // 2 for a, s in zip(local, own_box, strict=True)]
        return footprint[np.ix_(*centres)].astype(np.int64).ravel()
    if integral is None:
        integral = integral_image(footprint)
    ends = [np.minimum(a + s, n) for a, s, n in zip(local, own_box, footprint.shape, strict=True)]
    ndim = footprint.ndim
    total = np.zeros(tuple(len(a) for a in local), dtype=np.int64)
    for corner in itertools.product((0, 1), repeat=ndim):
        pick = tuple(_run(e if bit else a) for a, e, bit in zip(local, ends, corner, strict=True))
        sign = -1 if (ndim - sum(corner)) % 2 else 1
        # Consecutive indices on every axis (stride 1, the usual random draw): a view, not a gather.
        corner_sums = (
            integral[pick]
            if all(isinstance(i, slice) for i in pick)
            else integral[np.ix_(*map(_index, pick))]
        )
        if sign > 0:
            total += corner_sums
        else:
            total -= corner_sums
    return (total / float(math.prod(own_box))).ravel()


def _run(indices: np.ndarray) -> slice | np.ndarray:
    """``indices`` as a slice when they are consecutive, else as they are."""
    n = len(indices)
    if n and int(indices[-1]) - int(indices[0]) == n - 1 and (n < 3 or bool((np.diff(indices) == 1).all())):
        return slice(int(indices[0]), int(indices[-1]) + 1)
    return indices


def _index(pick: slice | np.ndarray) -> np.ndarray:
    return np.arange(pick.start, pick.stop) if isinstance(pick, slice) else pick


def integral_image(footprint: np.ndarray) -> np.ndarray:
    """Counts of nonzero (not NaN) elements over every box from the origin, with a zero row in
    front on every axis: a box sum is ``2^ndim`` lookups."""
    positive = footprint != 0
    if footprint.dtype.kind in "fc":
        positive &= ~np.isnan(footprint)
    # int32 while the counts fit (half the memory traffic of the cumulative sums).
    kind = np.int32 if positive.size < 2**31 else np.int64
    integral = np.zeros(tuple(n + 1 for n in positive.shape), dtype=kind)
    integral[(slice(1, None),) * positive.ndim] = positive
    for d in range(positive.ndim):
        np.cumsum(integral, axis=d, out=integral)
    return integral


def summary_identity(parts: Mapping[str, Any]) -> str:
    """A short hash of what a summary depends on (array identity and bytes, grid, rule)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:32]
