"""Dimension names for transforms that address axes by name (``latitude``, ``level``).

A chunk transform is called with an array's name and a block, a batch
transform with a batch: neither says which axis is ``latitude``. Transforms
that take dimension names (:class:`~insitu_transforms.crop.Crop`,
:class:`~insitu_transforms.coarsen.Coarsen`,
:class:`~insitu_transforms.crop.RandomCrop`, ``StandardScaler.fit(per=...)``)
are therefore told the names. A chunk transform given to an
``InSituDataset`` without ``dims=`` (Crop, Coarsen) is bound to each array's
geometry by the dataset (``bind(geom)``) and takes that array's names; a
batch transform, or a chunk transform used outside a dataset or after one
that renamed axes, is given them when built, with ``dims=``:

* the geometries the dataset is built from (``insitu.open_geometries(store)``,
  a mapping or a sequence of :class:`~insitu.arrays.geometry.ArrayGeometry`), one
  geometry, or an ``InSituDataset`` or one of its views: each array's
  ``delivered_dims`` (the axes of one delivered sample, selections applied);
* a tuple of names, ``("level", "latitude", "longitude")``, shared by every
  array the transform applies to;
* a mapping of array name (chunk transforms) or batch label (batch
  transforms) to such a tuple, for arrays whose dimensions differ or were
  changed by an earlier chunk transform (a regridder).

Dimension names always describe the axes *after* the sample axis, as a
sample is delivered (for a static field: the axes after its leading axis of
1). An integer key is such a position: 0 is the first axis after the sample
axis, -1 the last.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from insitu.plugin_api import ArrayGeometry, ConfigError, is_integer

DimNames = tuple[str | None, ...]
#: What ``dims=`` accepts (see the module docstring).
DimsSource = (
    ArrayGeometry
    | Sequence[str | None]
    | Sequence[ArrayGeometry]
    | Mapping[str, ArrayGeometry]
    | Mapping[str, Sequence[str | None]]
    | Any  # an InSituDataset or DatasetView
)
#: A dimension given by name, or by position among the axes after the sample axis.
DimKey = str | int

# A windowed label such as "t2m+24" reads the same variable as "t2m", so it shares its dimensions.
_SHIFTED = re.compile(r"^(?P<base>.+?)[+-]\d+$")


def base_label(label: str) -> str:
    """``"t2m+24"`` -> ``"t2m"``; labels without an offset suffix are returned unchanged."""
    match = _SHIFTED.match(label)
    return match["base"] if match else label


@dataclass(frozen=True)
class DimTable:
    """Dimension names per array (or label), or one tuple shared by all.

    Plain tuples only (no geometry is kept), so a transform holding one
    pickles small and fingerprints from its content."""

    common: DimNames | None = None
    by_key: tuple[tuple[str, DimNames], ...] = ()  # sorted by key: a stable identity

    @classmethod
    def build(cls, source: DimsSource, *, key: Literal["name", "label"], what: str) -> DimTable:
        """The table for ``source``, keyed by array ``name`` (chunk transforms) or batch ``label``.

        Raises ConfigError naming ``what`` for anything else."""
        if isinstance(source, DimTable):
            return source
        geoms = _geometries_of(source)
        if geoms is not None:
            return cls(by_key=_sorted({_key(g, key): g.delivered_dims for g in geoms}))
        if isinstance(source, ArrayGeometry):
            return cls(by_key=((_key(source, key), source.delivered_dims),))
        if isinstance(source, Mapping):
            table: dict[str, DimNames] = {}
            for k, v in source.items():
                if not isinstance(k, str):
                    raise ConfigError(f"{what}: dims keys must be array names or labels, got {k!r}")
                if isinstance(v, ArrayGeometry):
                    # Keyed as InSituDataset keys its geometries: the key is the batch label, while
                    # a chunk transform is called with the array's name.
                    table[v.name if key == "name" else k] = v.delivered_dims
                else:
                    table[k] = _names(v, f"{what}: dims[{k!r}]")
            return cls(by_key=_sorted(table))
        if isinstance(source, Sequence) and not isinstance(source, (str, bytes)):
            items = list(source)
            if items and all(isinstance(g, ArrayGeometry) for g in items):
                return cls(by_key=_sorted({_key(g, key): g.delivered_dims for g in items}))
            return cls(common=_names(items, f"{what}: dims"))
        raise ConfigError(
            f"{what}: dims must be geometries (insitu.open_geometries), a tuple of dimension names or "
            f"a mapping of array name to such a tuple, got {type(source).__name__}: {source!r}"
        )

    def lookup(self, key: str) -> DimNames | None:
        """The names for ``key`` (a shifted label falls back to its base label); None: unknown."""
        if self.common is not None:
            return self.common
        table = dict(self.by_key)
        found = table.get(key)
        if found is None:
            found = table.get(base_label(key))
        return found

    def known(self) -> set[str]:
        """Every dimension name the table holds."""
        tuples = [self.common] if self.common is not None else [d for _, d in self.by_key]
        return {n for names in tuples for n in names if n is not None}

    def check_names(self, keys: Iterable[DimKey], what: str) -> None:
        """Every named key is a dimension of some array: a typo is an error, not a no-op."""
        known = self.known()
        unknown = [k for k in keys if isinstance(k, str) and k not in known]
        if unknown:
            raise ConfigError(
                f"{what}: unknown dimension(s) {unknown}; the arrays' dimensions are {sorted(known)}"
            )

    def describe(self) -> str:
        """A stable text of the table, for fingerprints."""
        if self.common is not None:
            return "*=" + ",".join(map(str, self.common))
        return ";".join(f"{k}=" + ",".join(map(str, names)) for k, names in self.by_key)


def check_keys(keys: Iterable[Any], what: str) -> list[DimKey]:
    """Dimension keys as given: names (non-empty strings) or integer positions."""
    out: list[DimKey] = []
    for k in keys:
        if isinstance(k, str) and k:
            out.append(k)
        elif is_integer(k):
            out.append(int(k))
        else:
            raise ConfigError(f"{what}: a dimension is a name or an integer axis position, got {k!r}")
    return out


def needs_table(
    keys: Iterable[DimKey], dims: DimsSource | None, *, key: Literal["name", "label"], what: str
) -> DimTable | None:
    """The table for ``dims``, checked against the named ``keys``; None when only positions are used.

    Named keys without ``dims`` are refused here, when the transform is built,
    rather than at the first chunk."""
    keys = list(keys)
    named = [k for k in keys if isinstance(k, str)]
    if dims is None:
        if named:
            raise ConfigError(
                f"{what}: dimension name(s) {named} need the arrays' dimension names; pass "
                "dims=geometries (from insitu.open_geometries), dims=('latitude', 'longitude'), "
                "or give integer axis positions (0 = the first axis after the sample axis)"
            )
        return None
    table = DimTable.build(dims, key=key, what=what)
    table.check_names(named, what)
    return table


def bound_table(keys: Iterable[DimKey], geom: ArrayGeometry, *, what: str) -> DimTable:
    """The names of one array, for a chunk transform built without ``dims=`` that a dataset binds
    to it (``bind(geom)``): every named key must be a dimension of that array, so a misspelt name
    is an error rather than an array passed through."""
    names = geom.delivered_dims
    missing = [k for k in keys if isinstance(k, str) and k not in names]
    if missing:
        raise ConfigError(
            f"{what}: array {geom.name!r} has no dimension(s) {missing} (its dimensions: {list(names)}); "
            "limit the transform to the arrays that have them with labels=[...] or "
            "chunk_transforms={array: [...]}"
        )
    return DimTable(by_key=((geom.name, names),))


def resolve_axes(
    keys: Sequence[DimKey], table: DimTable | None, key: str, ndim: int, *, what: str
) -> dict[DimKey, int]:
    """``{dimension key: axis position}`` of the keys that apply to ``key``'s samples of ``ndim`` axes.

    Positions count the axes after the sample axis. A named key the array
    does not have is left out (the array passes through on that dimension);
    an integer beyond ``ndim``, names that do not match ``ndim``, or two keys
    naming one axis are errors naming the array."""
    names = table.lookup(key) if table is not None else None
    named = [k for k in keys if isinstance(k, str)]
    if table is None and named:
        raise ConfigError(
            f"{what}: dimension name(s) {named} for array {key!r} need the arrays' dimension names; "
            "pass dims=geometries (from insitu.open_geometries) or a tuple of names, or give the "
            "transform to an InSituDataset, which binds it to each array's geometry"
        )
    if names is not None and len(names) != ndim:
        raise ConfigError(
            f"{what}: array {key!r} has dimensions {list(names)} but its samples have {ndim} axes; "
            "an earlier transform changed them: give dims={name: (...)} as they reach this transform"
        )
    out: dict[DimKey, int] = {}
    for k in keys:
        if isinstance(k, str):
            if names is None or k not in names:
                continue
            axis = names.index(k)
        else:
            if not -ndim <= k < ndim:
                raise ConfigError(
                    f"{what}: axis {k} is out of range for array {key!r}, whose samples have {ndim} axes"
                )
            axis = k % ndim
        clash = [other for other, a in out.items() if a == axis]
        if clash:
            raise ConfigError(f"{what}: {clash[0]!r} and {k!r} name the same axis {axis} of array {key!r}")
        out[k] = axis
    return out


def describe_keys(keys: Iterable[DimKey]) -> str:
    """The keys as a comma-separated list of their reprs, for error messages."""
    return ",".join(repr(k) for k in keys)


def _key(g: ArrayGeometry, key: str) -> str:
    return g.name if key == "name" else g.label


def _geometries_of(source: Any) -> list[ArrayGeometry] | None:
    """The geometries of an InSituDataset or a view of one; None for anything else."""
    dataset = getattr(source, "dataset", source)
    labels, statics = getattr(dataset, "labels", None), getattr(dataset, "statics", None)
    if isinstance(labels, tuple) and isinstance(statics, tuple) and hasattr(dataset, "manifest"):
        return [*labels, *statics]
    return None


def _names(value: Any, what: str) -> DimNames:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(f"{what} must be a tuple of dimension names, got {value!r}")
    names = tuple(value)
    if not all(n is None or (isinstance(n, str) and n) for n in names):
        raise ConfigError(f"{what} must hold dimension names (strings), got {value!r}")
    named = [n for n in names if n is not None]
    if len(set(named)) != len(named):
        raise ConfigError(f"{what} names a dimension twice: {value!r}")
    return names


def _sorted(table: Mapping[str, DimNames]) -> tuple[tuple[str, DimNames], ...]:
    return tuple(sorted(table.items()))


__all__ = [
    "DimKey",
    "DimNames",
    "DimTable",
    "DimsSource",
    "base_label",
    "bound_table",
    "check_keys",
    "describe_keys",
    "needs_table",
    "resolve_axes",
]
