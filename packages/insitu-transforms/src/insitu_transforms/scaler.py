"""StandardScaler: per-label standardisation as a batch transform, fitted by streaming a view."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from insitu.batch import Batch

# A windowed label such as "t2m+24" reads the same variable as "t2m", so it shares its statistics.
_SHIFTED = re.compile(r"^(?P<base>.+?)[+-]\d+$")


def base_label(label: str) -> str:
    """``"t2m+24"`` -> ``"t2m"``; labels without an offset suffix are returned unchanged."""
    match = _SHIFTED.match(label)
    return match["base"] if match else label


class _RunningMoments:
    """Count, mean and sum of squared deviations, merged batch by batch (Chan et al.)."""

    def __init__(self) -> None:
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0

    def update(self, values: np.ndarray) -> None:
        flat = np.asarray(values, dtype=np.float64).ravel()
        finite = np.isfinite(flat)
        if not finite.all():  # missing values (NaN over land, fill values) do not count
            flat = flat[finite]
        n = flat.size
        if n == 0:
            return
        batch_mean = float(flat.mean())
        batch_m2 = float(np.square(flat - batch_mean).sum())
        total = self.count + n
        delta = batch_mean - self.mean
        self.mean += delta * n / total
        self.m2 += batch_m2 + delta * delta * self.count * n / total
        self.count = total

    @property
    def std(self) -> float:
        return float(np.sqrt(self.m2 / self.count)) if self.count else 0.0


class StandardScaler:
    """``(x - mean) / std`` per label, applied to every batch.

    ``mean`` and ``std`` map labels to scalars or to arrays broadcastable to
    a label's batch arrays ``(B, *sample_shape)``. Labels without statistics
    pass through unchanged; a shifted label (``"t2m+24"``) uses the
    statistics of its base variable (``"t2m"``) unless it has its own.
    Float arrays keep their dtype; integer arrays become float32.

    Use it as a batch transform, ``InSituDataset(..., batch_transforms=[scaler])``,
    and ``inverse`` to bring predictions back to physical units.
    """

    def __init__(self, mean: Mapping[str, Any], std: Mapping[str, Any]) -> None:
        if set(mean) != set(std):
            raise ValueError(f"mean and std must cover the same labels, got {sorted(mean)} and {sorted(std)}")
        self._mean = {label: np.asarray(value, dtype=np.float64) for label, value in mean.items()}
        self._std: dict[str, np.ndarray] = {}
        for label, value in std.items():
            scale = np.asarray(value, dtype=np.float64)
            if np.any(scale < 0) or not np.all(np.isfinite(scale)):
                raise ValueError(f"std for {label!r} must be finite and non-negative")
            # A constant field has std 0: leave its spread alone rather than dividing by zero.
            self._std[label] = np.where(scale == 0, 1.0, scale)

    @classmethod
    def fit(
        cls,
        view: Iterable[Mapping[str, np.ndarray]],
        *,
        labels: Iterable[str] | None = None,
        max_batches: int | None = None,
    ) -> StandardScaler:
        """Scalar mean and std per label from one streaming pass over ``view``.

        ``view`` is any iterable of batches (a ``DatasetView`` such as
        ``ds.train``). Memory stays at one batch; NaN and inf are ignored.
        ``labels`` defaults to every label of the first batch, minus shifted
        labels whose base label is also present (they read the same data).
        ``max_batches`` stops early for a quick estimate.
        """
        moments: dict[str, _RunningMoments] = {}
        wanted = None if labels is None else list(labels)
        for n, batch in enumerate(view):
            if max_batches is not None and n >= max_batches:
                break
            if wanted is None:
                present = set(batch)
                wanted = [lab for lab in batch if base_label(lab) == lab or base_label(lab) not in present]
            for label in wanted:
                moments.setdefault(label, _RunningMoments()).update(batch[label])
        if not moments:
            raise ValueError("cannot fit a StandardScaler: the view yielded no batches")
        empty = [label for label, m in moments.items() if m.count == 0]
        if empty:
            raise ValueError(f"no finite values to fit for labels {empty}")
        return cls({k: m.mean for k, m in moments.items()}, {k: m.std for k, m in moments.items()})

    @property
    def labels(self) -> tuple[str, ...]:
        """Labels with statistics (shifted labels resolve to these)."""
        return tuple(self._mean)

    def stats(self, label: str) -> tuple[np.ndarray, np.ndarray] | None:
        """``(mean, std)`` used for ``label``, or ``None`` when it passes through."""
        key = label if label in self._mean else base_label(label)
        if key not in self._mean:
            return None
        return self._mean[key], self._std[key]

    def transform(self, label: str, array: np.ndarray) -> np.ndarray:
        """Standardise one array; returns ``array`` itself for labels without statistics."""
        found = self.stats(label)
        if found is None:
            return array
        dtype = array.dtype if np.issubdtype(array.dtype, np.floating) else np.dtype(np.float32)
        mean, std = found
        # Multiply by the reciprocal in the array's own dtype: one pass, no float64 temporaries.
        return (array - mean.astype(dtype)) * (1.0 / std).astype(dtype)

    def inverse(self, label: str, array: np.ndarray) -> np.ndarray:
        """Undo ``transform`` (for predictions of ``label``)."""
        found = self.stats(label)
        if found is None:
            return array
        dtype = array.dtype if np.issubdtype(array.dtype, np.floating) else np.dtype(np.float32)
        mean, std = found
        return array * std.astype(dtype) + mean.astype(dtype)

    def __call__(self, batch: Batch) -> Batch:
        """Batch transform: a new ``Batch`` with every covered label standardised."""
        return batch.replace({label: self.transform(label, array) for label, array in batch.items()})

    def fingerprint(self) -> str:
        """Stable digest of the statistics, for cache keys."""
        digest = hashlib.sha256(b"StandardScaler/1")
        for label in sorted(self._mean):
            for part in (self._mean[label], self._std[label]):
                digest.update(label.encode())
                digest.update(repr(part.shape).encode())
                digest.update(np.ascontiguousarray(part).tobytes())
        return f"StandardScaler:{digest.hexdigest()[:16]}"

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """JSON-ready statistics, to store next to a model checkpoint."""
        return {
            label: {"mean": self._mean[label].tolist(), "std": self._std[label].tolist()}
            for label in self._mean
        }

    @classmethod
    def from_dict(cls, state: Mapping[str, Mapping[str, Any]]) -> StandardScaler:
        """Rebuild a scaler saved with ``to_dict``."""
        return cls({k: v["mean"] for k, v in state.items()}, {k: v["std"] for k, v in state.items()})

    def __repr__(self) -> str:
        return f"StandardScaler(labels={list(self._mean)})"


__all__ = ["StandardScaler", "base_label"]
