"""Numbers a user passes to the public entry points are checked where they are passed.

Each bad value fails at once with a ConfigError that names it, instead of
deep inside numpy on the first iteration, or silently (1.5 taken as 1, a
string read as its letters, an empty array found out as an empty split).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import field, write_array

import insitu
from insitu.errors import ConfigError


@pytest.fixture
def store(tmp_path: Path) -> Any:
    write_array(tmp_path, "a", field(40, (3,)), (4, 3), dimension_names=("time", "x"))
    return insitu.open_store(tmp_path)


@pytest.fixture
def geom(store: Any) -> insitu.ArrayGeometry:
    return insitu.open_geometries(store, ["a"])["a"]


# -- split_by_chunk ---------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [-1, 1.5, "1", None, True, np.float64(2.0)])
@pytest.mark.parametrize("contiguous", [False, True])
def test_a_bad_seed_is_named_at_once(geom: insitu.ArrayGeometry, seed: Any, contiguous: bool) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"seed must be a non-negative integer, got {seed!r}")):
        insitu.split_by_chunk(geom, seed=seed, contiguous=contiguous)


def test_a_numpy_integer_seed_is_an_integer(geom: insitu.ArrayGeometry) -> None:
    assert insitu.split_by_chunk(geom, seed=np.int64(3), contiguous=False).seed == 3


@pytest.mark.parametrize(
    ("fractions", "match"),
    [
        (None, "fractions must be a sequence of numbers, got None"),
        (0.8, "fractions must be a sequence of numbers, got 0.8"),
        (("0.5", "0.5"), r"fractions must be a sequence of numbers, got \('0.5', '0.5'\)"),
        ((True, False), "fractions must be a sequence of numbers"),
        ((), "fractions is empty"),
        ((float("nan"), 1.0), "fractions must be non-negative"),
        ((float("inf"), 0.0), "fractions must be non-negative"),
    ],
)
def test_bad_fractions_are_named(geom: insitu.ArrayGeometry, fractions: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        insitu.split_by_chunk(geom, fractions)


@pytest.mark.parametrize(
    ("names", "match"),
    [
        ("ab", "names must be a sequence of split names, got the string 'ab'"),
        (3, "names must be a sequence of split names, got 3"),
        ((1, 2), r"names must be non-empty strings, got \(1, 2\)"),
        (("", "val"), "names must be non-empty strings"),
        (("a", "a"), "must be unique"),
        (("a",), "must be unique and match fractions"),
    ],
)
def test_bad_split_names_are_named(geom: insitu.ArrayGeometry, names: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        insitu.split_by_chunk(geom, (0.5, 0.5), names=names)


@pytest.mark.parametrize(
    ("sample_range", "match"),
    [
        ((0.5, 20.7), r"sample_range=\(0.5, 20.7\) must be integers"),  # not silently (0, 20)
        (("0", "20"), "must be integers"),
        ((-4, 20), "must be integers with 0 <= start < stop <= 40"),
        ((20, 20), "start < stop"),
        ((0, 41), "stop <= 40"),
        (20, "sample_range must be a \\(start, stop\\) pair, got 20"),
        ((0, 20, 40), "must be a \\(start, stop\\) pair"),
    ],
)
def test_a_bad_sample_range_is_named(geom: insitu.ArrayGeometry, sample_range: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        insitu.split_by_chunk(geom, (1.0,), sample_range=sample_range)


def test_contiguous_and_the_geometry_are_checked(geom: insitu.ArrayGeometry) -> None:
    with pytest.raises(ConfigError, match="contiguous must be True or False, got 'no'"):
        insitu.split_by_chunk(geom, contiguous="no")
    with pytest.raises(ConfigError, match="split_by_chunk splits an ArrayGeometry, got str"):
        insitu.split_by_chunk("a")  # type: ignore[arg-type]


# -- a zero-length sample axis ----------------------------------------------------------------
@pytest.fixture
def with_empty(tmp_path: Path) -> Any:
    write_array(tmp_path, "a", field(40, (3,)), (4, 3))
    zarr.open_group(tmp_path, mode="a").create_array(
        "empty", shape=(0, 3), chunks=(4, 3), dtype="f4", dimension_names=("time", "x")
    )
    return insitu.open_store(tmp_path)


def test_an_empty_sample_axis_is_named_when_the_array_is_described(with_empty: Any) -> None:
    message = (
        r"array 'empty' has no samples: its sample axis \(axis 0, 'time'\) has length 0 \(shape \(0, 3\)\)"
    )
    with pytest.raises(ConfigError, match=message):
        insitu.open_geometries(with_empty, ["empty"])
    # Found by default discovery, the message says how to leave it out.
    with pytest.raises(ConfigError, match=message + r"; name the arrays to read with variables="):
        insitu.open_geometries(with_empty)
    assert list(insitu.open_geometries(with_empty, ["a"])) == ["a"]


def test_an_array_geometry_without_samples_cannot_be_made() -> None:
    with pytest.raises(ConfigError, match=r"array 'a' has no samples: .*\(shape \(3, 0\)\)"):
        insitu.ArrayGeometry("a", "a", (3, 0), np.dtype("f4"), (1, 1), sample_axis=1)


def test_an_empty_axis_besides_the_sample_axis_is_named(tmp_path: Path) -> None:
    """Samples of no values once reached the pool's budget split as a division by zero."""
    zarr.open_group(tmp_path, mode="a").create_array("flat", shape=(40, 0), chunks=(4, 1), dtype="f4")
    with pytest.raises(
        ConfigError, match=r"array 'flat' has empty samples: axis 1 has length 0 \(shape \(40, 0\)\)"
    ):
        insitu.open_geometries(insitu.open_store(tmp_path), ["flat"])


# -- ArrayGeometry and its windows -------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"chunk_shape": (0, 3)}, r"chunk shape must be a sequence of positive integers, got \(0, 3\)"),
        ({"chunk_shape": (2.0, 3)}, "chunk shape must be a sequence of positive integers"),
        ({"shape": (-4, 3)}, r"shape must be a sequence of non-negative integers, got \(-4, 3\)"),
        ({"shape": 4}, "shape must be a sequence"),
        ({"sample_axis": 1.5}, "sample_axis must be an integer axis number, got 1.5"),
        ({"sample_axis": True}, "sample_axis must be an integer axis number, got True"),
        ({"sample_axis": 2}, "sample_axis=2 is out of range"),
        ({"offset": 1.5}, "offset must be an integer number of samples .*got 1.5"),
        ({"offset": 2**70}, "offset must be an integer number of samples within 2\\*\\*62"),
    ],
)
def test_array_geometry_fields_are_checked(kwargs: dict[str, Any], match: str) -> None:
    fields: dict[str, Any] = {"shape": (4, 3), "chunk_shape": (2, 3), **kwargs}
    with pytest.raises(ConfigError, match=match):
        insitu.ArrayGeometry("x", "x", dtype=np.dtype("f4"), **fields)


@pytest.mark.parametrize(
    ("k", "match"),
    [
        (1.5, "shift must be an integer number of samples or a time span, got 1.5"),
        (True, "shift must be an integer number of samples or a time span, got True"),
        ("3", r"a time span is a whole number and a unit \(D, h, min, s\), like '24h'; got '3'"),
        (10**30, r"shift\(10{30}\) is too far"),
    ],
)
def test_a_bad_shift_is_named(geom: insitu.ArrayGeometry, k: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        geom.shift(k)


def test_shifts_by_numpy_integers_compose(geom: insitu.ArrayGeometry) -> None:
    shifted = geom.shift(np.int64(3)).shift(-1)
    assert shifted.offset == 2
    assert type(shifted.offset) is int
    assert shifted.label == "a+2"


# -- open_geometries ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sample_axis", "match"),
    [
        (1.5, "sample_dim must be a dimension name or an axis number, got 1.5"),
        (True, "got True"),  # not axis 1
        ([0], r"got \[0\]"),  # None is the default: the dimension leading most arrays
        ("", "got ''"),
        ({"a": 2.5}, "sample_dim must be a dimension name or an axis number for array 'a', got 2.5"),
        ({"a": {"b": 0}}, "for array 'a'"),
        ({"zz": 1}, r"sample_dim names unknown array\(s\) \['zz'\]; the arrays read are \['a'\]"),
        (5, "sample_axis=5 is out of range for array 'a' with 2 dims"),
    ],
)
def test_a_bad_sample_axis_is_named(store: Any, sample_axis: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        insitu.open_geometries(store, ["a"], sample_dim=sample_axis)


def test_sample_axis_by_number_name_or_mapping(store: Any) -> None:
    by_number = insitu.open_geometries(store, ["a"], sample_axis=np.int64(1))["a"]
    assert by_number.sample_axis == 1
    assert insitu.open_geometries(store, ["a"], sample_axis="x")["a"] == by_number
    assert insitu.open_geometries(store, sample_axis={"a": "x"})["a"] == by_number


@pytest.mark.parametrize(
    ("variables", "match"),
    [
        ("a", "variables must be a list of array names, got the string 'a'"),
        (3, "variables must be a list of array names, got 3"),
        ([], r"variables must be non-empty array names, got \[\]"),
        (["a", 1], r"variables must be non-empty array names, got \['a', 1\]"),
    ],
)
def test_bad_variables_are_named(store: Any, variables: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        insitu.open_geometries(store, variables)


def test_a_bad_group_path_is_named(store: Any) -> None:
    with pytest.raises(ConfigError, match="path must be a string"):
        insitu.open_geometries(store, path=3)  # type: ignore[arg-type]
