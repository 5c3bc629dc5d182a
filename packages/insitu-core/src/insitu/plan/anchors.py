"""Which samples can anchor a batch: those at which every label, at its offset, lies inside
its array; and what each split loses to that at the ends of the data."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from insitu.arrays.geometry import ArrayGeometry
from insitu.errors import ConfigError
from insitu.plan.splits import SplitManifest

logger = logging.getLogger("insitu")


def anchor_range(labels: Sequence[ArrayGeometry], manifest: SplitManifest) -> tuple[int, int]:
    """``[lo, hi)``: the anchors at which every label reads inside its array."""
    n = manifest.n_samples
    for g in labels:
        if g.n_samples != n:
            raise ConfigError(
                f"sample-axis length of {g.label!r} is {g.n_samples}, but the manifest "
                f"(built on {manifest.label!r}) has {n}; every label must share the sample axis"
            )
    lo = max(max(-g.offset for g in labels), 0)
    hi = min(n - g.offset for g in labels)
    if lo >= hi:
        offsets = {g.label: g.offset for g in labels}
        raise ConfigError(f"offsets {offsets} leave no valid anchor in {n} samples")
    return lo, hi


def unused_anchors(
    manifest: SplitManifest, anchors: tuple[int, int], labels: Sequence[ArrayGeometry]
) -> dict[str, int]:
    """Per split, its samples that cannot be anchors (logged); a split left with none is refused."""
    lo, hi = anchors
    out: dict[str, int] = {}
    for name in manifest.names:
        total = manifest.count_samples(name)
        if total == 0:
            continue  # an empty split (fraction 0) is allowed and yields nothing
        valid = manifest.count_samples(name, within=(lo, hi))
        if valid == 0:
            raise ConfigError(
                f"split {name!r} has no valid anchor: its samples lie outside [{lo}, {hi}) "
                f"given offsets {[g.offset for g in labels]}"
            )
        unused = total - valid
        if unused:
            out[name] = unused
            offsets = {g.label: g.offset for g in labels if g.offset}
            message = (
                f"split {name!r}: {unused} of its {total} samples are not delivered: with offsets "
                f"{offsets} only samples {lo}..{hi - 1} have every label inside the arrays"
            )
            # Expected at the ends of the data with windows; a split the user bounded by date
            # (split_by_coord) losing samples deserves a warning, so it is not silent.
            level = logging.WARNING if getattr(manifest, "ranges", None) else logging.INFO
            logger.log(level, "%s", message)
    return out
