"""CF decoding without xarray, checked against xarray: stores are written by xarray in both zarr
formats, decoded from their raw chunks and zarr metadata, and compared with what xarray reads."""

from __future__ import annotations

import base64
import struct
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

xr = pytest.importorskip("xarray")
import zarr  # noqa: E402  (after the skip: the module needs xarray as its reference)

from insitu.arrays.cf import (  # noqa: E402
    CFDecode,
    CFEncoding,
    CFTimeError,
    cf_encoding,
    cf_transform_for,
    decode_coordinate,
    is_cf_time,
)
from insitu.errors import ConfigError  # noqa: E402

FORMATS = pytest.mark.parametrize("fmt", [2, 3])


# -- helpers -----------------------------------------------------------------------------------------
def write(tmp_path: Path, ds: Any, fmt: int, encoding: dict[str, Any] | None = None) -> Path:
    path = tmp_path / f"v{fmt}.zarr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # xarray's notes on chunking and consolidation
        ds.to_zarr(path, zarr_format=fmt, encoding=encoding or {}, consolidated=False)
    return path


def raw_and_metadata(path: Path, var: str) -> tuple[np.ndarray, dict[str, Any]]:
    array = zarr.open_array(path, path=var, mode="r")
    return array[...], array.metadata.to_dict()


def set_attrs(path: Path, var: str, **attrs: Any) -> None:
    zarr.open_array(path, path=var, mode="r+").attrs.update(attrs)


def reference(path: Path, var: str) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "multiple fill values" and the like
        return np.asarray(xr.open_zarr(path, chunks=None, consolidated=False)[var].values)


def ours(path: Path, var: str) -> np.ndarray:
    raw, meta = raw_and_metadata(path, var)
    transform = cf_transform_for(meta, name=var)
    assert transform is not None, f"{var} should carry a CF encoding: {meta['attributes']}"
    out = transform(var, raw)
    shape, dtype = transform.out_spec(raw.shape, raw.dtype)
    assert (out.shape, out.dtype) == (shape, np.dtype(dtype))
    return out


def assert_matches(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    # float32 against float64: relative to each value, and to the data's magnitude near zero (where
    # raw * scale + offset cancels).
    scale = float(np.nanmax(np.abs(want))) if np.isfinite(want).any() else 0.0
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * scale, equal_nan=True)


def grid(values: list[float]) -> np.ndarray:
    return np.array(values, dtype=np.float64).reshape(2, -1)


# -- data: compared with xarray ----------------------------------------------------------------------
@FORMATS
def test_int16_packed_with_fill(tmp_path: Path, fmt: int) -> None:
    data = grid([250.0, 273.15, np.nan, 300.5, -10.0, np.nan, 310.25, 0.0])
    ds = xr.Dataset({"t": (("time", "x"), data)})
    enc = {"t": {"dtype": "int16", "scale_factor": 0.01, "add_offset": 273.15, "_FillValue": -32767}}
    path = write(tmp_path, ds, fmt, enc)
    raw, _ = raw_and_metadata(path, "t")
    assert (raw == -32767).sum() == 2  # the NaNs went to disk as the fill value
    got = ours(path, "t")
    assert got.dtype == np.float32  # 16-bit packing: float32 (xarray: float64)
    assert_matches(got, reference(path, "t"))


@FORMATS
@pytest.mark.parametrize("dtype", ["int32", "uint8"])
def test_other_packed_widths(tmp_path: Path, fmt: int, dtype: str) -> None:
    data = grid([1.5, 2.0, np.nan, 100.0])
    fill = 255 if dtype == "uint8" else -2147483647
    ds = xr.Dataset({"v": (("time", "x"), data)})
    path = write(tmp_path, ds, fmt, {"v": {"dtype": dtype, "scale_factor": 0.5, "_FillValue": fill}})
    got = ours(path, "v")
    assert got.dtype == (np.float64 if dtype == "int32" else np.float32)
    assert_matches(got, reference(path, "v"))


@FORMATS
def test_float32_with_nan_and_fill_value(tmp_path: Path, fmt: int) -> None:
    data = np.array([[1.0, np.nan, -9999.0], [2.5, 3.0, np.nan]], dtype=np.float32)
    path = write(tmp_path, xr.Dataset({"f": (("time", "x"), data)}), fmt, {"f": {"_FillValue": -9999.0}})
    _, meta = raw_and_metadata(path, "f")
    encoding = cf_encoding(meta, name="f")
    assert encoding is not None
    assert encoding.fill_values == (-9999.0,)
    got = ours(path, "f")
    assert got.dtype == np.float32
    assert_matches(got, reference(path, "f"))
    assert np.isnan(got).sum() == 3


@FORMATS
def test_missing_value(tmp_path: Path, fmt: int) -> None:
    data = grid([1.0, np.nan, 3.0, 4.0])
    ds = xr.Dataset({"m": (("time", "x"), data)})
    path = write(tmp_path, ds, fmt, {"m": {"dtype": "int16", "missing_value": -1, "scale_factor": 0.5}})
    assert_matches(ours(path, "m"), reference(path, "m"))


@FORMATS
def test_several_missing_values_and_a_fill_value(tmp_path: Path, fmt: int) -> None:
    data = np.array([[5, -1, -2, 7], [-3, 0, 9, -1]], dtype=np.int16)
    path = write(tmp_path, xr.Dataset({"m": (("time", "x"), data)}), fmt, {"m": {"_FillValue": -3}})
    set_attrs(path, "m", missing_value=[-1, -2])
    got = ours(path, "m")
    assert got.dtype == np.float32  # masked 16-bit integers
    assert np.isnan(got).sum() == 4
    assert_matches(got, reference(path, "m"))


@FORMATS
def test_unsigned_with_fill(tmp_path: Path, fmt: int) -> None:
    data = grid([0.0, 200.0, np.nan, 3.0])
    ds = xr.Dataset({"u": (("time", "x"), data)})
    path = write(tmp_path, ds, fmt, {"u": {"dtype": "int8", "_Unsigned": "true", "_FillValue": 255}})
    raw, _ = raw_and_metadata(path, "u")
    assert raw.dtype == np.int8
    assert raw.min() < 0
    got = ours(path, "u")
    assert_matches(got, reference(path, "u"))
    np.testing.assert_array_equal(got, grid([0.0, 200.0, np.nan, 3.0]))


@FORMATS
def test_unsigned_alone_stays_integer(tmp_path: Path, fmt: int) -> None:
    data = np.array([[0, -56, -1, 3]], dtype=np.int8)
    path = write(tmp_path, xr.Dataset({"u": (("time", "x"), data)}), fmt)
    set_attrs(path, "u", _Unsigned="true")
    got = ours(path, "u")
    want = reference(path, "u")
    assert got.dtype == want.dtype == np.uint8
    np.testing.assert_array_equal(got, want)


@FORMATS
def test_valid_range_masks_raw_values(tmp_path: Path, fmt: int) -> None:
    raw_values = np.array([[-200, -100, 0, 50], [100, 101, 300, -32767]], dtype=np.int16)
    ds = xr.Dataset({"v": (("time", "x"), raw_values)})
    path = write(tmp_path, ds, fmt, {"v": {"_FillValue": -32767}})
    set_attrs(path, "v", scale_factor=0.1, add_offset=5.0, valid_range=[-100, 100])
    want = reference(path, "v")  # xarray does not apply valid_range: mask it by hand
    want[(raw_values < -100) | (raw_values > 100)] = np.nan
    got = ours(path, "v")
    assert_matches(got, want)
    assert np.isnan(got).tolist() == [[True, False, False, False], [False, True, True, True]]


@FORMATS
def test_valid_min_and_max_on_floats(tmp_path: Path, fmt: int) -> None:
    data = np.array([[-5.0, 0.0, 0.5, 1.0, 1.5]], dtype=np.float32)
    path = write(tmp_path, xr.Dataset({"f": (("time", "x"), data)}), fmt)
    set_attrs(path, "f", valid_min=0.0, valid_max=1.0)
    want = reference(path, "f")
    want[(data < 0) | (data > 1)] = np.nan
    assert_matches(ours(path, "f"), want)


@FORMATS
def test_no_cf_attributes_is_none(tmp_path: Path, fmt: int) -> None:
    ds = xr.Dataset(
        {
            "f": (("time", "x"), np.ones((2, 3), dtype=np.float32)),  # fill NaN: nothing to do
            "i": (("time", "x"), np.arange(6, dtype=np.int16).reshape(2, 3)),
            "b": (("time", "x"), np.ones((2, 3), dtype=bool)),
        }
    )
    path = write(tmp_path, ds, fmt)
    for var in ("f", "i", "b"):
        _, meta = raw_and_metadata(path, var)
        assert cf_encoding(meta, name=var) is None, meta
        assert cf_transform_for(meta, name=var) is None


@FORMATS
def test_plain_zarr_fill_value_is_not_a_mask(tmp_path: Path, fmt: int) -> None:
    array = zarr.create_array(tmp_path / "plain.zarr", shape=(4,), dtype="int16", zarr_format=fmt)
    array[:] = np.array([0, 1, 0, 2], dtype=np.int16)
    meta = array.metadata.to_dict()
    assert meta["fill_value"] == 0
    assert cf_encoding(meta, name="plain") is None
    assert decode_coordinate(array[...], dict(array.attrs), fill_value=meta["fill_value"]).tolist() == [
        0,
        1,
        0,
        2,
    ]


def test_v2_fill_value_is_the_fill_value_only_for_xarray_arrays() -> None:
    base = {"zarr_format": 2, "dtype": "<i2", "fill_value": -1}
    assert cf_encoding({**base, "attributes": {}}) is None
    encoding = cf_encoding({**base, "attributes": {"_ARRAY_DIMENSIONS": ["x"]}})
    assert encoding is not None
    assert encoding.fill_values == (-1,)
    # Plain v2 arrays: the attribute alone counts.
    plain = cf_encoding({**base, "attributes": {"_FillValue": -9}})
    assert plain is not None
    assert plain.fill_values == (-9,)


def test_v3_float_fill_value_is_base64_float64() -> None:
    encoded = base64.standard_b64encode(struct.pack("<d", -9999.0)).decode()
    meta = {
        "zarr_format": 3,
        "data_type": "float32",
        "fill_value": "NaN",
        "attributes": {"_FillValue": encoded},
    }
    encoding = cf_encoding(meta)
    assert encoding is not None
    assert encoding.fill_values == (-9999.0,)
    # Plain numbers, as other writers put them, are read too.
    meta["attributes"] = {"_FillValue": -9999.0}
    assert cf_encoding(meta) == encoding


# -- the transform -----------------------------------------------------------------------------------
def test_input_is_never_modified_and_out_spec_agrees() -> None:
    encodings = [
        CFEncoding(np.dtype("int16"), scale_factor=0.5, add_offset=1.0, fill_values=(-1, 7), valid_max=100),
        CFEncoding(np.dtype("float32"), fill_values=(-9999.0,), valid_min=0.0),
        CFEncoding(np.dtype("int8"), unsigned=True),
        CFEncoding(np.dtype("float16"), scale_factor=2.0),
        CFEncoding(np.dtype("int64"), fill_values=(0,)),
    ]
    rng = np.random.default_rng(0)
    for encoding in encodings:
        block = rng.integers(-20, 120, size=(4, 3, 2)).astype(encoding.stored_dtype)
        block[0, 0, 0] = encoding.fill_values[0] if encoding.fill_values else 1
        before = block.copy()
        transform = CFDecode(encoding)
        out = transform("a", block)
        np.testing.assert_array_equal(block, before)
        assert not np.shares_memory(out, block)
        shape, dtype = transform.out_spec(block.shape, block.dtype)
        assert (out.shape, out.dtype) == (shape, np.dtype(dtype))


def test_output_dtypes() -> None:
    def out(stored: str, **kw: Any) -> np.dtype[Any]:
        return CFDecode(CFEncoding(np.dtype(stored), **kw)).dtype

    assert out("int16", scale_factor=0.1) == np.float32
    assert out("uint16", add_offset=1.0) == np.float32
    assert out("int32", scale_factor=0.1) == np.float64
    assert out("float64", scale_factor=0.1) == np.float64
    assert out("float16", fill_values=(1.0,)) == np.float32
    assert out("int8", fill_values=(1,)) == np.float32
    assert out("int32", fill_values=(1,)) == np.float64
    assert out("int16", unsigned=True) == np.uint16
    assert CFDecode(CFEncoding(np.dtype("int16"), scale_factor=0.1), dtype="float64").dtype == np.float64
    with pytest.raises(ConfigError, match="int32"):
        CFDecode(CFEncoding(np.dtype("int16"), scale_factor=0.1), dtype="int32")


def test_big_endian_slabs_decode() -> None:
    block = np.array([[1, -1, 300]], dtype=">i2")
    got = CFDecode(CFEncoding(np.dtype(">i2"), scale_factor=2.0, fill_values=(-1,)))("a", block)
    np.testing.assert_array_equal(got, [[2.0, np.nan, 600.0]])
    unsigned = CFDecode(CFEncoding(np.dtype(">i2"), unsigned=True))("a", block)
    assert unsigned.tolist() == [[1, 65535, 300]]


def test_a_slab_of_another_dtype_is_refused() -> None:
    transform = CFDecode(CFEncoding(np.dtype("int16"), scale_factor=0.1))
    with pytest.raises(ConfigError, match="float32"):
        transform.out_spec((4, 2), np.dtype("float32"))
    with pytest.raises(ConfigError, match="'t2m'"):
        transform("t2m", np.zeros((4, 2), dtype=np.float32))


def test_fingerprint() -> None:
    one = CFDecode(CFEncoding(np.dtype("int16"), scale_factor=0.1, add_offset=2.0, fill_values=(-1,)))
    same = CFDecode(CFEncoding(np.dtype("int16"), scale_factor=0.1, add_offset=2.0, fill_values=(-1,)))
    other = CFDecode(CFEncoding(np.dtype("int16"), scale_factor=0.2, add_offset=2.0, fill_values=(-1,)))
    assert one.fingerprint() == same.fingerprint()
    assert one.fingerprint() != other.fingerprint()
    assert "0.1" in one.fingerprint()
    wider = CFDecode(one.encoding, dtype="float64")
    assert wider.fingerprint() != one.fingerprint()


# -- malformed and conflicting attributes ------------------------------------------------------------
def v3(attrs: dict[str, Any], data_type: str = "int16") -> dict[str, Any]:
    return {"zarr_format": 3, "data_type": data_type, "fill_value": 0, "attributes": attrs}


@pytest.mark.parametrize(
    ("meta", "words"),
    [
        (v3({"scale_factor": "0.1"}), ["scale_factor", "'0.1'"]),
        (v3({"add_offset": [1.0, 2.0]}), ["add_offset", "[1.0, 2.0]"]),
        (v3({"scale_factor": 0}), ["scale_factor", "0"]),
        (v3({"scale_factor": 0.0}), ["scale_factor", "0.0"]),
        (v3({"valid_range": [1]}), ["valid_range", "[1]"]),
        (v3({"valid_range": [0, "x"]}), ["valid_range", "[0, 'x']"]),
        (v3({"valid_range": [0, 10], "valid_min": 5}), ["valid_min", "5", "[0, 10]"]),
        (v3({"valid_range": [0, 10], "valid_max": 9.5}), ["valid_max", "9.5", "[0, 10]"]),
        (v3({"valid_min": 10, "valid_max": 0}), ["10", "0"]),
        (v3({"_FillValue": "oops"}), ["_FillValue", "'oops'"]),
        (v3({"_FillValue": "AAAA"}, "float32"), ["_FillValue", "'AAAA'", "base64"]),
        (v3({"missing_value": [1, "two"]}), ["missing_value", "'two'"]),
        (v3({"_Unsigned": "yes"}), ["_Unsigned", "'yes'"]),
        (
            {
                "zarr_format": 2,
                "dtype": "<i2",
                "fill_value": -32767,
                "attributes": {"_ARRAY_DIMENSIONS": ["x"], "_FillValue": -1},
            },
            ["_FillValue", "-1", "-32767"],
        ),
        (
            {
                "zarr_format": 2,
                "dtype": "<f4",
                "fill_value": "NaN",
                "attributes": {"_ARRAY_DIMENSIONS": ["x"], "_FillValue": -9999.0},
            },
            ["_FillValue", "-9999.0", "'NaN'"],
        ),
    ],
)
def test_malformed_attributes(meta: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        cf_encoding(meta, name="sst")
    message = str(info.value)
    for word in ["'sst'", *words]:
        assert word in message, message


def test_agreeing_attributes_are_accepted() -> None:
    encoding = cf_encoding(v3({"valid_range": [0, 10], "valid_min": 0.0, "scale_factor": [0.5]}))
    assert encoding == CFEncoding(np.dtype("int16"), scale_factor=0.5, valid_min=0, valid_max=10)
    v2 = {
        "zarr_format": 2,
        "dtype": "<f4",
        "fill_value": "NaN",
        "attributes": {"_ARRAY_DIMENSIONS": ["x"], "_FillValue": "NaN"},
    }
    assert cf_encoding(v2) is None


# -- time coordinates --------------------------------------------------------------------------------
TIMES = ["1999-12-31", "2000-01-01", "NaT", "2000-03-01", "2021-06-30"]
HALF_DAYS = ["1999-12-31T12:00", "2000-01-01", "NaT", "2000-03-01T12:00", "1950-06-30"]


@FORMATS
@pytest.mark.parametrize(
    ("units", "dtype", "times"),
    [
        ("hours since 1979-01-01", "int64", TIMES),
        ("hours since 1979-01-01", "float64", HALF_DAYS),
        ("days since 1900-01-01 00:00:00", "int64", TIMES),
        ("days since 1900-01-01 00:00:00", "float64", HALF_DAYS),
        ("seconds since 1970-01-01T00:00:00Z", "int64", HALF_DAYS),
        ("seconds since 1970-01-01T00:00:00Z", "float64", TIMES),
    ],
)
def test_time_matches_xarray(tmp_path: Path, fmt: int, units: str, dtype: str, times: list[str]) -> None:
    stamps = np.array(times, dtype="datetime64[ns]")
    ds = xr.Dataset({"v": ("time", np.arange(len(times), dtype=np.float32))}, coords={"time": stamps})
    path = write(tmp_path, ds, fmt, {"time": {"units": units, "dtype": dtype}})
    raw, meta = raw_and_metadata(path, "time")
    assert raw.dtype == np.dtype(dtype)
    attrs = meta["attributes"]
    assert is_cf_time(attrs)
    got = decode_coordinate(raw, attrs, name="time", fill_value=meta["fill_value"])
    want = reference(path, "time").astype("datetime64[ns]")
    assert got.dtype == np.dtype("datetime64[ns]")
    np.testing.assert_array_equal(got.view(np.int64), want.view(np.int64))
    np.testing.assert_array_equal(got.view(np.int64), stamps.view(np.int64))


@FORMATS
def test_time_with_a_fill_value(tmp_path: Path, fmt: int) -> None:
    stamps = np.array(["2000-01-01", "NaT", "2000-01-03"], dtype="datetime64[ns]")
    ds = xr.Dataset(coords={"time": stamps})
    enc = {"time": {"units": "days since 2000-01-01", "dtype": "int32", "_FillValue": -999}}
    path = write(tmp_path, ds, fmt, enc)
    raw, meta = raw_and_metadata(path, "time")
    assert -999 in raw
    got = decode_coordinate(raw, meta["attributes"], name="time", fill_value=meta["fill_value"])
    np.testing.assert_array_equal(got.view(np.int64), reference(path, "time").astype("M8[ns]").view(np.int64))


def test_time_unit_spellings_and_reference_dates() -> None:
    def decode(units: str, values: list[Any], **attrs: Any) -> list[str]:
        out = decode_coordinate(np.array(values), {"units": units, **attrs}, name="t")
        return [str(v) for v in out.astype("datetime64[s]")]

    assert decode("d since 2000-01-01", [1]) == ["2000-01-02T00:00:00"]
    assert decode("hr since 2000-01-01", [1]) == ["2000-01-01T01:00:00"]
    assert decode("h since 2000-1-1", [25]) == ["2000-01-02T01:00:00"]
    assert decode("min since 2000-01-01 00:00", [90]) == ["2000-01-01T01:30:00"]
    assert decode("sec since 2000-01-01T00:00:00Z", [61]) == ["2000-01-01T00:01:01"]
    assert decode("s since 2000-01-01 00:00:00+00:00", [1]) == ["2000-01-01T00:00:01"]
    assert decode("ms since 2000-01-01", [1500]) == ["2000-01-01T00:00:01"]
    assert decode("us since 2000-01-01", [2_000_000]) == ["2000-01-01T00:00:02"]
    assert decode("Hours Since 2000-01-01 06:00:00 +06:00", [0]) == ["2000-01-01T00:00:00"]
    assert decode("days since 2000-01-01", [1], calendar="Gregorian") == ["2000-01-02T00:00:00"]
    ns = decode_coordinate(np.array([0, 1]), {"units": "microseconds since 2000-01-01 00:00:00.5"})
    assert ns.view(np.int64)[1] - ns.view(np.int64)[0] == 1000
    assert str(ns[0]) == "2000-01-01T00:00:00.500000000"


def test_integer_times_are_exact() -> None:
    big = np.array([2**62 // 10**9, -(2**62) // 10**9], dtype=np.int64)
    got = decode_coordinate(big, {"units": "seconds since 1970-01-01"})
    assert got.view(np.int64).tolist() == [int(v) * 10**9 for v in big]
    # An intermediate product outside int64 (days from year 1) still gives the exact date.
    days = np.array([730119], dtype=np.uint32)
    got = decode_coordinate(days, {"units": "days since 0001-01-01", "calendar": "proleptic_gregorian"})
    assert str(got[0]) == "2000-01-01T00:00:00.000000000"


def test_time_outside_the_ns_range_names_the_value() -> None:
    with pytest.raises(ConfigError, match="300000"):
        decode_coordinate(np.array([0, 300000], dtype=np.int64), {"units": "days since 2000-01-01"}, name="t")
    with pytest.raises(ConfigError, match=r"1e\+20"):
        decode_coordinate(np.array([1e20]), {"units": "hours since 2000-01-01"}, name="t")


def test_noleap_calendar_is_refused(tmp_path: Path) -> None:
    array = zarr.create_array(tmp_path / "t.zarr", shape=(3,), dtype="float64", zarr_format=3)
    array[:] = [0.0, 1.0, 2.0]
    array.attrs.update({"units": "days since 2000-01-01", "calendar": "noleap"})
    meta = array.metadata.to_dict()
    assert is_cf_time(meta["attributes"])
    with pytest.raises(CFTimeError, match="noleap") as info:
        decode_coordinate(array[...], meta["attributes"], name="time")
    assert "'time'" in str(info.value)
    assert "cftime" in str(info.value)
    assert isinstance(info.value, ConfigError)


@pytest.mark.parametrize("calendar", ["360_day", "julian", "all_leap", "none"])
def test_other_calendars_are_refused(calendar: str) -> None:
    with pytest.raises(CFTimeError, match=calendar):
        decode_coordinate(np.arange(2), {"units": "days since 2000-01-01", "calendar": calendar}, name="t")


def test_standard_calendar_before_the_reform_is_refused() -> None:
    with pytest.raises(CFTimeError, match="1582"):
        decode_coordinate(np.arange(2), {"units": "days since 0001-01-01"}, name="t")


@pytest.mark.parametrize(
    "units", ["days since yesterday", "days since 2000-13-01", "days since 2000-01-01 25:00"]
)
def test_unreadable_reference_dates(units: str) -> None:
    with pytest.raises(ConfigError, match=units):
        decode_coordinate(np.arange(2), {"units": units}, name="t")


def test_is_cf_time() -> None:
    assert is_cf_time({"units": "days since 2000-01-01"})
    assert is_cf_time({"units": "Seconds since 1970-01-01T00:00:00Z"})
    assert not is_cf_time({"units": "K"})
    assert not is_cf_time({"units": "days"})
    assert not is_cf_time({"units": "fortnights since 2000-01-01"})
    assert not is_cf_time({})
    assert not is_cf_time({"units": 3})


# -- other coordinates -------------------------------------------------------------------------------
@FORMATS
def test_packed_coordinate_matches_xarray(tmp_path: Path, fmt: int) -> None:
    lat = np.array([-90.0, -45.5, 0.0, 45.25, 90.0])
    ds = xr.Dataset(coords={"lat": lat, "plain": ("lat", np.arange(5, dtype=np.int32))})
    path = write(tmp_path, ds, fmt, {"lat": {"dtype": "int16", "scale_factor": 0.01}})
    raw, meta = raw_and_metadata(path, "lat")
    got = decode_coordinate(raw, meta["attributes"], name="lat", fill_value=meta["fill_value"])
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, reference(path, "lat"), rtol=1e-12)
    raw, meta = raw_and_metadata(path, "plain")
    untouched = decode_coordinate(raw, meta["attributes"], name="plain", fill_value=meta["fill_value"])
    assert untouched.dtype == np.int32
    np.testing.assert_array_equal(untouched, reference(path, "plain"))


def test_float32_times_and_infinities() -> None:
    got = decode_coordinate(np.array([1.5, np.nan], dtype=np.float32), {"units": "days since 2000-01-01"})
    assert [str(v) for v in got] == ["2000-01-02T12:00:00.000000000", "NaT"]
    with pytest.raises(ConfigError, match="inf"):
        decode_coordinate(np.array([np.inf]), {"units": "days since 2000-01-01"}, name="t")
