"""CF-convention decoding of arrays read in place: packing, missing values, valid ranges and time.

Arrays written with the CF conventions (most often by xarray) store *packed*
values and describe how to turn them into physical ones in their attributes.
This module reads that description from an array's zarr metadata and decodes
slabs with numpy alone, so a store can be read without xarray:

* :func:`cf_encoding` finds the effective encoding of one array
  (:class:`CFEncoding`), or ``None`` when there is nothing to decode;
* :class:`CFDecode` is a chunk transform (see :mod:`insitu.arrays.transforms`) that
  applies it; :func:`cf_transform_for` builds one from metadata;
* :func:`decode_coordinate` decodes a whole coordinate array, CF time
  included (to ``datetime64[ns]``); :func:`is_cf_time` tells a time
  coordinate by its ``units``.

Decoding, in the order xarray applies it
----------------------------------------
1. ``_Unsigned = "true"`` on signed integers: the bits are read as the unsigned
   integer of the same width (``"false"`` on unsigned integers: as signed).
2. Masking: a raw value equal to ``_FillValue`` or to any ``missing_value``
   becomes NaN, and so does a raw value below ``valid_min`` or above
   ``valid_max`` (either may come from ``valid_range``). xarray ignores the
   valid_* attributes; they are applied here, to the raw (packed, after
   step 1) values, as the netCDF conventions define them. A NaN fill value of
   float data masks nothing that is not NaN already, so it is no encoding.
3. Unpacking: ``raw * scale_factor + add_offset``.

Output dtype
------------
* An explicit ``dtype=`` wins (it must be a float dtype when values are
  masked or unpacked, since NaN marks the missing ones).
* Packed integers (``scale_factor`` or ``add_offset`` present) of at most
  16 bits decode to float32, wider ones to float64. xarray gives float64 for
  both, because JSON attributes come back as Python floats; float32 holds
  every 16-bit integer exactly and carries about 7 significant digits, more
  than 16-bit packing keeps, and it halves the pool.
* Float data keeps its dtype, packed or not; float16 becomes float32.
* Integers that are masked but not packed decode to float32 up to 16 bits,
  else float64.
* Integers that are only reinterpreted by ``_Unsigned`` stay integers.

Coordinates (:func:`decode_coordinate`) are small and get compared with
user-given values, so integers there decode to float64, as xarray does.

Where the fill value lives
--------------------------
The place of ``_FillValue`` depends on the zarr format, as xarray reads it:

* zarr v2 arrays written by xarray (their attributes hold
  ``_ARRAY_DIMENSIONS``): the zarr ``fill_value`` *is* the ``_FillValue``, and
  xarray does not keep it among the attributes. A ``_FillValue`` attribute
  that disagrees with it is an error.
* zarr v3 and plain zarr v2 arrays: only the ``_FillValue`` attribute counts;
  the zarr ``fill_value`` merely fills chunks never written (zarr gives
  integers 0 by default, and masking those would corrupt the data). On v3,
  xarray stores the ``_FillValue`` of float data as base64 of the value
  packed as a little-endian float64, whatever the array's float width.

Malformed or conflicting attributes raise :class:`~insitu.errors.ConfigError`
naming the array, the attribute and the value.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from insitu.errors import ConfigError

__all__ = [
    "CFDecode",
    "CFEncoding",
    "CFTimeError",
    "cf_encoding",
    "cf_transform_for",
    "decode_coordinate",
    "is_cf_time",
]

#: The attribute in which xarray records dimension names on zarr v2; its presence marks an array
#: written by xarray, whose zarr fill_value is then its _FillValue.
DIMENSIONS_KEY = "_ARRAY_DIMENSIONS"

Number = int | float

# JSON cannot spell non-finite floats; zarr writes them as these strings.
_JSON_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class CFTimeError(ConfigError):
    """A CF time coordinate that cannot be decoded to ``datetime64[ns]`` (a cftime calendar)."""


@dataclass(frozen=True)
class CFEncoding:
    """The CF encoding of one array: how its stored (packed) values become physical values.

    ``fill_values`` holds ``_FillValue`` and every ``missing_value``, in the
    stored representation (NaN left out: it needs no masking).
    ``valid_min``/``valid_max`` bound the raw values. ``unsigned`` is True
    when signed integers are to be read as unsigned (``_Unsigned = "true"``),
    False for the reverse, None to read them as stored.
    """

    stored_dtype: np.dtype[Any]
    scale_factor: Number | None = None
    add_offset: Number | None = None
    fill_values: tuple[Number, ...] = ()
    valid_min: Number | None = None
    valid_max: Number | None = None
    unsigned: bool | None = None

    @property
    def packed(self) -> bool:
        """Whether values are unpacked with ``scale_factor``/``add_offset``."""
        return self.scale_factor is not None or self.add_offset is not None

    @property
    def masked(self) -> bool:
        """Whether some raw values may become NaN."""
        return bool(self.fill_values) or self.valid_min is not None or self.valid_max is not None

    @property
    def raw_dtype(self) -> np.dtype[Any]:
        """The dtype the stored bits are read as: after ``_Unsigned``, in native byte order."""
        stored = self.stored_dtype.newbyteorder("=")
        if self.unsigned is None:
            return stored
        return np.dtype(f"{'u' if self.unsigned else 'i'}{stored.itemsize}")

    def default_dtype(self) -> np.dtype[Any]:
        """The output dtype when none is asked for (the rule in the module docstring)."""
        raw = self.raw_dtype
        if raw.kind == "f":
            return np.dtype(np.float32) if raw.itemsize < 4 else raw
        if self.packed or self.masked:
            return np.dtype(np.float32) if raw.itemsize <= 2 else np.dtype(np.float64)
        return raw


# -- reading the encoding ----------------------------------------------------------------------------
def cf_encoding(metadata: Mapping[str, Any], *, name: str = "") -> CFEncoding | None:
    """The effective CF encoding of one array, or None when it carries nothing to decode.

    ``metadata`` is the array's zarr metadata dict (``zarr.Array.metadata.to_dict()``,
    as :attr:`insitu.arrays.geometry.ArrayGeometry.metadata` holds it). Only integer
    and float arrays are decoded; others give None. ``name`` names the array in
    error messages. Raises ConfigError for malformed or conflicting attributes.
    """
    attrs = _attributes(metadata.get("attributes"), name)
    stored = _stored_dtype(metadata, name)
    if stored is None or stored.kind not in "iuf":
        return None
    # The zarr fill_value is a CF fill value only where xarray made it one (module docstring).
    zarr_fill = metadata.get("fill_value") if metadata.get("zarr_format") == 2 else None
    return _encoding_from(attrs, stored, zarr_fill, name)


def cf_fill_value(metadata: Mapping[str, Any], *, name: str = "") -> Number | None:
    """The array's CF ``_FillValue`` as a number (base64 float fill values decoded), or None.

    On zarr v2 written by xarray it is the zarr ``fill_value`` (see the module docstring).
    """
    stored = _stored_dtype(metadata, name)
    if stored is None:
        return None
    attrs = _attributes(metadata.get("attributes"), name)
    value = attrs.get("_FillValue")
    if value is None and metadata.get("zarr_format") == 2 and DIMENSIONS_KEY in attrs:
        value = metadata.get("fill_value")
    return _fill_attr(value, stored, name, "_FillValue")


def _attributes(attrs: Any, name: str) -> Mapping[str, Any]:
    if attrs is None:
        return {}
    if not isinstance(attrs, Mapping):
        raise ConfigError(f"{_what(name)}: zarr attributes must be a mapping, got {attrs!r}")
    return attrs


def _stored_dtype(metadata: Mapping[str, Any], name: str) -> np.dtype[Any] | None:
    """The stored numpy dtype from v2 ``dtype`` or v3 ``data_type``; None for types numpy lacks
    (v3 ``string``, extension types), which are never CF-decoded."""
    spec = metadata.get("data_type", metadata.get("dtype"))
    if spec is None:
        raise ConfigError(f"{_what(name)}: the zarr metadata names no dtype (keys: {sorted(metadata)})")
    if isinstance(spec, Mapping):  # a v3 data type with configuration: {"name": ..., ...}
        spec = spec.get("name")
    try:
        return np.dtype(spec)
    except TypeError:
        return None


def _encoding_from(
    attrs: Mapping[str, Any], stored: np.dtype[Any], zarr_fill: Any, name: str
) -> CFEncoding | None:
    """The encoding described by ``attrs`` for data stored as ``stored``; ``zarr_fill`` is the zarr
    v2 fill_value (None on v3), used as the _FillValue when xarray wrote the array."""
    scale = _scalar_attr(attrs, "scale_factor", name)
    if scale is not None and (scale == 0 or not math.isfinite(scale)):
        raise ConfigError(
            f"{_what(name)}: attribute 'scale_factor' must be a finite non-zero number, got {scale!r}"
        )
    offset = _scalar_attr(attrs, "add_offset", name)
    if offset is not None and not math.isfinite(offset):
        raise ConfigError(f"{_what(name)}: attribute 'add_offset' must be a finite number, got {offset!r}")

    fill = _fill_attr(attrs.get("_FillValue"), stored, name, "_FillValue")
    if zarr_fill is not None and DIMENSIONS_KEY in attrs:
        from_zarr = _fill_attr(zarr_fill, stored, name, "fill_value")
        if fill is not None and from_zarr is not None and not _same_number(fill, from_zarr):
            raise ConfigError(
                f"{_what(name)}: attribute '_FillValue' = {attrs['_FillValue']!r} disagrees with the zarr "
                f"fill_value {zarr_fill!r}, which is the _FillValue of a zarr v2 array written by xarray"
            )
        fill = from_zarr
    fills: list[Number] = [] if fill is None else [fill]
    missing = attrs.get("missing_value")
    for value in missing if isinstance(missing, (list, tuple)) else [missing]:
        number = _fill_attr(value, stored, name, "missing_value")
        if number is not None:
            fills.append(number)
    # NaN masks nothing that is not NaN already; a repeated value need not be compared twice.
    kept: list[Number] = []
    for number in fills:
        if not math.isnan(number) and not any(_same_number(number, k) for k in kept):
            kept.append(number)

    low, high = _valid_bounds(attrs, name)
    unsigned = _unsigned(attrs.get("_Unsigned"), stored, name)
    encoding = CFEncoding(stored, scale, offset, tuple(kept), low, high, unsigned)
    if not (encoding.packed or encoding.masked or encoding.unsigned is not None):
        return None
    return encoding


def _what(name: str) -> str:
    return f"array {name!r}" if name else "the array"


def _number(value: Any) -> Number | None:
    """``value`` as a Python number when it is one (numpy's included, bool not), else None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, str) and value in _JSON_FLOATS:
        return _JSON_FLOATS[value]
    return None


def _scalar_attr(attrs: Mapping[str, Any], attr: str, name: str) -> Number | None:
    value = attrs.get(attr)
    if value is None:
        return None
    # netCDF attributes are arrays; a one-element list is how a scalar may come through.
    candidate = value[0] if isinstance(value, (list, tuple)) and len(value) == 1 else value
    number = _number(candidate)
    if number is None:
        raise ConfigError(f"{_what(name)}: attribute {attr!r} must be a number, got {value!r}")
    return number


def _fill_attr(value: Any, stored: np.dtype[Any], name: str, attr: str) -> Number | None:
    """A fill value as a Python number. Float fill values may be base64 strings: xarray's encoding
    on zarr v3 (8 bytes, a little-endian float64)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    number = _number(value)
    if number is not None:
        return number
    if isinstance(value, str) and stored.kind == "f":
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == 8:
            return float(struct.unpack("<d", raw)[0])
        raise ConfigError(
            f"{_what(name)}: attribute {attr!r} = {value!r} is neither a number nor a base64-encoded "
            "float64 (how xarray stores float fill values on zarr v3)"
        )
    raise ConfigError(f"{_what(name)}: attribute {attr!r} must be a number, got {value!r}")


def _same_number(a: Number, b: Number) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _valid_bounds(attrs: Mapping[str, Any], name: str) -> tuple[Number | None, Number | None]:
    low = _scalar_attr(attrs, "valid_min", name)
    high = _scalar_attr(attrs, "valid_max", name)
    for attr, bound in (("valid_min", low), ("valid_max", high)):
        if bound is not None and math.isnan(bound):
            raise ConfigError(f"{_what(name)}: attribute {attr!r} must not be NaN, got {attrs[attr]!r}")
    span = attrs.get("valid_range")
    if span is not None:
        pair = [_number(v) for v in span] if isinstance(span, (list, tuple)) else []
        numbers = [v for v in pair if v is not None and not math.isnan(v)]
        if len(pair) != 2 or len(numbers) != 2:
            raise ConfigError(f"{_what(name)}: attribute 'valid_range' must be two numbers, got {span!r}")
        lo, hi = numbers
        for attr, given, implied in (("valid_min", low, lo), ("valid_max", high, hi)):
            if given is not None and given != implied:
                raise ConfigError(
                    f"{_what(name)}: attribute {attr!r} = {attrs[attr]!r} disagrees with valid_range {span!r}"
                )
        low, high = lo, hi
    if low is not None and high is not None and low > high:
        raise ConfigError(f"{_what(name)}: the valid range [{low!r}, {high!r}] is empty (min above max)")
    return low, high


def _unsigned(value: Any, stored: np.dtype[Any], name: str) -> bool | None:
    if value is None:
        return None
    flag = value.strip().lower() if isinstance(value, str) else value
    if flag in ("true", True):
        wanted = True
    elif flag in ("false", False):
        wanted = False
    else:
        raise ConfigError(f'{_what(name)}: attribute \'_Unsigned\' must be "true" or "false", got {value!r}')
    # Only a change of signedness is an encoding; on floats the attribute means nothing (xarray
    # ignores it too).
    if stored.kind == "i" and wanted:
        return True
    if stored.kind == "u" and not wanted:
        return False
    return None


# -- the chunk transform -----------------------------------------------------------------------------
class CFDecode:
    """Chunk transform decoding CF-encoded slabs: ``_Unsigned``, masking, then unpacking.

    ``encoding`` says what to do; ``dtype`` overrides the output dtype of the
    module's rule. Each call returns a new array; the input slab is never
    written to. The slab must be in the stored dtype (put this transform
    first in a chain).
    """

    def __init__(self, encoding: CFEncoding, *, dtype: npt.DTypeLike | None = None) -> None:
        self.encoding = encoding
        out = encoding.default_dtype() if dtype is None else np.dtype(dtype).newbyteorder("=")
        if out.kind not in "iuf":
            raise ConfigError(f"CF decoding can only produce integer or float data, not dtype {out}")
        if out.kind != "f" and (encoding.packed or encoding.masked):
            raise ConfigError(
                f"CF decoding to dtype {out} is impossible: the values are "
                f"{'unpacked' if encoding.packed else 'masked with NaN'}, which needs a float dtype"
            )
        self.dtype: np.dtype[Any] = out
        raw = encoding.raw_dtype
        self._raw = raw
        self._fills = tuple(
            f for f in (_as_raw(v, encoding.stored_dtype, raw) for v in encoding.fill_values) if f is not None
        )
        self._all_invalid, self._below, self._above = _raw_bounds(encoding.valid_min, encoding.valid_max, raw)

    # The DeclaresOutput protocol: same shape, the decoded dtype.
    def out_spec(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[tuple[int, ...], Any]:
        """``(shape, dtype)`` of the output for an input of ``shape`` and ``dtype``."""
        self._check_input(np.dtype(dtype), "")
        return tuple(shape), self.dtype

    def fingerprint(self) -> str:
        """The transform's parameters, the same in every process for the same encoding."""
        enc = self.encoding
        # repr of Python ints and floats is exact and stable; numpy scalars' repr varies by release.
        return (
            "insitu.cf.CFDecode/1("
            f"stored={enc.stored_dtype.newbyteorder('=').name}, unsigned={enc.unsigned!r}, "
            f"scale_factor={enc.scale_factor!r}, add_offset={enc.add_offset!r}, "
            f"fill_values={enc.fill_values!r}, valid_min={enc.valid_min!r}, valid_max={enc.valid_max!r}, "
            f"dtype={self.dtype.name})"
        )

    def __repr__(self) -> str:
        return self.fingerprint().replace("insitu.cf.CFDecode/1", "CFDecode", 1)

    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        """Decode one slab: unpack, mask fill and out-of-range values as NaN, cast to ``self.dtype``.

        Parameters
        ----------
        name
            The array path the slab belongs to (named in errors).
        block
            A slab in the stored dtype; it is never modified (the result is a new array)."""
        raw, missing = self._raw_and_missing(name, np.asarray(block))
        out = raw.astype(self.dtype)  # a copy always: the input is never modified
        enc = self.encoding
        if enc.scale_factor is not None:
            out *= enc.scale_factor
        if enc.add_offset is not None:
            out += enc.add_offset
        if missing is not None:
            np.copyto(out, np.nan, where=missing)
        return out

    def _check_input(self, dtype: np.dtype[Any], name: str) -> None:
        stored = self.encoding.stored_dtype
        if dtype.kind != stored.kind or dtype.itemsize != stored.itemsize:
            where = f" for {_what(name)}" if name else ""
            raise ConfigError(
                f"CF decoding{where} expects slabs of the stored dtype {stored}, got {dtype}; "
                "run it before any transform that changes the dtype"
            )

    def _raw_and_missing(self, name: str, block: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """The slab read as the raw dtype (a view), and where it is missing (None: nowhere)."""
        self._check_input(block.dtype, name)
        raw = block
        if self.encoding.unsigned is not None:
            raw = block.view(self._raw.newbyteorder(block.dtype.byteorder))
        if self._all_invalid:
            return raw, np.ones(raw.shape, dtype=bool)
        missing: np.ndarray | None = None
        scratch: np.ndarray | None = None
        tests: list[tuple[np.ufunc, Any]] = [(np.equal, v) for v in self._fills]
        if self._below is not None:
            tests.append((np.less, self._below))
        if self._above is not None:
            tests.append((np.greater, self._above))
        for compare, value in tests:
            if missing is None:
                missing = compare(raw, value)
            else:
                # One scratch mask for every later comparison rather than a new one each.
                if scratch is None:
                    scratch = np.empty(raw.shape, dtype=bool)
                compare(raw, value, out=scratch)
                missing |= scratch
        return raw, missing


def _as_raw(value: Number, stored: np.dtype[Any], raw: np.dtype[Any]) -> Any:
    """``value`` as a scalar of the raw dtype, or None when no raw value can equal it.

    A fill value of reinterpreted integers may be given as stored (signed, so
    it is converted bit for bit, as xarray does for ``_FillValue``) or as read.
    """
    if raw.kind == "f":
        with np.errstate(over="ignore"):
            return raw.type(value)  # the nearest value of the raw width: what was stored for it
    if isinstance(value, float):
        if not value.is_integer():
            return None
        value = int(value)
    native = stored.newbyteorder("=")
    if _fits(value, native):
        return np.array(value, dtype=native).view(raw)[()]
    if _fits(value, raw):
        return raw.type(value)
    return None


def _fits(value: int, dtype: np.dtype[Any]) -> bool:
    info = np.iinfo(dtype)
    return info.min <= value <= info.max


def _raw_bounds(low: Number | None, high: Number | None, raw: np.dtype[Any]) -> tuple[bool, Any, Any]:
    """(everything invalid, lower bound, upper bound) as scalars of the raw dtype; a bound no raw
    value can cross is None. Integer data is compared with integer bounds, which avoids
    promoting every slab to float64 for the comparison."""
    if raw.kind == "f":
        return False, low, high
    info = np.iinfo(raw)
    below = above = None
    if low is not None:
        first = math.ceil(low)
        if first > info.max:
            return True, None, None
        below = raw.type(first) if first > info.min else None
    if high is not None:
        last = math.floor(high)
        if last < info.min:
            return True, None, None
        above = raw.type(last) if last < info.max else None
    return False, below, above


def cf_transform_for(
    metadata: Mapping[str, Any], *, name: str = "", dtype: npt.DTypeLike | None = None
) -> CFDecode | None:
    """The chunk transform decoding one array, or None when it carries nothing to decode.

    ``metadata`` is the zarr metadata dict (see :func:`cf_encoding`);
    ``dtype`` overrides the output dtype.
    """
    encoding = cf_encoding(metadata, name=name)
    return None if encoding is None else CFDecode(encoding, dtype=dtype)


# -- coordinates and time ----------------------------------------------------------------------------
_NS_PER_UNIT = {
    **dict.fromkeys(("days", "day", "d"), 86_400 * 10**9),
    **dict.fromkeys(("hours", "hour", "hrs", "hr", "h"), 3_600 * 10**9),
    **dict.fromkeys(("minutes", "minute", "mins", "min"), 60 * 10**9),
    **dict.fromkeys(("seconds", "second", "secs", "sec", "s"), 10**9),
    **dict.fromkeys(("milliseconds", "millisecond", "msecs", "msec", "ms"), 10**6),
    **dict.fromkeys(("microseconds", "microsecond", "usecs", "usec", "us"), 10**3),
    **dict.fromkeys(("nanoseconds", "nanosecond", "ns"), 1),
}
_TIME_UNITS = re.compile(r"^\s*([A-Za-z]+)\s+since\s+(.+?)\s*$", re.IGNORECASE)
_REFERENCE = re.compile(
    r"""^(?P<year>\d{1,4})-(?P<month>\d{1,2})-(?P<day>\d{1,2})
    (?:(?:T|\s+)(?P<hour>\d{1,2}):(?P<minute>\d{1,2})
        (?::(?P<second>\d{1,2})(?:\.(?P<fraction>\d+))?)?)?
    \s*(?P<zone>Z|UTC|GMT|[+-]\d{1,2}(?::?\d{2})?)?$""",
    re.IGNORECASE | re.VERBOSE,
)
_STANDARD_CALENDARS = {"standard", "gregorian", "proleptic_gregorian"}
_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
_DAY_NS = 86_400 * 10**9
# In the "standard" (mixed) calendar, days before this one are Julian; numpy's are proleptic Gregorian.
_GREGORIAN_REFORM_NS = (datetime.date(1582, 10, 15).toordinal() - _EPOCH_ORDINAL) * _DAY_NS
_NAT = np.iinfo(np.int64).min
_NS_MIN, _NS_MAX = _NAT + 1, np.iinfo(np.int64).max  # int64 min itself is NaT


def is_cf_time(attrs: Mapping[str, Any]) -> bool:
    """Whether ``attrs`` describe a CF time coordinate: ``units`` of the form
    ``"<unit> since <reference date>"`` with a known time unit. The reference date
    is checked only when decoding."""
    units = attrs.get("units")
    if not isinstance(units, str):
        return False
    match = _TIME_UNITS.match(units)
    return match is not None and match.group(1).lower() in _NS_PER_UNIT


def decode_coordinate(
    values: np.ndarray, attrs: Mapping[str, Any], *, name: str = "", fill_value: Any = None
) -> np.ndarray:
    """Decoded values of one coordinate array.

    CF time (see :func:`is_cf_time`) becomes ``datetime64[ns]``, exactly for
    integer values (float values are rounded to the nearest nanosecond);
    missing values (fill values, NaN, and int64's minimum, which is how
    xarray writes NaT) become NaT. Only the standard, gregorian and
    proleptic_gregorian calendars are decoded; another raises
    :class:`CFTimeError`. Other coordinates are CF-decoded like data when they
    carry packing or missing-value attributes (integers to float64), and are
    returned unchanged otherwise.

    ``attrs`` are the array's zarr attributes; ``fill_value`` is its zarr
    fill_value, which counts only where it is the CF ``_FillValue`` (zarr v2
    written by xarray: ``attrs`` hold ``_ARRAY_DIMENSIONS``). ``name`` names
    the coordinate in error messages.
    """
    values = np.asarray(values)
    zarr_fill = fill_value if DIMENSIONS_KEY in attrs else None
    if is_cf_time(attrs):
        return _decode_time(values, attrs, name, zarr_fill)
    if values.dtype.kind not in "iuf":
        return values
    encoding = _encoding_from(attrs, values.dtype, zarr_fill, name)
    if encoding is None:
        return values
    widen = values.dtype.kind in "iu" and (encoding.packed or encoding.masked)
    return CFDecode(encoding, dtype=np.float64 if widen else None)(name, values)


def _decode_time(values: np.ndarray, attrs: Mapping[str, Any], name: str, zarr_fill: Any) -> np.ndarray:
    what = f"time coordinate {name!r}" if name else "the time coordinate"
    units = str(attrs["units"])
    calendar = attrs.get("calendar", "standard")
    if not isinstance(calendar, str):
        raise ConfigError(f"{what}: attribute 'calendar' must be a string, got {calendar!r}")
    if calendar.strip().lower() not in _STANDARD_CALENDARS:
        raise CFTimeError(
            f"{what} uses the calendar {calendar!r}; only the standard, gregorian and "
            "proleptic_gregorian calendars decode to datetime64, cftime calendars are not decoded"
        )
    step, reference = _parse_time_units(units, what)
    if calendar.strip().lower() != "proleptic_gregorian" and reference < _GREGORIAN_REFORM_NS:
        raise CFTimeError(
            f"{what}: units {units!r} with the calendar {calendar!r} count from a date before the "
            "Gregorian reform (1582-10-15), which that calendar reckons in the Julian calendar; cftime "
            "calendars are not decoded (the calendar 'proleptic_gregorian' would be)"
        )
    if values.dtype.kind == "M":
        return values.astype("datetime64[ns]")
    if values.dtype.kind not in "iuf":
        raise ConfigError(f"{what}: time values must be numbers, got dtype {values.dtype}")

    encoding = _encoding_from(attrs, values.dtype, zarr_fill, name)
    missing: np.ndarray | None = None
    raw = values
    if encoding is not None and encoding.packed:
        raw = CFDecode(encoding, dtype=np.float64)(name, values)  # missing values come back as NaN
    elif encoding is not None:
        raw, missing = CFDecode(encoding)._raw_and_missing(name, values)
    if raw.dtype.kind == "f":
        raw = raw.astype(np.float64)  # float32 times lose whole seconds in the split below
        nan = np.isnan(raw)
        missing = nan if missing is None else missing | nan
    elif raw.dtype == np.int64:
        nat = raw == _NAT
        missing = nat if missing is None else missing | nat
    if missing is None:
        missing = np.zeros(raw.shape, dtype=bool)

    present = raw[~missing]
    if raw.dtype.kind == "f":
        if not np.isfinite(present).all():
            bad = present[~np.isfinite(present)][0]
            raise ConfigError(f"{what}: value {bad.item()!r} {units!r} is not a date")
        # Whole units are converted exactly as integers; only the fraction is rounded to 1 ns.
        numbers = np.where(missing, 0.0, raw)
        whole = np.floor(numbers)
        part = np.rint((numbers - whole) * step)
    else:
        whole = np.where(missing, 0, raw)
        part = None
    if present.size:
        for extreme in (present.min(), present.max()):
            _check_ns_range(extreme, step, reference, what, units)

    # int64 arithmetic wraps modulo 2**64, so the sum is exact whenever the true result fits, which
    # _check_ns_range made sure of (intermediate products may wrap, e.g. days since 0001-01-01).
    ns = whole.astype(np.int64)
    with np.errstate(over="ignore"):
        ns *= np.int64(step)
        if part is not None:
            ns += part.astype(np.int64)
        ns += np.int64((reference - _NAT) % 2**64 + _NAT)
    ns[missing] = _NAT
    return ns.view("datetime64[ns]")


def _check_ns_range(value: Any, step: int, reference: int, what: str, units: str) -> None:
    """Raise unless ``value`` in ``units`` is a datetime64[ns]; the check is exact (Python ints)."""
    if isinstance(value, np.floating):
        whole = math.floor(float(value))
        total = whole * step + round((float(value) - whole) * step) + reference
    else:
        whole = int(value)
        total = whole * step + reference
    # The whole part must also fit int64, the type it is converted to before scaling.
    if not (_NS_MIN <= total <= _NS_MAX and -(2**63) <= whole < 2**63):
        raise ConfigError(
            f"{what}: value {value.item()!r} {units!r} is outside the datetime64[ns] range "
            f"({np.datetime64(_NS_MIN, 'ns')} .. {np.datetime64(_NS_MAX, 'ns')})"
        )


def _parse_time_units(units: str, what: str) -> tuple[int, int]:
    """``(nanoseconds per unit, reference date in ns since 1970-01-01 UTC)`` of CF time units;
    the reference is a Python int, which may lie outside datetime64[ns]."""
    match = _TIME_UNITS.match(units)
    assert match is not None  # is_cf_time() said so
    step = _NS_PER_UNIT[match.group(1).lower()]
    ref = _REFERENCE.match(match.group(2))
    bad = ConfigError(
        f"{what}: cannot read the reference date in units {units!r}; expected "
        "'YYYY-MM-DD', optionally followed by ' hh:mm:ss' or 'Thh:mm:ss' and 'Z' or '+hh:mm'"
    )
    if ref is None:
        raise bad
    parts = ref.groupdict()
    year, month, mday, hour, minute, second = (
        int(parts[k] or 0) for k in ("year", "month", "day", "hour", "minute", "second")
    )
    try:
        day = datetime.date(year, month, mday)
    except ValueError:
        raise bad from None
    if hour > 23 or minute > 59 or second > 59:
        raise bad
    fraction = parts["fraction"] or ""
    nanos = int((fraction + "0" * 9)[:9])  # digits past nanoseconds cannot be represented
    reference = (day.toordinal() - _EPOCH_ORDINAL) * _DAY_NS + ((hour * 60 + minute) * 60 + second) * 10**9
    reference += nanos
    zone = (parts["zone"] or "").upper()
    if zone and zone not in ("Z", "UTC", "GMT"):
        # A reference in local time: UTC = local - offset.
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        hours, mins = (int(digits[:-2]), int(digits[-2:])) if len(digits) > 2 else (int(digits), 0)
        reference -= sign * (hours * 60 + mins) * 60 * 10**9
    return step, reference
