"""Selections on the dimensions besides the sample axis: which indices of an axis are delivered.

A selection is resolved once, when the user makes it, into plain source
indices per axis (:class:`AxisSelection`). The read plan then fetches and
decodes only the chunks those indices touch, and the pool holds only the
selected region: a level list or a lat/lon box costs the chunks it covers,
not the whole field.

By position (``isel``): an integer (the axis is dropped, as in xarray), a
slice, or a sequence of integers (negative counts from the end). By
coordinate value (``sel``): a value or a list of values (each must be
present; floats within a relative tolerance of 1e-9), or ``slice(lo, hi)``
with both ends included. A slice is a box in either direction of a
descending axis (latitude stored 90 → -90 takes ``slice(30, 60)`` or
``slice(60, 30)``). On a periodic longitude axis (0–360 or -180–180, by
name or ``units="degrees_east"``) bounds are taken modulo 360 and
``slice(lo, hi)`` with ``lo > hi`` crosses the antimeridian: ``slice(350,
10)`` on a 0–360 grid is 350…359.75 then 0…10, in that order.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitu.errors import ConfigError

_LONGITUDE_NAMES = frozenset({"lon", "longitude", "x_longitude", "nav_lon"})


@dataclass(frozen=True)
class AxisSelection:
    """Source indices of one axis, in delivery order; ``keep=False`` drops the axis (one index)."""

    indices: tuple[int, ...]
    keep: bool = True

    def __post_init__(self) -> None:
        if not self.indices:
            raise ConfigError("a selection must keep at least one index")
        if not self.keep and len(self.indices) != 1:
            raise ConfigError("a dropped axis selects exactly one index")

    @property
    def array(self) -> np.ndarray:
        """The selected source indices as an ``int64`` array, in delivery order."""
        return np.asarray(self.indices, dtype=np.int64)

    def describe(self) -> Any:
        """JSON-able: a ``[start, stop]`` run when contiguous and ascending, else the list."""
        idx = self.indices
        if (
            len(idx) > 1
            and idx[-1] - idx[0] == len(idx) - 1
            and all(b > a for a, b in itertools.pairwise(idx))
        ):
            run: Any = {"start": idx[0], "stop": idx[-1] + 1}
        else:
            run = list(idx)
        return run if self.keep else {"index": idx[0]}


def by_position(what: str, size: int, key: Any) -> AxisSelection:
    """Resolve an ``isel`` key on an axis of ``size`` indices."""
    if isinstance(key, (bool, np.bool_)):
        raise ConfigError(f"{what}: a selection must be an integer, slice or list of integers, got {key!r}")
    if isinstance(key, (int, np.integer)):
        return AxisSelection((_position(what, size, int(key)),), keep=False)
    if isinstance(key, slice):
        for part in (key.start, key.stop, key.step):
            if part is not None and not (isinstance(part, (int, np.integer)) and not isinstance(part, bool)):
                raise ConfigError(f"{what}: isel slices take integers, got {key!r}")
        indices = tuple(range(size))[key]
        if not indices:
            raise ConfigError(f"{what}: {key!r} selects nothing from an axis of length {size}")
        return AxisSelection(indices)
    values = _sequence(what, key)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in values):
        raise ConfigError(f"{what}: isel lists take integers, got {key!r}")
    return AxisSelection(tuple(_position(what, size, int(v)) for v in values))


def by_value(what: str, coord: np.ndarray, key: Any, *, periodic: bool) -> AxisSelection:
    """Resolve a ``sel`` key against the coordinate values ``coord`` of one axis."""
    coord = np.asarray(coord)
    if isinstance(key, slice):
        if key.step is not None:
            raise ConfigError(f"{what}: sel slices take no step, got {key!r}")
        return AxisSelection(_box(what, coord, key.start, key.stop, periodic))
    if isinstance(key, (list, tuple, np.ndarray)):
        values = _sequence(what, key)
        return AxisSelection(tuple(_locate(what, coord, v, periodic) for v in values))
    return AxisSelection((_locate(what, coord, key, periodic),), keep=False)


def compose(first: AxisSelection | None, then: AxisSelection) -> AxisSelection:
    """``then`` applied to what ``first`` already selected (positions index the selected values)."""
    if first is None:
        return then
    if not first.keep:
        raise ConfigError("the axis was already reduced to one index by an earlier selection")
    return AxisSelection(tuple(first.indices[i] for i in then.indices), keep=then.keep)


def is_periodic_longitude(name: str | None, attrs: Mapping[str, Any], coord: np.ndarray | None) -> bool:
    """A longitude axis whose values wrap at 360 degrees (named so, or ``units="degrees_east"``)."""
    units = str(attrs.get("units", "")).lower()
    named = name is not None and name.lower() in _LONGITUDE_NAMES
    if not (named or units in ("degrees_east", "degree_east", "degrees_e", "degree_e")):
        return False
    if coord is None or coord.dtype.kind not in "iuf" or len(coord) < 2:
        return False
    step = abs(float(coord[1]) - float(coord[0]))
    span = float(np.nanmax(coord)) - float(np.nanmin(coord)) + step
    return math.isclose(span, 360.0, rel_tol=1e-3)  # a global grid, not a regional box


# -- helpers --------------------------------------------------------------------------------------
def _position(what: str, size: int, i: int) -> int:
    if not -size <= i < size:
        raise ConfigError(f"{what}: index {i} is out of range for an axis of length {size}")
    return i % size


def _sequence(what: str, key: Any) -> list[Any]:
    if isinstance(key, (str, bytes)) or not isinstance(key, (Sequence, np.ndarray)):
        raise ConfigError(f"{what}: expected a list of values, got {key!r}")
    values = list(np.asarray(key).tolist()) if isinstance(key, np.ndarray) else list(key)
    if not values:
        raise ConfigError(f"{what}: an empty list selects nothing")
    if len(set(map(repr, values))) != len(values):
        raise ConfigError(f"{what}: {key!r} names an index twice")
    return values


def _extent(coord: np.ndarray) -> str:
    if coord.size == 0:
        return "an empty coordinate"
    return f"the coordinate spans {coord.min()!s} .. {coord.max()!s} ({coord.size} values)"


def _as_coord_value(what: str, coord: np.ndarray, value: Any) -> Any:
    """``value`` in the coordinate's kind: a date for a datetime axis, a number otherwise."""
    if coord.dtype.kind == "M":
        try:
            return np.datetime64(value, "ns")
        except (TypeError, ValueError):
            raise ConfigError(f"{what}: {value!r} is not a date") from None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ConfigError(f"{what}: {value!r} is not a number (the coordinate is {coord.dtype})")
    return float(value)


def _locate(what: str, coord: np.ndarray, value: Any, periodic: bool) -> int:
    """Index of the coordinate value equal to ``value``."""
    target = _as_coord_value(what, coord, value)
    if coord.dtype.kind == "M":
        hits = np.flatnonzero(coord == target)
    else:
        values = coord.astype(np.float64)
        if periodic:
            target = target % 360.0
            values = values % 360.0
        hits = np.flatnonzero(np.isclose(values, target, rtol=1e-9, atol=1e-9))
    if len(hits) == 0:
        raise ConfigError(f"{what}: no coordinate value equals {value!r}; {_extent(coord)}")
    return int(hits[0])


def _box(what: str, coord: np.ndarray, lo: Any, hi: Any, periodic: bool) -> tuple[int, ...]:
    """Indices whose value lies in the closed box ``[lo, hi]``, in storage order."""
    if coord.dtype.kind == "M":
        first = None if lo is None else _as_coord_value(what, coord, lo)
        last = None if hi is None else _as_coord_value(what, coord, hi)
        keep = np.ones(coord.shape, dtype=bool)
        if first is not None:
            keep &= coord >= first
        if last is not None:
            keep &= coord <= last
        picked = np.flatnonzero(keep)
    else:
        values = coord.astype(np.float64)
        a = -math.inf if lo is None else _as_coord_value(what, coord, lo)
        b = math.inf if hi is None else _as_coord_value(what, coord, hi)
        if periodic and lo is not None and hi is not None:
            picked = _wrapped_box(values, a, b)
        else:
            low, high = min(a, b), max(a, b)
            picked = np.flatnonzero((values >= low) & (values <= high))
    if len(picked) == 0:
        raise ConfigError(f"{what}: slice({lo!r}, {hi!r}) selects nothing; {_extent(coord)}")
    return tuple(int(i) for i in picked)


def _wrapped_box(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Longitudes from ``lo`` eastwards to ``hi``, modulo 360; crossing 0 when ``lo > hi``."""
    wrapped = values % 360.0
    a, b = lo % 360.0, hi % 360.0
    if hi - lo >= 360.0:  # the whole circle
        return np.argsort(wrapped, kind="stable")
    if a <= b:
        inside = (wrapped >= a) & (wrapped <= b)
        picked = np.flatnonzero(inside)
        return picked[np.argsort(wrapped[picked], kind="stable")]
    east = np.flatnonzero(wrapped >= a)
    west = np.flatnonzero(wrapped <= b)
    return np.concatenate(
        [east[np.argsort(wrapped[east], kind="stable")], west[np.argsort(wrapped[west], kind="stable")]]
    )
