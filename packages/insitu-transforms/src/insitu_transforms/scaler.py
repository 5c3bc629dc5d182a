"""StandardScaler: standardisation as a batch transform, fitted by streaming a view.

Statistics are a scalar per label by default, or per index of some dimensions
(``per=("level",)``: one mean and std per pressure level, over time and the
grid). They are fitted in one pass over a split, kept with the labels,
dimensions and split manifest they were fitted on (:meth:`StandardScaler.save`),
and checked against those when loaded and applied.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from insitu.plugin_api import Batch, ConfigError, Progress, SplitManifest, track
from insitu_transforms.dims import (
    DimKey,
    DimsSource,
    base_label,
    check_keys,
    needs_table,
    resolve_axes,
)

#: Format tag of the files :meth:`StandardScaler.save` writes.
SCALER_FORMAT = "insitu_transforms.StandardScaler/1"


class _Moments:
    """Count, mean and sum of squared deviations per kept index, float64, merged batch by batch.

    Each batch's moments come from two passes over that batch; batches are
    merged with Chan et al.'s parallel formula, which stays accurate when the
    mean is large against the spread (temperatures in kelvin), unlike running
    sums of squares. Shapes are the batch's with every reduced axis kept as 1.
    """

    def __init__(self) -> None:
        self.count: np.ndarray | None = None
        self.mean: np.ndarray | None = None
        self.m2: np.ndarray | None = None

    def update(self, values: np.ndarray, reduce: tuple[int, ...]) -> None:
        x = np.asarray(values, dtype=np.float64)
        finite = np.isfinite(x)
        clean = bool(finite.all())
        if not clean:  # missing values (NaN over land, fill values) do not count
            x = np.where(finite, x, 0.0)
        n = np.count_nonzero(finite, axis=reduce, keepdims=True).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(n > 0, x.sum(axis=reduce, keepdims=True) / n, 0.0)
        dev = x - mean
        if not clean:
            dev = np.where(finite, dev, 0.0)
        m2 = np.square(dev).sum(axis=reduce, keepdims=True)
        if self.count is None or self.mean is None or self.m2 is None:
            self.count, self.mean, self.m2 = n, mean, m2
            return
        if n.shape != self.count.shape:
            raise ConfigError(
                f"batch statistics of shape {n.shape[1:]} after earlier batches of {self.count.shape[1:]}: "
                "the sample shape changed during the pass"
            )
        total = self.count + n
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(total > 0, n / total, 0.0)
        delta = mean - self.mean
        self.mean = self.mean + delta * share
        self.m2 = self.m2 + m2 + delta * delta * self.count * share
        self.count = total

    def result(self, *, scalar: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(count, mean, std)`` shaped like a sample with reduced axes of 1 (the row axis
        dropped), or 0-d with ``scalar``."""
        assert self.count is not None
        assert self.mean is not None
        assert self.m2 is not None
        count, mean, m2 = self.count[0], self.mean[0], self.m2[0]
        std = np.sqrt(m2 / np.maximum(count, 1))
        if scalar:
            return count.reshape(()), mean.reshape(()), std.reshape(())
        return count, mean, std


def manifest_digest(manifest: SplitManifest) -> str:
    """SHA-256 of a manifest's JSON, keys sorted: equal for equal manifests, whatever the layout."""
    canonical = json.dumps(json.loads(manifest.to_json()), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class StandardScaler:
    """``(x - mean) / std`` per label, applied to every batch.

    ``mean`` and ``std`` map labels to scalars or to arrays broadcastable to
    a label's batch arrays ``(B, *sample_shape)`` (a per-level scaler of a
    ``(level, lat, lon)`` field holds ``(n_levels, 1, 1)``). Labels without
    statistics pass through unchanged; a shifted label (``"t2m+24"``) uses
    the statistics of its base variable (``"t2m"``) unless it has its own.
    Float arrays keep their dtype; integer arrays become float32.

    Use it as a batch transform, ``InSituDataset(..., batch_transforms=[scaler])``,
    and ``inverse`` to bring predictions back to physical units. A batch
    none of whose labels has statistics (a scaler fitted for other variables),
    or an array whose shape the statistics do not fit (a per-level scaler for
    another number of levels), is a ConfigError naming the labels and shapes.
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
            if scale.shape != self._mean[label].shape:
                raise ValueError(
                    f"mean and std for {label!r} must have one shape, got {self._mean[label].shape} and {scale.shape}"
                )
            # A constant field has std 0: leave its spread alone rather than dividing by zero.
            self._std[label] = np.where(scale == 0, 1.0, scale)
        # What the statistics were fitted on, when known (fit, load): per label, the variable (array
        # name), its dimensions and those kept (``per``); and the split and manifest of the pass.
        self._info: dict[str, dict[str, Any]] = {label: {} for label in self._mean}
        self.split: str | None = None
        self.manifest: SplitManifest | None = None

    # -- fitting ----------------------------------------------------------------------------
    @classmethod
    def fit(
        cls,
        view: Iterable[Mapping[str, np.ndarray]] | Any,
        *,
        labels: Iterable[str] | None = None,
        max_batches: int | None = None,
        per: Sequence[DimKey] | DimKey = (),
        dims: DimsSource | None = None,
        split: str = "train",
        progress: Progress = False,
    ) -> StandardScaler:
        """Mean and std per label from one streaming pass over ``view``.

        ``view`` is an ``InSituDataset`` (its ``split`` view is read, ``"train"``
        by default), one of its views (``ds.train``), or any iterable of
        batches. Memory stays at one batch (two float64 copies of it); NaN and
        inf are ignored. The pass reads each chunk of the split once: every
        chunk is decoded once per pass. Shifted labels read the same array as
        their base label, so ``labels`` defaults to every label of the first
        batch minus shifted labels whose base label is also present; build the
        dataset from the base labels alone to read no chunk twice (a shifted
        label's rows reach into neighbouring chunks).

        ``per`` keeps some dimensions: one mean and std per index of them, over
        every other axis (rows included). Names are resolved with each
        label's dimension names (from the dataset's geometries, their
        ``delivered_dims``, or ``dims=`` for a plain iterable, see
        :mod:`insitu_transforms.dims`); integers are axis positions after the
        sample axis. A label without any of the named dimensions gets scalar
        statistics; a name no label has is an error. Statistics are merged
        batch by batch in float64 (Chan et al.), vectorised over the kept
        indices. ``max_batches`` stops early for a quick estimate.
        ``progress=True`` shows a bar (or lines) on stderr during the pass; a
        callable receives ``(batches_done, total)``.
        """
        from insitu.plugin_api import DatasetView, InSituDataset

        dataset: Any = None
        batches: Iterable[Mapping[str, np.ndarray]]
        if isinstance(view, InSituDataset):
            dataset, batches = view, view.view(split)
        elif isinstance(view, DatasetView):
            dataset, batches, split = view.dataset, view, view.split
        else:
            batches = view
        per_keys = check_keys(
            [per] if isinstance(per, (str, int, np.integer)) else per, "StandardScaler.fit per"
        )
        table = needs_table(
            per_keys, dims if dims is not None else dataset, key="label", what="StandardScaler.fit per"
        )
        moments: dict[str, _Moments] = {}
        kept: dict[str, dict[DimKey, int]] = {}
        wanted = None if labels is None else list(labels)
        if progress:
            total = len(batches) if hasattr(batches, "__len__") else None  # type: ignore[arg-type]
            if total is not None and max_batches is not None:
                total = min(total, max_batches)
            batches = track(batches, total=total, desc="fitting StandardScaler", progress=progress)
        for n, batch in enumerate(batches):
            if max_batches is not None and n >= max_batches:
                break
            if wanted is None:
                present = set(batch)
                wanted = [lab for lab in batch if base_label(lab) == lab or base_label(lab) not in present]
            for label in wanted:
                if label not in batch:
                    raise ConfigError(f"cannot fit label {label!r}: the batches hold {sorted(batch)}")
                values = np.asarray(batch[label])
                if label not in kept:
                    kept[label] = resolve_axes(
                        per_keys, table, label, max(values.ndim - 1, 0), what="StandardScaler.fit per"
                    )
                keep = {axis + 1 for axis in kept[label].values()}
                reduce = tuple(ax for ax in range(values.ndim) if ax not in keep)
                moments.setdefault(label, _Moments()).update(values, reduce)
        if not moments:
            raise ValueError("cannot fit a StandardScaler: the view yielded no batches")
        results = {label: m.result(scalar=not kept[label]) for label, m in moments.items()}
        empty = [label for label, (count, _, _) in results.items() if not np.any(count)]
        if empty:
            raise ValueError(f"no finite values to fit for labels {empty}")
        for label, (count, _, _) in results.items():
            if np.any(count == 0):
                where = np.argwhere(count == 0)[:5].tolist()
                raise ValueError(
                    f"label {label!r} has no finite value at index(es) {where} of its statistics (shape "
                    f"{count.shape}, per {list(kept[label])}): every value there is NaN"
                )
        scaler = cls({k: r[1] for k, r in results.items()}, {k: r[2] for k, r in results.items()})
        geoms = {g.label: g for g in (*dataset.labels, *dataset.statics)} if dataset is not None else {}
        for label in results:
            g = geoms.get(label) or geoms.get(base_label(label))
            scaler._info[label] = {
                "variable": g.name if g is not None else None,
                "dims": list(found)
                if table is not None and (found := table.lookup(label)) is not None
                else None,
                "per": list(kept[label]),
            }
        if dataset is not None:
            scaler.split, scaler.manifest = split, dataset.manifest
        return scaler

    # -- applying ---------------------------------------------------------------------------
    @property
    def labels(self) -> tuple[str, ...]:
        """Labels with statistics (shifted labels resolve to these)."""
        return tuple(self._mean)

    def per(self, label: str) -> tuple[DimKey, ...]:
        """The dimensions ``label``'s statistics keep (empty: a scalar, or not recorded)."""
        key = label if label in self._mean else base_label(label)
        return tuple(self._info.get(key, {}).get("per") or ())

    def stats(self, label: str) -> tuple[np.ndarray, np.ndarray] | None:
        """``(mean, std)`` used for ``label``, or ``None`` when it passes through."""
        key = label if label in self._mean else base_label(label)
        if key not in self._mean:
            return None
        return self._mean[key], self._std[key]

    def _fitting(self, label: str, array: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``stats(label)``, checked to fit ``array`` (rows first) without changing its shape."""
        found = self.stats(label)
        if found is None:
            return None
        mean = found[0]
        sample_shape = array.shape[1:]
        try:
            fits = np.broadcast_shapes(mean.shape, sample_shape) == sample_shape
        except ValueError:
            fits = False
        if not fits:
            key = label if label in self._mean else base_label(label)
            per = self.per(label)
            how = f"per {list(per)} " if per else ""
            dims = self._info.get(key, {}).get("dims")
            named = f" (dimensions {dims})" if dims else ""
            raise ConfigError(
                f"StandardScaler statistics for {key!r} are {how}of shape {mean.shape}{named}, which does not "
                f"fit {label!r} with sample shape {sample_shape} (array shape {array.shape}): a scaler fitted on "
                "another shape, such as another number of levels"
            )
        return found

    def transform(self, label: str, array: np.ndarray) -> np.ndarray:
        """Standardise one array (rows first); returns ``array`` itself for labels without statistics."""
        found = self._fitting(label, array)
        if found is None:
            return array
        dtype = array.dtype if np.issubdtype(array.dtype, np.floating) else np.dtype(np.float32)
        mean, std = found
        # Multiply by the reciprocal in the array's own dtype: one pass, no float64 temporaries.
        return (array - mean.astype(dtype)) * (1.0 / std).astype(dtype)

    def inverse(self, label: str, array: np.ndarray) -> np.ndarray:
        """Undo ``transform`` (for predictions of ``label``, rows first)."""
        found = self._fitting(label, array)
        if found is None:
            return array
        dtype = array.dtype if np.issubdtype(array.dtype, np.floating) else np.dtype(np.float32)
        mean, std = found
        return array * std.astype(dtype) + mean.astype(dtype)

    def __call__(self, batch: Batch) -> Batch:
        """Batch transform: a new ``Batch`` with every covered label standardised."""
        if len(batch) and not any(self.stats(label) is not None for label in batch):
            variables = {k: v.get("variable") for k, v in self._info.items() if v.get("variable")}
            fitted = f" (variables {variables})" if variables else ""
            raise ConfigError(
                f"StandardScaler has statistics for {list(self._mean)}{fitted}, but the batch holds "
                f"{list(batch)}: none of them is covered; was the scaler fitted for other variables?"
            )
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

    # -- saving -----------------------------------------------------------------------------
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

    def save(self, path: str | os.PathLike[str], *, manifest: SplitManifest | None = None) -> None:
        """Write the statistics to a JSON file, with what they cover.

        The file (format ``insitu_transforms.StandardScaler/1``) holds, per
        label: ``mean`` and ``std`` (nested lists, float64 written exactly),
        their ``shape``, the ``variable`` (array name), its ``dims`` and the
        dimensions kept (``per``); and the ``split`` fitted on, the split
        ``manifest`` (its JSON) and ``manifest_sha256``, so :meth:`load` can
        refuse statistics fitted on other data. ``manifest`` defaults to the
        one the scaler was fitted with."""
        manifest = manifest if manifest is not None else self.manifest
        if manifest is not None and not isinstance(manifest, SplitManifest):
            raise ConfigError(f"manifest must be a SplitManifest, got {type(manifest).__name__}")
        doc = {
            "format": SCALER_FORMAT,
            "split": self.split,
            "labels": {
                label: {
                    "variable": self._info[label].get("variable"),
                    "dims": self._info[label].get("dims"),
                    "per": self._info[label].get("per") or [],
                    "shape": list(self._mean[label].shape),
                    "mean": self._mean[label].tolist(),
                    "std": self._std[label].tolist(),
                }
                for label in self._mean
            },
            "manifest": None if manifest is None else json.loads(manifest.to_json()),
            "manifest_sha256": None if manifest is None else manifest_digest(manifest),
        }
        target = os.fspath(path)
        partial = f"{target}.partial"
        with open(partial, "w", encoding="utf-8") as f:  # then renamed: a crash never leaves half a file
            json.dump(doc, f, indent=1)
        os.replace(partial, target)

    @classmethod
    def load(cls, path: str | os.PathLike[str], manifest: SplitManifest | None = None) -> StandardScaler:
        """Read a scaler written by :meth:`save`.

        With ``manifest``, the file must have been saved with that same
        manifest (compared by digest), else ConfigError naming both; a file
        saved without one cannot be checked and is refused then."""
        where = os.fspath(path)
        try:
            with open(where, encoding="utf-8") as f:
                doc = json.load(f)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where} is not a StandardScaler file: {exc}") from exc
        if not isinstance(doc, dict) or doc.get("format") != SCALER_FORMAT:
            found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
            raise ConfigError(
                f"{where} is not a StandardScaler file (format={found!r}, expected {SCALER_FORMAT!r})"
            )
        entries = doc["labels"]
        scaler = cls(
            {k: np.asarray(v["mean"], dtype=np.float64).reshape(v["shape"]) for k, v in entries.items()},
            {k: np.asarray(v["std"], dtype=np.float64).reshape(v["shape"]) for k, v in entries.items()},
        )
        for label, v in entries.items():
            scaler._info[label] = {
                "variable": v.get("variable"),
                "dims": v.get("dims"),
                "per": v.get("per") or [],
            }
        scaler.split = doc.get("split")
        saved = doc.get("manifest")
        scaler.manifest = None if saved is None else SplitManifest.from_json(json.dumps(saved))
        if manifest is not None:
            _check_manifest(where, doc, manifest)
        return scaler

    def __repr__(self) -> str:
        per = {k: v["per"] for k, v in self._info.items() if v.get("per")}
        return f"StandardScaler(labels={list(self._mean)}" + (f", per={per})" if per else ")")


def _check_manifest(where: str, doc: Mapping[str, Any], manifest: SplitManifest) -> None:
    """The manifest a scaler file was saved with is ``manifest``, else a ConfigError naming both."""
    if not isinstance(manifest, SplitManifest):
        raise ConfigError(f"manifest must be a SplitManifest, got {type(manifest).__name__}")
    saved_digest = doc.get("manifest_sha256")
    if saved_digest is None:
        raise ConfigError(
            f"{where} was saved without a split manifest, so it cannot be checked against this one "
            f"(label {manifest.label!r}); save it with scaler.save(path, manifest=...)"
        )
    digest = manifest_digest(manifest)
    if digest == saved_digest:
        return
    saved = doc.get("manifest") or {}
    given = json.loads(manifest.to_json())
    differ = sorted(k for k in set(saved) | set(given) if saved.get(k) != given.get(k))
    raise ConfigError(
        f"{where} was fitted on split {doc.get('split')!r} of another manifest: label {saved.get('label')!r}, "
        f"{saved.get('n_samples')} samples (sha256 {saved_digest[:12]}), not label {manifest.label!r}, "
        f"{manifest.n_samples} samples (sha256 {digest[:12]}); they differ in {differ}. Statistics fitted "
        "on other samples leak or mismatch: refit on this manifest's training split"
    )


__all__ = ["SCALER_FORMAT", "StandardScaler", "base_label", "manifest_digest"]
