"""Train/val/test splits along the sample axis, with a JSON round-trip.

:func:`split_by_chunk` makes splits of whole chunks of one reference array,
contiguous by default, so neighbouring (correlated) samples stay together and
no chunk is shared between two splits of that array.

:func:`split_by_coord` makes splits by coordinate value ("train 1979-2015,
val 2016-2017, test 2018"). Each split holds exactly the samples whose
coordinate lies in its range, so a range may cut a chunk: that chunk then
belongs to both splits, each reading only its own samples of it (the chunk is
decoded once per pass and shared through the pool). Such a manifest records
each split's half-open sample range in :attr:`SplitManifest.ranges`.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from insitu.arrays.geometry import ArrayGeometry, is_integer
from insitu.errors import ConfigError
from insitu.options import flag, seed_value
from insitu.plan.temporaries import large_temporaries

DEFAULT_NAMES = ("train", "val", "test")
#: Stands for the chunk lists in the JSON text the digest streams (:meth:`SplitManifest.digest`).
_SPLITS_PLACEHOLDER = "insitu:splits-written-in-slabs"
_DIGEST_SLAB = 1 << 18  # chunk ids turned into text at a time
_FORMAT = "insitu.SplitManifest/1"  # chunk splits: what every reader of the format understands
#: Manifests with per-split sample ranges. A reader of /1 alone would ignore the ranges and
#: deliver whole chunks (samples of the neighbouring split included), so these are /2.
_FORMAT_RANGES = "insitu.SplitManifest/2"


@dataclass(frozen=True)
class SplitManifest:
    """Which chunks (along the sample axis of ``label``) belong to which split.

    ``ranges`` (optional) gives each split its own half-open sample range
    ``(start, stop)``: the split holds the samples of its chunks that lie in
    it. ``None`` (chunk splits) clips every split to the global
    ``sample_range``. ``coord_dim`` and ``coord_ranges`` record, for splits
    made by :func:`split_by_coord`, the coordinate and the bounds the user
    gave (as strings, ``None`` for an open end).
    """

    label: str
    n_samples: int
    chunk_len: int
    # Chunk ids per split. Given as any sequence of integers; held as read-only int64 arrays, so
    # that a manifest of millions of chunks costs 8 bytes a chunk, not a Python int each.
    splits: Mapping[str, Any]
    sample_range: tuple[int, int]
    seed: int = 0
    contiguous: bool = True
    sample_axis: int = 0
    sample_dim: str | None = None  # dimension name of the sample axis, when the array has names
    ranges: Mapping[str, tuple[int, int]] | None = None  # per-split [start, stop) sample range
    coord_dim: str | None = None  # the coordinate coord_ranges are in
    coord_ranges: Mapping[str, tuple[str | None, str | None]] | None = None  # bounds as given

    def __post_init__(self) -> None:
        if not isinstance(self.splits, Mapping):
            raise ConfigError(f"splits must map split names to chunk ids, got {self.splits!r}")
        object.__setattr__(self, "splits", {str(k): _chunk_ids(k, v) for k, v in self.splits.items()})
        if self.ranges is not None:
            if not isinstance(self.ranges, Mapping) or set(self.ranges) != set(self.splits):
                raise ConfigError(
                    f"ranges must give one (start, stop) per split {list(self.splits)}, got {self.ranges!r}"
                )
            ranges = {}
            for name, pair in self.ranges.items():
                lo, hi = _pair(f"ranges[{name!r}]", pair)
                if not (is_integer(lo) and is_integer(hi) and 0 <= lo <= hi <= self.n_samples):
                    raise ConfigError(
                        f"ranges[{name!r}]={pair!r} must be integers with "
                        f"0 <= start <= stop <= {self.n_samples}"
                    )
                ranges[name] = (int(lo), int(hi))
            object.__setattr__(self, "ranges", {name: ranges[name] for name in self.splits})
        if self.coord_ranges is not None:
            if not isinstance(self.coord_ranges, Mapping) or not set(self.coord_ranges) <= set(self.splits):
                raise ConfigError(
                    f"coord_ranges must name splits of {list(self.splits)}, got {self.coord_ranges!r}"
                )
            bounds = {}
            for name, given in self.coord_ranges.items():
                start, stop = _pair(f"coord_ranges[{name!r}]", given)
                if not all(b is None or isinstance(b, str) for b in (start, stop)):
                    raise ConfigError(f"coord_ranges[{name!r}] must hold strings or None, got {given!r}")
                bounds[name] = (start, stop)
            object.__setattr__(self, "coord_ranges", bounds)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SplitManifest):
            return NotImplemented
        fields = ("label", "n_samples", "chunk_len", "sample_range", "seed", "contiguous", "sample_axis")
        more = ("sample_dim", "ranges", "coord_dim", "coord_ranges")
        return (
            all(getattr(self, f) == getattr(other, f) for f in (*fields, *more))
            and list(self.splits) == list(other.splits)
            and all(np.array_equal(self.splits[k], other.splits[k]) for k in self.splits)
        )

    @property
    def names(self) -> tuple[str, ...]:
        """The split names, in the manifest's order."""
        return tuple(self.splits)

    def chunks(self, split: str) -> tuple[int, ...]:
        """Chunk ids of ``split``, as a tuple (see :meth:`chunk_ids` for the array)."""
        return tuple(self.chunk_ids(split).tolist())

    def chunk_ids(self, split: str) -> np.ndarray:
        """Chunk ids of ``split``: a read-only int64 array, in the order the manifest holds them
        (ascending for :func:`split_by_chunk` and :func:`split_by_coord`)."""
        self._check(split)
        return cast(np.ndarray, self.splits[split])

    def check_split(self, split: str) -> None:
        """Raise ConfigError naming the splits if ``split`` is not one of them."""
        self._check(split)

    @functools.cached_property
    def digest(self) -> str:
        """A short hex digest of :meth:`to_json`, computed once (a resume state carries it).

        The JSON text is hashed as it is written, the chunk lists a slab at a time: written
        whole, ten million chunk ids are a list of Python ints and a text of over 1 GB
        together (every ``state_dict()`` paid it on its first call).
        """
        sha = hashlib.sha256()
        for part in self._json_parts():
            sha.update(part.encode())
        return sha.hexdigest()[:16]

    def _json_parts(self) -> Iterator[str]:
        """The text of :meth:`to_json` in pieces (the same characters: ``json.dumps(indent=1)``)."""
        text = json.dumps(self._raw(_SPLITS_PLACEHOLDER), indent=1)
        head, tail = text.split(json.dumps(_SPLITS_PLACEHOLDER))
        yield head
        if not self.splits:
            yield "{}"
        for i, (name, chunks) in enumerate(self.splits.items()):
            yield ("{\n  " if i == 0 else ",\n  ") + json.dumps(name) + ": "
            if not len(chunks):
                yield "[]"
                continue
            yield "["
            for at in range(0, len(chunks), _DIGEST_SLAB):
                slab = chunks[at : at + _DIGEST_SLAB].tolist()
                yield ("" if at == 0 else ",") + "\n   " + ",\n   ".join(map(str, slab))
            yield "\n  ]"
        if self.splits:
            yield "\n }"
        yield tail

    def sample_range_of(self, split: str | None = None) -> tuple[int, int]:
        """Half-open range of sample indices ``split`` may hold: its own range when the manifest
        has per-split ``ranges``, else (and for ``split=None``) the global ``sample_range``;
        clipped to ``n_samples``."""
        if split is not None:
            self._check(split)
            if self.ranges is not None:
                lo, hi = self.ranges[split]
                return lo, min(hi, self.n_samples)
        return self.sample_range[0], min(self.sample_range[1], self.n_samples)

    def chunk_samples(self, chunk: int, split: str | None = None) -> np.ndarray:
        """Sample indices of one chunk held by ``split`` (clipped to its range), ascending.

        Without ``split``: the chunk's samples within ``sample_range``, or, when the
        manifest has per-split ``ranges``, those held by any split.
        """
        if split is None and self.ranges is not None:
            parts = [
                self.chunk_samples(chunk, name) for name in self.splits if _holds(self.splits[name], chunk)
            ]
            return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        lo, hi = self.sample_range_of(split)
        lo = max(chunk * self.chunk_len, lo)
        hi = min((chunk + 1) * self.chunk_len, hi)
        return np.arange(lo, max(lo, hi), dtype=np.int64)

    def samples(self, split: str) -> np.ndarray:
        """All sample indices of ``split``, ascending (its chunks clipped to its range)."""
        chunks = np.sort(self.chunk_ids(split))
        first, sizes = clip_chunks(chunks, self.chunk_len, self.sample_range_of(split))
        return concat_runs(first, sizes)

    def count_samples(self, split: str, within: tuple[int, int] | None = None) -> int:
        """How many samples ``split`` holds (those in ``within``, half-open, when given), without
        listing them."""
        lo, hi = self.sample_range_of(split)
        if within is not None:
            lo, hi = max(lo, within[0]), min(hi, within[1])
        if hi <= lo:
            return 0
        ids, c = self.chunk_ids(split), self.chunk_len
        # Chunks wholly inside [lo, hi) hold c samples each; only the (at most two) chunks holding
        # lo and hi - 1 can be cut: no per-chunk array is needed.
        inner_lo, inner_hi = -(-lo // c), hi // c
        total = c * int(np.count_nonzero((ids >= inner_lo) & (ids < inner_hi))) if inner_hi > inner_lo else 0
        for k in {lo // c, (hi - 1) // c}:
            if not inner_lo <= k < inner_hi and _holds(ids, k):
                total += min((k + 1) * c, hi) - max(k * c, lo)
        return total

    def _check(self, split: str) -> None:
        if split not in self.splits:
            raise ConfigError(f"unknown split {split!r}; this manifest has {list(self.splits)}")

    def to_json(self) -> str:
        """Serialise to JSON (see :meth:`from_json`).

        A manifest without per-split ranges is written exactly as before
        (format ``insitu.SplitManifest/1``); one with them is ``/2``, which adds
        ``ranges``, ``coord_dim`` and ``coord_ranges``.
        """
        return json.dumps(self._raw({k: v.tolist() for k, v in self.splits.items()}), indent=1)

    def _raw(self, splits: Any) -> dict[str, Any]:
        """What :meth:`to_json` writes, with ``splits`` as the value of its ``"splits"`` key."""
        extended = self.ranges is not None or self.coord_ranges is not None
        raw: dict[str, Any] = {
            "format": _FORMAT_RANGES if extended else _FORMAT,
            "label": self.label,
            "n_samples": self.n_samples,
            "chunk_len": self.chunk_len,
            "sample_range": list(self.sample_range),
            "seed": self.seed,
            "contiguous": self.contiguous,
            "sample_axis": self.sample_axis,
            "sample_dim": self.sample_dim,
            "splits": splits,
        }
        if extended:
            raw["ranges"] = None if self.ranges is None else {k: list(v) for k, v in self.ranges.items()}
            raw["coord_dim"] = self.coord_dim
            raw["coord_ranges"] = (
                None if self.coord_ranges is None else {k: list(v) for k, v in self.coord_ranges.items()}
            )
        return raw

    @classmethod
    def from_json(cls, text: str) -> SplitManifest:
        """Parse a manifest written by :meth:`to_json` (format ``/1`` or ``/2``)."""
        raw: dict[str, Any] = json.loads(text)
        if raw.get("format") not in (_FORMAT, _FORMAT_RANGES):
            raise ConfigError(
                f"not a split manifest (format={raw.get('format')!r}, "
                f"expected {_FORMAT!r} or {_FORMAT_RANGES!r})"
            )
        ranges = raw.get("ranges")
        coord_ranges = raw.get("coord_ranges")
        return cls(
            label=raw["label"],
            n_samples=int(raw["n_samples"]),
            chunk_len=int(raw["chunk_len"]),
            splits={k: np.asarray(v, dtype=np.int64) for k, v in raw["splits"].items()},
            sample_range=(int(raw["sample_range"][0]), int(raw["sample_range"][1])),
            seed=int(raw["seed"]),
            contiguous=bool(raw["contiguous"]),
            sample_axis=int(raw.get("sample_axis", 0)),
            sample_dim=raw.get("sample_dim"),
            ranges=None if ranges is None else {k: (int(v[0]), int(v[1])) for k, v in ranges.items()},
            coord_dim=raw.get("coord_dim"),
            coord_ranges=None if coord_ranges is None else {k: (v[0], v[1]) for k, v in coord_ranges.items()},
        )


def _chunk_ids(split: Any, ids: Any) -> np.ndarray:
    """One split's chunk ids as a read-only 1-D int64 array; anything else is refused by name."""
    arr = np.asarray(ids if not isinstance(ids, range) else np.arange(ids.start, ids.stop, ids.step))
    if arr.size == 0:
        arr = np.zeros(0, dtype=np.int64)
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or (arr.size and int(arr.min()) < 0):
        raise ConfigError(f"splits[{split!r}] must be non-negative integer chunk ids, got {ids!r}")
    out = np.array(arr, dtype=np.int64)  # a copy: the caller's array stays theirs, and writeable
    out.flags.writeable = False
    return out


def _holds(chunks: np.ndarray, chunk: int) -> bool:
    return bool(len(chunks)) and bool((chunks == chunk).any())


def clip_chunks(chunks: np.ndarray, chunk_len: int, span: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """First sample and number of samples of each chunk within ``span`` (half-open), for all
    chunks at once (a per-chunk loop costs seconds at a million chunks)."""
    # In place where possible: each full-size temporary costs fresh pages (page faults) at scale.
    first = chunks * chunk_len
    stop = first + chunk_len
    np.maximum(first, span[0], out=first)
    np.minimum(stop, span[1], out=stop)
    stop -= first
    np.maximum(stop, 0, out=stop)
    return first, stop


def concat_runs(first: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(f, f + n)`` for each (f, n), without a Python loop."""
    first = np.asarray(first, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    if len(sizes) and int(sizes.min()) == int(sizes.max()) == 1:
        return first.copy()  # runs of one (one sample per chunk): the firsts themselves
    ends = np.cumsum(sizes)
    total = int(ends[-1]) if len(ends) else 0
    # Position k of the output belongs to run r: value = first[r] + (k - start of run r).
    ends -= sizes
    ends -= first
    out = np.repeat(ends, sizes)
    np.negative(out, out=out)
    out += np.arange(total, dtype=np.int64)
    return out


@large_temporaries
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
    chunk is an error. ``names`` name the splits, one per fraction (default
    ``train``, ``val``, ``test``; required for more than three).
    """
    if not isinstance(geom, ArrayGeometry):
        raise ConfigError(f"split_by_chunk splits an ArrayGeometry, got {type(geom).__name__}: {geom!r}")
    _refuse_static(geom, "split_by_chunk")
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
    # Contiguous splits are slices of an ascending range already; dealt ones are sorted.
    arrange = (lambda ids: ids) if contiguous else np.sort
    splits = {name: arrange(chunk_ids[bounds[i] : bounds[i + 1]]) for i, name in enumerate(names)}
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


@large_temporaries
def split_by_coord(
    geom: ArrayGeometry,
    ranges: Mapping[str, tuple[Any, Any]],
    *,
    dim: str | None = None,
) -> SplitManifest:
    """Split the samples of ``geom`` by the value of its sample coordinate.

    ``ranges`` maps each split name to ``(start, stop)``, e.g.
    ``{"train": ("1979", "2015"), "val": ("2016", "2017"), "test": ("2018", None)}``.
    Splits keep the order of the mapping (the ``"all"`` view delivers them in it).

    Bounds are inclusive at both ends, like xarray's label slices; ``None`` is
    an open end. For a datetime coordinate a bound is a string, a
    ``datetime.date``/``datetime``, a ``numpy.datetime64`` or anything with an
    ``isoformat()`` (a pandas ``Timestamp``). A string covers its whole
    period, as in pandas partial-string indexing: ``("1979", "2015")`` is
    1979-01-01T00 up to but excluding 2016-01-01, ``"2015-12-31"`` as a stop
    includes all of that day, ``"2016-03"`` is a whole month, ``"2016-03-01T06"``
    an hour. Any other bound is an instant (``datetime.date(2015, 12, 31)`` as
    a stop is midnight, as in pandas). Times with a UTC offset are converted to
    UTC; the coordinate is taken to be UTC. A numeric coordinate takes numeric
    bounds.

    The coordinate is ``geom.coords[dim]`` (``dim`` defaults to, and must be,
    the sample dimension); it must be strictly increasing, with no NaT (NaN)
    where a range could reach.

    A range may cut a chunk: each split holds exactly the samples whose
    coordinate lies in its range, and a chunk at a boundary belongs to both
    splits (each reads its own samples of it; the chunk is decoded once per pass
    and shared through the pool). Gaps between splits are allowed: samples in no
    split are never delivered. Ranges must not overlap, must select at least one
    sample and must be well ordered (start <= stop); every error names the
    range and the coordinate's extent.
    """
    if not isinstance(geom, ArrayGeometry):
        raise ConfigError(f"split_by_coord splits an ArrayGeometry, got {type(geom).__name__}: {geom!r}")
    _refuse_static(geom, "split_by_coord")
    given = _coord_ranges(ranges)
    dim = _coord_dim(geom, dim)
    coord = _coordinate(geom, dim)
    axis = _Axis(dim, coord)
    intervals = {
        name: _Interval(name, lo, hi, axis.bound(name, "start", lo), axis.bound(name, "stop", hi))
        for name, (lo, hi) in given.items()
    }
    spans = {name: axis.select(iv) for name, iv in intervals.items()}
    _check_disjoint(list(intervals.values()), spans, axis)
    c = geom.chunk_len
    splits = {name: np.arange(lo // c, -(-hi // c), dtype=np.int64) for name, (lo, hi) in spans.items()}
    return SplitManifest(
        label=geom.label,
        n_samples=geom.n_samples,
        chunk_len=c,
        splits=splits,
        sample_range=(min(lo for lo, _ in spans.values()), max(hi for _, hi in spans.values())),
        seed=0,
        contiguous=True,
        sample_axis=geom.sample_axis,
        sample_dim=geom.sample_dim,
        ranges=spans,
        coord_dim=dim,
        coord_ranges={name: (_bound_text(lo), _bound_text(hi)) for name, (lo, hi) in given.items()},
    )


_NS_PER_DAY = 86_400 * 10**9
_WHOLE_DAYS = ("Y", "M", "W", "D")


@dataclass(frozen=True)
class _Interval:
    """One split's range as comparable values: ``[lo, hi]``, or ``[lo, hi)`` when ``hi_open``
    (a stop string's period end). Datetimes are integer nanoseconds; open ends are infinite."""

    name: str
    given_lo: Any
    given_hi: Any
    lo: float | int
    hi_and_open: tuple[float | int, bool]

    @property
    def hi(self) -> float | int:
        return self.hi_and_open[0]

    @property
    def hi_open(self) -> bool:
        return self.hi_and_open[1]

    def shown(self) -> str:
        return f"{self.name!r} ({self.given_lo!r}, {self.given_hi!r})"

    def is_empty(self) -> bool:
        return self.lo > self.hi or (self.lo == self.hi and self.hi_open)


class _Axis:
    """The sample coordinate: values, which of them are missing, and how to search it."""

    def __init__(self, dim: str, coord: np.ndarray) -> None:
        self.dim = dim
        self.is_time = coord.dtype.kind == "M"
        if self.is_time:
            coord = coord.astype("datetime64[ns]")
            missing = np.isnat(coord)
            values = coord.view(np.int64)
        else:
            missing = np.isnan(coord) if coord.dtype.kind == "f" else np.zeros(len(coord), dtype=bool)
            values = coord
        self.n = len(coord)
        self.present = np.flatnonzero(~missing)  # positions holding a value
        self.values = values[self.present]  # ... and their values, strictly increasing (checked)
        self.missing = missing
        if len(self.values) == 0:
            raise ConfigError(f"the coordinate {dim!r} holds no value (all {self.n} are NaT/NaN)")
        bad = np.flatnonzero(self.values[1:] <= self.values[:-1])
        if len(bad):
            i, j = self.present[bad[0]], self.present[bad[0] + 1]
            raise ConfigError(
                f"the coordinate {dim!r} must be strictly increasing to split by value, but at position "
                f"{j} it is {self.show(self.values[bad[0] + 1])}, not after position {i} "
                f"({self.show(self.values[bad[0]])})"
            )

    @property
    def extent(self) -> str:
        return (
            f"the coordinate {self.dim!r} runs from {self.show(self.values[0])} to "
            f"{self.show(self.values[-1])} ({self.n} samples)"
        )

    def show(self, value: Any) -> str:
        if self.is_time:
            return str(np.datetime_as_string(np.datetime64(int(value), "ns"), unit="auto"))
        return str(value.item() if isinstance(value, np.generic) else value)

    # -- bounds -------------------------------------------------------------------
    def bound(self, name: str, which: str, value: Any) -> Any:
        """``value`` as a comparable: the start of its period for a start, ``(end, open)`` for a stop."""
        stop = which == "stop"
        if value is None:
            return (math.inf, False) if stop else -math.inf
        parsed = self._parse_time(value) if self.is_time else self._parse_number(value)
        if parsed is None:
            kind = (
                "a date (a string like '2016' or '2016-03-01T06', a datetime.date/datetime or a numpy.datetime64)"
                if self.is_time
                else "a number"
            )
            raise ConfigError(
                f"range {name!r}: cannot read the {which} bound {value!r} as {kind}; {self.extent}"
            )
        start, end = parsed  # end: exclusive end of a string's period, None for an instant
        if not stop:
            return start
        return (end, True) if end is not None else (start, False)

    def _parse_time(self, value: Any) -> tuple[int, int | None] | None:
        if isinstance(value, (bool, np.bool_, int, float, np.number)):
            return None  # a number is not a date (numpy would read it as a count of some unit)
        period = isinstance(value, str)
        if period:
            text = value.strip()
            if not text or text.lower() in ("now", "today"):  # not reproducible: refuse
                return None
        elif isinstance(value, np.datetime64):
            text = None
        elif callable(getattr(value, "isoformat", None)):
            if isinstance(value, datetime.datetime) and value.utcoffset() is not None:
                value = value.astimezone(datetime.UTC).replace(tzinfo=None)
            text = value.isoformat()
        else:
            text = None
        try:
            with warnings.catch_warnings():  # "no explicit representation of timezones": read as UTC
                warnings.simplefilter("ignore")
                stamp = np.datetime64(text) if text is not None else np.datetime64(value)
        except (ValueError, TypeError, OverflowError):
            return None
        if np.isnat(stamp):
            return None
        start = _nanoseconds(stamp)
        if not period:
            return start, None
        unit = np.datetime_data(stamp.dtype)[0]
        return start, _nanoseconds(stamp + np.timedelta64(1, cast(Any, unit)))

    def _parse_number(self, value: Any) -> tuple[float | int, None] | None:
        if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)
        ):
            return None
        number = int(value) if isinstance(value, (int, np.integer)) else float(value)
        if isinstance(number, float) and math.isnan(number):
            return None
        if self.values.dtype.kind == "f" and isinstance(number, int):
            try:
                number = float(number)
            except OverflowError:  # beyond any float: beyond every value
                number = math.inf if number > 0 else -math.inf
        return number, None

    # -- selection ----------------------------------------------------------------
    def _search(self, value: float | int, side: str) -> int:
        """Index into ``values`` where ``value`` would go (``side`` as in ``np.searchsorted``)."""
        if math.isinf(value):
            return 0 if value < 0 else len(self.values)
        vals = self.values
        if vals.dtype.kind in "iu":
            if isinstance(value, float):  # an integer coordinate, a fractional bound: the integer beyond
                value = math.ceil(value) if side == "left" else math.floor(value)
            info = np.iinfo(vals.dtype)
            if value < info.min:
                return 0
            if value > info.max:
                return len(vals)
            key = np.asarray(value, dtype=vals.dtype)
        else:
            key = np.asarray(float(value))
        return int(np.searchsorted(vals, key, side=side))  # type: ignore[call-overload]

    def select(self, iv: _Interval) -> tuple[int, int]:
        """The half-open sample-index range of ``iv``, checked."""
        if iv.is_empty():
            raise ConfigError(f"range {iv.shown()}: the start is after the stop; {self.extent}")
        a = self._search(iv.lo, "left")
        b = self._search(iv.hi, "left" if iv.hi_open else "right")
        if a == b:
            if a == len(self.values) or b == 0:
                raise ConfigError(f"range {iv.shown()} lies entirely outside the coordinate: {self.extent}")
            raise ConfigError(
                f"range {iv.shown()} selects no sample: it falls between {self.show(self.values[a - 1])} "
                f"(position {self.present[a - 1]}) and {self.show(self.values[a])} (position "
                f"{self.present[a]}); {self.extent}"
            )
        # A missing value anywhere the range could reach (between its first sample's predecessor
        # and its last sample's successor) might lie in the range: refuse rather than guess.
        reach_lo = self.present[a - 1] + 1 if a > 0 else 0
        reach_hi = self.present[b] if b < len(self.values) else self.n
        holes = np.flatnonzero(self.missing[reach_lo:reach_hi])
        if len(holes):
            what = "NaT" if self.is_time else "NaN"
            raise ConfigError(
                f"range {iv.shown()} reaches position {reach_lo + holes[0]} of the coordinate "
                f"{self.dim!r}, which is {what} ({len(holes)} missing value(s) in positions "
                f"{reach_lo}..{reach_hi - 1}); {self.extent}"
            )
        return int(self.present[a]), int(self.present[b - 1]) + 1


def _check_disjoint(intervals: list[_Interval], spans: Mapping[str, tuple[int, int]], axis: _Axis) -> None:
    """No two ranges overlap (in value, even where no sample lies in the overlap)."""
    for i, first in enumerate(intervals):
        for second in intervals[i + 1 :]:
            a, b = (first, second) if first.lo <= second.lo else (second, first)
            if b.lo < a.hi or (b.lo == a.hi and not a.hi_open):
                end = a if a.hi < b.hi or (a.hi == b.hi and a.hi_open) else b  # the earlier stop
                lo = max(spans[a.name][0], spans[b.name][0])
                hi = min(spans[a.name][1], spans[b.name][1])
                held = (
                    f"both hold the {hi - lo} sample(s) {axis.show(axis.values[_rank(axis, lo)])} to "
                    f"{axis.show(axis.values[_rank(axis, hi - 1)])} (positions {lo}..{hi - 1})"
                    if hi > lo
                    else "no sample lies in the overlap, but ranges must not overlap"
                )
                raise ConfigError(
                    f"splits {first.shown()} and {second.shown()} overlap from {b.given_lo!r} to "
                    f"{end.given_hi!r}: {held}. Bounds are inclusive at both ends, so end one split "
                    f"before the next begins, e.g. ('1979', '2015') then ('2016', '2017'); {axis.extent}"
                )


def _rank(axis: _Axis, position: int) -> int:
    """Index into ``axis.values`` of sample ``position`` (which holds a value)."""
    return int(np.searchsorted(axis.present, position))


def _nanoseconds(stamp: np.datetime64) -> int:
    """``stamp`` as exact integer nanoseconds since 1970 (a Python int: no overflow, unlike
    ``astype('datetime64[ns]')`` for a year like 3000)."""
    unit = np.datetime_data(stamp.dtype)[0]
    day = stamp.astype("datetime64[D]")  # floors, before 1970 too
    ns = int(day.astype(np.int64)) * _NS_PER_DAY
    if unit not in _WHOLE_DAYS:
        ns += int((stamp - day).astype("timedelta64[ns]").astype(np.int64))
    return ns


def _refuse_static(geom: ArrayGeometry, how: str) -> None:
    """A static array has no sample axis: splitting it would split along whatever axis 0 is."""
    if geom.static:
        dims = list(geom.dimension_names) if geom.dimension_names else f"shape {geom.shape}"
        raise ConfigError(
            f"{how}: array {geom.label!r} is static (dimensions {dims}, no sample dimension), so it "
            "has no samples to split; split an array that has the sample dimension"
        )


def _coord_ranges(ranges: Any) -> dict[str, tuple[Any, Any]]:
    """``ranges`` as ``{name: (start, stop)}``, checked for shape (values are checked later)."""
    if not isinstance(ranges, Mapping):
        raise ConfigError(
            f"ranges must be a mapping of split name to (start, stop), got {type(ranges).__name__}: {ranges!r}"
        )
    if not ranges:
        raise ConfigError(
            "ranges is empty; give one (start, stop) per split, e.g. "
            "{'train': ('1979', '2015'), 'val': ('2016', '2017'), 'test': ('2018', None)}"
        )
    out = {}
    for name, pair in ranges.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"split names must be non-empty strings, got {name!r} in ranges")
        out[name] = _pair(f"range {name!r}", pair)
    return out


def _pair(what: str, pair: Any) -> tuple[Any, Any]:
    if isinstance(pair, (str, bytes, Mapping)):
        raise ConfigError(f"{what} must be a (start, stop) pair, got {pair!r}")
    try:
        lo, hi = pair
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be a (start, stop) pair, got {pair!r}") from None
    return lo, hi


def _coord_dim(geom: ArrayGeometry, dim: Any) -> str:
    sample_dim = geom.sample_dim
    what = f"array {geom.path or geom.name!r}"
    if dim is None:
        if sample_dim is None:
            raise ConfigError(
                f"{what} does not name its dimensions, so it has no sample coordinate to split by; "
                f"use split_by_chunk"
            )
        return sample_dim
    if not isinstance(dim, str):
        raise ConfigError(f"dim must be a dimension name, got {dim!r}")
    if dim != sample_dim:
        raise ConfigError(
            f"dim={dim!r} is not the sample dimension of {what} (its sample dimension is {sample_dim!r}); "
            f"splits are made along the sample axis"
        )
    return dim


def _coordinate(geom: ArrayGeometry, dim: str) -> np.ndarray:
    coords = geom.coords or {}
    if dim not in coords or coords[dim] is None:
        have = f" (it has {sorted(coords)})" if coords else ""
        raise ConfigError(f"the store has no coordinate array for {dim!r}{have}; cannot split by its value")
    coord = np.asarray(coords[dim])
    if coord.ndim != 1 or len(coord) != geom.n_samples:
        raise ConfigError(
            f"the coordinate {dim!r} has shape {coord.shape}, but the sample axis of "
            f"{geom.path or geom.name!r} has {geom.n_samples} samples"
        )
    if coord.dtype.kind not in "Miuf":
        raise ConfigError(
            f"the coordinate {dim!r} has dtype {coord.dtype}; splitting by value needs datetimes or numbers"
        )
    return coord


def _bound_text(value: Any) -> str | None:
    """A bound as recorded in the manifest: as given for a string, ISO 8601 for a date."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, np.datetime64):
        return str(np.datetime_as_string(value))
    if callable(getattr(value, "isoformat", None)):
        return str(value.isoformat())
    if isinstance(value, (np.integer, np.floating)):
        return str(value.item())
    return str(value)


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
