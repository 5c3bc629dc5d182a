"""Chunk-aligned train/val/test splits with a JSON round-trip.

Splits are made of whole chunks of one reference array along the sample axis,
contiguous by default, so neighbouring (correlated) samples stay together and
no chunk is shared between two splits of that array.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitu.errors import ConfigError
from insitu.geometry import ArrayGeometry, is_integer
from insitu.options import flag, seed_value

DEFAULT_NAMES = ("train", "val", "test")
_FORMAT = "insitu.SplitManifest/1"


@dataclass(frozen=True)
class SplitManifest:
    """Which chunks (along the sample axis of ``label``) belong to which split."""

    label: str
    n_samples: int
    chunk_len: int
    splits: Mapping[str, tuple[int, ...]]
    sample_range: tuple[int, int]
    seed: int = 0
    contiguous: bool = True
    sample_axis: int = 0
    sample_dim: str | None = None  # dimension name of the sample axis, when the array has names

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.splits)

    def chunks(self, split: str) -> tuple[int, ...]:
        """Chunk ids of ``split``."""
        self._check(split)
        return self.splits[split]

    def chunk_samples(self, chunk: int) -> np.ndarray:
        """Sample indices of one chunk, clipped to ``sample_range``."""
        lo = max(chunk * self.chunk_len, self.sample_range[0])
        hi = min((chunk + 1) * self.chunk_len, self.sample_range[1], self.n_samples)
        return np.arange(lo, max(lo, hi), dtype=np.int64)

    def samples(self, split: str) -> np.ndarray:
        """All sample indices of ``split``, ascending."""
        parts = [self.chunk_samples(c) for c in sorted(self.chunks(split))]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def _check(self, split: str) -> None:
        if split not in self.splits:
            raise ConfigError(f"unknown split {split!r}; this manifest has {list(self.splits)}")

    def to_json(self) -> str:
        """Serialise to JSON (see :meth:`from_json`)."""
        return json.dumps(
            {
                "format": _FORMAT,
                "label": self.label,
                "n_samples": self.n_samples,
                "chunk_len": self.chunk_len,
                "sample_range": list(self.sample_range),
                "seed": self.seed,
                "contiguous": self.contiguous,
                "sample_axis": self.sample_axis,
                "sample_dim": self.sample_dim,
                "splits": {k: list(v) for k, v in self.splits.items()},
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> SplitManifest:
        """Parse a manifest written by :meth:`to_json`."""
        raw: dict[str, Any] = json.loads(text)
        if raw.get("format") != _FORMAT:
            raise ConfigError(f"not a split manifest (format={raw.get('format')!r}, expected {_FORMAT!r})")
        return cls(
            label=raw["label"],
            n_samples=int(raw["n_samples"]),
            chunk_len=int(raw["chunk_len"]),
            splits={k: tuple(int(c) for c in v) for k, v in raw["splits"].items()},
            sample_range=(int(raw["sample_range"][0]), int(raw["sample_range"][1])),
            seed=int(raw["seed"]),
            contiguous=bool(raw["contiguous"]),
            sample_axis=int(raw.get("sample_axis", 0)),
            sample_dim=raw.get("sample_dim"),
        )


def split_by_chunk(
    geom: ArrayGeometry,
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
    *,
    names: Sequence[str] | None = None,
    seed: int = 0,
    contiguous: bool = True,
    sample_range: tuple[int, int] | None = None,
) -> SplitManifest:
    """Split the chunks of ``geom`` along its sample axis by ``fractions``.

    Every chunk overlapping ``sample_range`` (default: all samples) goes to
    exactly one split. ``contiguous=True`` keeps each split one run of
    neighbouring chunks (train first); otherwise chunks are dealt at random
    from ``seed``. Chunk counts are rounded by largest remainder; a split with
    fraction 0 exists and is empty, and a positive fraction that would get no
    chunk is an error.
    """
    if not isinstance(geom, ArrayGeometry):
        raise ConfigError(f"split_by_chunk splits an ArrayGeometry, got {type(geom).__name__}: {geom!r}")
    fracs = _fractions(fractions)
    names = _names(names, fracs)
    seed = seed_value("seed", seed)  # checked even when contiguous: a bad seed is a mistake either way
    contiguous = flag("contiguous", contiguous)
    n = geom.n_samples
    lo, hi = _sample_range(sample_range, n)
    c = geom.chunk_len
    chunk_ids = np.arange(lo // c, math.ceil(hi / c), dtype=np.int64)
    counts = _largest_remainder(fracs, len(chunk_ids))
    # A zero fraction is a split that exists and is empty ("train only": (1.0, 0.0, 0.0)); a
    # positive fraction that rounds to no chunk is an error, since the user asked for samples.
    empty = [name for name, f, k in zip(names, fracs, counts, strict=True) if k == 0 and f > 0]
    if empty:
        raise ConfigError(
            f"split(s) {empty} would get no chunk: {len(chunk_ids)} chunk(s) of {c} samples "
            f"cannot be divided by fractions {tuple(fracs)}"
        )
    if not contiguous:
        chunk_ids = np.random.default_rng(seed).permutation(chunk_ids)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    splits = {
        name: tuple(int(x) for x in np.sort(chunk_ids[bounds[i] : bounds[i + 1]]))
        for i, name in enumerate(names)
    }
    return SplitManifest(
        label=geom.label,
        n_samples=n,
        chunk_len=c,
        splits=splits,
        sample_range=(lo, hi),
        seed=seed,
        contiguous=contiguous,
        sample_axis=geom.sample_axis,
        sample_dim=geom.dimension_names[geom.sample_axis] if geom.dimension_names else None,
    )


def _fractions(fractions: Any) -> list[float]:
    """Each split's share: real numbers, non-negative, at least one positive, summing to 1."""
    try:
        given = list(fractions)
    except TypeError:
        raise ConfigError(f"fractions must be a sequence of numbers, got {fractions!r}") from None
    if not given:
        raise ConfigError("fractions is empty; give one fraction per split, e.g. (0.8, 0.1, 0.1)")
    if not all(_is_real(f) for f in given):
        raise ConfigError(f"fractions must be a sequence of numbers, got {fractions!r}")
    fracs = [float(f) for f in given]
    if any(not math.isfinite(f) or f < 0 for f in fracs) or not any(f > 0 for f in fracs):
        raise ConfigError(f"fractions must be non-negative with at least one positive, got {tuple(fracs)}")
    if abs(sum(fracs) - 1.0) > 1e-6:
        raise ConfigError(f"fractions must sum to 1, got {tuple(fracs)} (sum {sum(fracs):g})")
    return fracs


def _names(names: Any, fracs: Sequence[float]) -> tuple[str, ...]:
    """One unique, non-empty name per fraction; ``train``, ``val``, ``test`` by default."""
    if names is None:
        if len(fracs) > len(DEFAULT_NAMES):
            raise ConfigError(f"{len(fracs)} fractions but no names; pass names= for more than 3 splits")
        return DEFAULT_NAMES[: len(fracs)]
    if isinstance(names, str):  # "ab" would otherwise be the splits "a" and "b"
        raise ConfigError(f"names must be a sequence of split names, got the string {names!r}")
    try:
        given = tuple(names)
    except TypeError:
        raise ConfigError(f"names must be a sequence of split names, got {names!r}") from None
    if not all(isinstance(name, str) and name for name in given):
        raise ConfigError(f"names must be non-empty strings, got {given!r}")
    if len(given) != len(fracs) or len(set(given)) != len(given):
        raise ConfigError(f"names {given} must be unique and match fractions {tuple(fracs)}")
    return given


def _sample_range(sample_range: Any, n: int) -> tuple[int, int]:
    """``(start, stop)``: integers with ``0 <= start < stop <= n`` (1.5 is not a sample index)."""
    if sample_range is None:
        return 0, n
    try:
        lo, hi = sample_range
    except (TypeError, ValueError):
        raise ConfigError(f"sample_range must be a (start, stop) pair, got {sample_range!r}") from None
    if not (is_integer(lo) and is_integer(hi) and 0 <= lo < hi <= n):
        raise ConfigError(f"sample_range={sample_range!r} must be integers with 0 <= start < stop <= {n}")
    return int(lo), int(hi)


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def _largest_remainder(fracs: Sequence[float], total: int) -> list[int]:
    exact = [f * total for f in fracs]
    counts = [math.floor(x) for x in exact]
    positive = [i for i in range(len(fracs)) if fracs[i] > 0]  # a zero fraction never gets a chunk
    order = sorted(positive, key=lambda i: (exact[i] - counts[i], -i), reverse=True)
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts
