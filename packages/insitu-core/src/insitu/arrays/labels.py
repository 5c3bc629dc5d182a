"""Which arrays a dataset delivers, under which labels: the geometries given (or discovered),
checked, split into sample-bearing labels and static fields."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from zarr.abc.store import Store

from insitu.arrays.discovery import open_geometries
from insitu.arrays.geometry import ArrayGeometry
from insitu.errors import ConfigError
from insitu.store.retry import RetryPolicy


@dataclass(frozen=True)
class Labels:
    """The labels a dataset delivers: ``sampled`` carry the sample dimension, ``statics`` do not."""

    sampled: tuple[ArrayGeometry, ...]
    statics: tuple[ArrayGeometry, ...]

    @property
    def every(self) -> tuple[ArrayGeometry, ...]:
        """Every label, sampled first then statics."""
        return self.sampled + self.statics

    @property
    def pooled(self) -> dict[str, ArrayGeometry]:
        """One unshifted geometry per pooled array path: an array is pooled once, whatever offsets
        its labels read it at."""
        return {g.path: g.shift(-g.offset) for g in self.sampled}

    @property
    def sample_dim(self) -> str | None:
        """The sample dimension's name when every label names it alike, else None."""
        names = {g.sample_dim for g in self.sampled}
        return names.pop() if len(names) == 1 else None


def resolve_labels(
    store: Store,
    geometries: Mapping[str, ArrayGeometry] | Sequence[ArrayGeometry] | None,
    sample_axis: str | int,
    retry: RetryPolicy | None = None,
) -> Labels:
    """The labels of ``geometries`` (``None``: every array of ``store`` sampled along
    ``sample_axis``, its metadata read under ``retry``), checked: unique labels, one sample axis and selection per array, and at
    least one label with the sample dimension."""
    geoms = _given(store, geometries, sample_axis, retry)
    labels = [g.label for g in geoms]
    dupes = sorted(x for x, n in Counter(labels).items() if n > 1)
    if dupes:
        raise ConfigError(f"duplicate label(s) {dupes}; shift one of them or drop the duplicate")
    _check_one_reading_per_array(geoms)
    resolved = Labels(tuple(g for g in geoms if not g.static), tuple(g for g in geoms if g.static))
    if not resolved.sampled:
        raise ConfigError(
            f"every label is static ({labels}); at least one array must have the sample dimension"
        )
    return resolved


def _given(
    store: Store,
    geometries: Mapping[str, ArrayGeometry] | Sequence[ArrayGeometry] | None,
    sample_axis: str | int,
    retry: RetryPolicy | None,
) -> list[ArrayGeometry]:
    if geometries is None:
        geoms = list(open_geometries(store, sample_dim=sample_axis, retry=retry).values())
    elif isinstance(geometries, Mapping):
        # The keys name the batch fields: {"x": g, "y": g.shift(3)} gives batches keyed x and y.
        geoms = []
        for key, g in geometries.items():
            if not isinstance(key, str) or not key:
                raise ConfigError(
                    f"geometries keys name the batch fields and must be non-empty strings, got {key!r}"
                )
            geoms.append(g.named(key) if isinstance(g, ArrayGeometry) else g)
    else:
        geoms = list(geometries)
    if not geoms:
        raise ConfigError("geometries is empty; pass at least one ArrayGeometry")
    for g in geoms:
        if not isinstance(g, ArrayGeometry):
            raise ConfigError(f"geometries must be ArrayGeometry objects, got {type(g).__name__}: {g!r}")
    return geoms


def _check_one_reading_per_array(geoms: Sequence[ArrayGeometry]) -> None:
    by_path: dict[str, ArrayGeometry] = {}
    for g in geoms:
        other = by_path.setdefault(g.path, g)
        if other.sample_axis != g.sample_axis or other.static != g.static:
            raise ConfigError(
                f"labels {other.label!r} and {g.label!r} read {g.path!r} with different sample axes"
            )
        if other.selection != g.selection:
            raise ConfigError(
                f"labels {other.label!r} and {g.label!r} read {g.path!r} with different selections; "
                "an array is pooled once: select the union in one label and split it in a batch transform"
            )
