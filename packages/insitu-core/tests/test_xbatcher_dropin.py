"""``insitu.xbatcher.BatchGenerator`` beside xbatcher's own, on a store written by ``to_zarr``.

For the same ``input_dims`` / ``input_overlap`` / ``batch_dims`` / ``concat_input_dims``, the
drop-in yields the same batches as xbatcher (compared as multisets of fingerprints of each
batch's values and coordinates, then each pair with ``xr.testing.assert_identical``), only in
another order; ``len`` and indexing agree with iteration; bad arguments raise the exception types
xbatcher raises, with messages that name the bad value; and one pass decodes each stored chunk
once.
"""

from __future__ import annotations

import hashlib
import re
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

xr = pytest.importorskip("xarray")
pd = pytest.importorskip("pandas")
xbatcher = pytest.importorskip("xbatcher")

from insitu.xbatcher import BatchGenerator  # noqa: E402  (after the skips: xarray is optional)

pytestmark = [
    pytest.mark.filterwarnings("ignore:Failed to open Zarr store with consolidated metadata"),
    pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part"),
    # xbatcher 0.4.0 calls xr.concat with defaults xarray has announced it will change.
    pytest.mark.filterwarnings("ignore:In a future version of xarray:FutureWarning"),
]

SHAPE = (12, 24, 36)  # time, lat, lon
CHUNKS = (4, 12, 18)  # 36 chunks per variable; a chunk holds 2 x 3 pieces of 6 x 6
N_CHUNKS = 3 * 3 * 2 * 2  # three variables


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(7)
    path = tmp_path_factory.mktemp("xb") / "era.zarr"
    t2m = (280 + 10 * rng.standard_normal(SHAPE)).astype("float32")
    t2m[2, 5:9, 30:] = np.nan  # stored as the _FillValue of the packed integers
    ds = xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), t2m, {"units": "K"}),
            "u10": (("time", "lat", "lon"), rng.standard_normal(SHAPE)),
            "cls": (("time", "lat", "lon"), rng.integers(0, 9, SHAPE).astype("int16")),
        },
        coords={
            "time": pd.date_range("2021-01-01", periods=SHAPE[0], freq="6h"),
            "lat": np.linspace(60.0, -60.0, SHAPE[1]),
            "lon": np.arange(SHAPE[2]) * 10.0,
            "cell_area": (("lat", "lon"), rng.random(SHAPE[1:])),
        },
        attrs={"title": "drop-in test"},
    )
    encoding = {v: {"chunks": CHUNKS} for v in ds.data_vars}
    # Packed as CF int16: xarray decodes it to float64, and so does the drop-in (bit for bit).
    encoding["t2m"] |= {"dtype": "int16", "scale_factor": 0.01, "add_offset": 280.0, "_FillValue": -32767}
    ds.to_zarr(path, encoding=encoding)
    return path


def fingerprint(batch: Any) -> str:
    """A digest of every variable of a batch (data and coordinates): name, dims, dtype, values."""
    ds = batch.to_dataset() if isinstance(batch, xr.DataArray) else batch
    if "sample" in ds.indexes:
        ds = ds.reset_index("sample")
    digest = hashlib.sha256()
    for name in sorted(map(str, ds.variables)):
        var = ds.variables[name]
        digest.update(f"{name}{var.dims}{var.dtype}".encode())
        digest.update(np.ascontiguousarray(var.values).tobytes())
    return digest.hexdigest()


def ours(store: Path, **kwargs: Any) -> BatchGenerator:
    return BatchGenerator(xr.open_zarr(store), **kwargs)


def theirs(store: Path, **kwargs: Any) -> list[Any]:
    # Its own Dataset: xbatcher may load the one it is given in place.
    return list(xbatcher.BatchGenerator(xr.open_zarr(store), **kwargs))


def assert_same_batches(got: list[Any], want: list[Any]) -> None:
    assert Counter(map(fingerprint, got)) == Counter(map(fingerprint, want))
    by_print = {fingerprint(b): b for b in want}
    for batch in got:
        xr.testing.assert_identical(batch, by_print[fingerprint(batch)])


CONFIGS = {
    "pieces": dict(input_dims={"lat": 6, "lon": 6}),
    "overlap": dict(input_dims={"lat": 8, "lon": 10}, input_overlap={"lat": 3, "lon": 4}),
    "gaps": dict(input_dims={"lat": 5, "lon": 6}, input_overlap={"lat": -2}),
    "three-d": dict(input_dims={"time": 3, "lat": 6, "lon": 12}, input_overlap={"time": 1}),
    "batch_dims": dict(input_dims={"lat": 6, "lon": 9}, batch_dims={"time": 4}),
    "batch_dims-overlap": dict(
        input_dims={"lat": 12, "lon": 18}, batch_dims={"time": 5}, input_overlap={"time": 2}
    ),
    "concat": dict(input_dims={"lat": 6, "lon": 6}, input_overlap={"lat": 2}, concat_input_dims=True),
    "concat-batch_dims": dict(
        input_dims={"lat": 6, "lon": 9}, batch_dims={"time": 4}, concat_input_dims=True
    ),
    "concat-shared": dict(input_dims={"lat": 6, "lon": 12}, batch_dims={"lat": 12}, concat_input_dims=True),
    "concat-shared-ragged": dict(
        input_dims={"lat": 5, "lon": 12}, batch_dims={"lat": 11, "time": 6}, concat_input_dims=True
    ),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_same_batches_as_xbatcher(store: Path, name: str) -> None:
    kwargs = CONFIGS[name]
    want = theirs(store, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the drop-in itself warns of nothing
        with ours(store, **kwargs) as bg:
            got = list(bg)
    assert len(got) == len(want) == bg.layout.n_batches
    assert_same_batches(got, want)


def test_a_dimension_in_both_input_and_batch_dims_warns_as_xbatcher_does(store: Path) -> None:
    kwargs = dict(input_dims={"lat": 6, "lon": 9}, batch_dims={"lat": 12, "time": 6})
    with pytest.warns(UserWarning, match="batch_dims"):
        want = theirs(store, **kwargs)
    with (
        pytest.warns(UserWarning, match=r"\{'lat': 12\}.*input_dims and batch_dims"),
        ours(store, **kwargs) as bg,
    ):
        got = list(bg)
    assert_same_batches(got, want)


def test_a_dataarray_gives_the_batches_xbatcher_gives(store: Path) -> None:
    kwargs = dict(input_dims={"lat": 6, "lon": 6}, batch_dims={"time": 6})
    want = list(xbatcher.BatchGenerator(xr.open_zarr(store).t2m, **kwargs))
    with BatchGenerator(xr.open_zarr(store).t2m, **kwargs) as bg:
        got = list(bg)
    assert all(isinstance(b, xr.DataArray) for b in got)
    assert got[0].dtype == np.float64  # packed int16, decoded as xarray decodes it
    assert_same_batches(got, want)


def test_concatenated_dataarray_pieces_keep_their_own_coordinates(store: Path) -> None:
    # xbatcher 0.4.0 aligns a DataArray's pieces on their coordinates (an outer join: every piece
    # NaN-padded to the whole grid); the drop-in joins them as it does a Dataset's.
    kwargs = dict(input_dims={"lat": 6, "lon": 6}, batch_dims={"time": 4}, concat_input_dims=True)
    want = [b["t2m"] for b in theirs(store, **kwargs)]
    with BatchGenerator(xr.open_zarr(store).t2m, **kwargs) as bg:
        got = list(bg)
    assert got[0].sizes == {"sample": 4 * 4 * 6, "lat_input": 6, "lon_input": 6}
    assert_same_batches(got, want)


def test_a_selection_made_on_the_dataset_is_kept(store: Path) -> None:
    def opened() -> Any:
        return xr.open_zarr(store, chunks=None).isel(lat=slice(3, 21), lon=slice(5, None))

    kwargs = dict(input_dims={"lat": 6, "lon": 7}, input_overlap={"lon": 2})
    with BatchGenerator(opened(), **kwargs) as bg:
        got = list(bg)
    assert_same_batches(got, list(xbatcher.BatchGenerator(opened(), **kwargs)))


@pytest.mark.parametrize("name", ["overlap", "batch_dims", "concat-batch_dims"])
def test_len_and_indexing_agree_with_iteration(store: Path, name: str) -> None:
    with ours(store, **CONFIGS[name]) as bg:
        got = list(bg)
        assert len(bg) == len(got) == len(theirs(store, **CONFIGS[name]))
        for i in [*range(len(bg)), *reversed(range(len(bg))), -1, -len(bg)]:
            xr.testing.assert_identical(bg[i], got[i])
        xr.testing.assert_identical(bg[np.int64(1)], got[1])


@pytest.mark.parametrize(
    "name", ["pieces", "overlap", "three-d", "batch_dims", "concat", "concat-shared-ragged"]
)
def test_a_pass_decodes_each_chunk_once(store: Path, name: str) -> None:
    with ours(store, **CONFIGS[name]) as bg:
        assert bg.dataset.stats["chunks_decoded"] == 0  # planning reads nothing
        n = sum(1 for _ in bg)
        assert n == len(bg)
        assert bg.dataset.stats["chunks_decoded"] == N_CHUNKS
        assert bg.dataset.view("train").last_pass.read_amplification == 1.0


BAD = [
    # (arguments, something the message names)
    (dict(input_dims={"lat": 25}), "25"),
    (dict(input_dims={"lat": 0}), "0"),
    (dict(input_dims={"lat": -4}), "-4"),
    (dict(input_dims={"lat": 6}, input_overlap={"lat": 6}), "6"),
    (dict(input_dims={"lat": 6}, input_overlap={"lat": 9}), "9"),
    (dict(input_dims={"level": 2}), "level"),
    (dict(input_dims={"lat": 6}, batch_dims={"member": 2}), "member"),
    (dict(input_dims={"lat": 6}, batch_dims={"time": 13}), "13"),
    (dict(input_dims={"lat": 6}, batch_dims={"time": 0}), "time"),
    (dict(input_dims={"lat": 2.5}), "2.5"),
    (dict(input_dims={"lat": 6.0}), "6.0"),
    (dict(input_dims={"lat": "6"}), "'6'"),
    (dict(input_dims={"lat": None}), "None"),
    (dict(input_dims={"lat": 6}, input_overlap={"lat": 1.5}), "1.5"),
    (dict(input_dims={"lat": 6}, input_overlap={"lat": "2"}), "'2'"),
    (dict(input_dims={"lat": 6, "level": 2}, input_overlap={"level": "x"}), "'x'"),
    (dict(input_dims={"lat": 6}, batch_dims={"time": 2.5}), "2.5"),
    (dict(input_dims={"lat": 6}, input_overlap=[("lat", 2)]), "[('lat', 2)]"),
    (dict(input_dims=None), ""),
    (dict(input_dims=6), ""),
    (dict(input_dims=["lat"]), ""),
    (dict(input_dims={"lat": 25}, concat_input_dims=True), "25"),
    (dict(input_dims={"lat": 6}, input_overlap={"lat": 7}, concat_input_dims=True), "7"),
    (dict(input_dims={"lat": 6}, batch_dims={"time": 13}, concat_input_dims=True), "13"),
]


def _raised(make: Any) -> BaseException:
    try:
        bg = make()
        for i in range(len(bg)):  # xbatcher raises some errors only when a batch is read
            bg[i]
    except Exception as exc:
        return exc
    raise AssertionError("no error raised")


@pytest.mark.parametrize(("kwargs", "named"), BAD, ids=[repr(k) for k, _ in BAD])
def test_bad_arguments_raise_what_xbatcher_raises(store: Path, kwargs: dict[str, Any], named: str) -> None:
    want = _raised(lambda: xbatcher.BatchGenerator(xr.open_zarr(store), **kwargs))
    got = _raised(lambda: ours(store, **kwargs))
    assert isinstance(got, type(want)), (got, want)
    assert named in str(got)


def test_bad_indices_raise_what_xbatcher_raises(store: Path) -> None:
    theirs_bg = xbatcher.BatchGenerator(xr.open_zarr(store), input_dims={"lat": 12, "lon": 12})
    with ours(store, input_dims={"lat": 12, "lon": 12}) as bg:
        assert len(bg) == len(theirs_bg) == 6
        bad = [
            (6, IndexError),
            (-7, IndexError),
            ([0, 1], NotImplementedError),
            (slice(0, 2), NotImplementedError),
        ]
        for index, error in [*bad, (1.0, NotImplementedError)]:
            with pytest.raises(error):
                theirs_bg[index]
            with pytest.raises(error, match=re.escape(repr(index))):
                bg[index]
        xr.testing.assert_identical(bg[True], bg[1])  # as xbatcher: a bool is an int


def test_batches_xbatcher_fails_to_make_are_refused_up_front(store: Path) -> None:
    # Pieces of 10 along lat (2 of them), batches of 12 along it, 2 pieces to a batch: xbatcher
    # counts 24 // 12 = 2 batches, the second without a piece, and fails reading it.
    kwargs = dict(input_dims={"lat": 10}, batch_dims={"lat": 12}, concat_input_dims=True)
    theirs_bg = xbatcher.BatchGenerator(xr.open_zarr(store), **kwargs)
    assert len(theirs_bg) == 2
    with pytest.raises(ValueError, match="empty"):
        theirs_bg[1]
    with pytest.raises(ValueError, match=r"batch_dims\['lat'\]=12"):
        ours(store, **kwargs)
    # A shared batch length past the dimension: both refuse it when made.
    kwargs = dict(input_dims={"lat": 6}, batch_dims={"lat": 30}, concat_input_dims=True)
    with pytest.raises(ValueError, match="zero entries"):
        xbatcher.BatchGenerator(xr.open_zarr(store), **kwargs)
    with pytest.raises(ValueError, match=r"batch_dims\['lat'\]=30"):
        ours(store, **kwargs)


def test_what_the_engine_cannot_serve_is_refused_by_name(store: Path) -> None:
    with pytest.raises(ValueError, match="cache"):
        ours(store, input_dims={"lat": 6}, cache={})
    with pytest.raises(ValueError, match="edge='shift' with concat_input_dims"):
        ours(store, input_dims={"lat": 6}, concat_input_dims=True, edge="shift")
    with pytest.raises(ValueError, match="batch_size"):
        ours(store, input_dims={"lat": 6}, batch_size=8)
    in_memory = xr.open_zarr(store).load()
    with pytest.raises(ValueError, match="not backed by a Zarr store"):
        BatchGenerator(in_memory, input_dims={"lat": 6})
    with pytest.raises(TypeError, match="ndarray"):
        BatchGenerator(np.zeros(SHAPE), input_dims={"lat": 6})


def test_shuffle_changes_the_order_not_the_batches(store: Path) -> None:
    kwargs = CONFIGS["batch_dims"]
    with ours(store, **kwargs) as plain, ours(store, shuffle=True, seed=3, block_chunks=4, **kwargs) as mixed:
        first = list(map(fingerprint, plain))
        epoch0 = list(map(fingerprint, mixed))
        mixed.set_epoch(1)
        epoch1 = list(map(fingerprint, mixed))
        assert Counter(first) == Counter(epoch0) == Counter(epoch1)
        assert epoch0 != epoch1
        assert fingerprint(mixed[0]) == epoch1[0]


def test_edges_other_than_xbatchers(store: Path) -> None:
    kwargs = dict(input_dims={"lat": 10, "lon": 16})  # 24 = 10 + 10 + 4, 36 = 16 + 16 + 4
    assert len(theirs(store, **kwargs)) == 2 * 2
    with ours(store, edge="shift", **kwargs) as bg:
        shifted = list(bg)
    assert len(shifted) == 3 * 3
    assert -60.0 in {float(b.lat[-1]) for b in shifted}  # the last pieces end at the edge
    assert 350.0 in {float(b.lon[-1]) for b in shifted}
    assert all(b.u10.shape == (12, 10, 16) for b in shifted)
    with ours(store, edge="pad", **kwargs) as bg:
        padded = list(bg)
    assert len(padded) == 3 * 3
    last = next(b for b in padded if np.isnan(b.lat.values).any() and np.isnan(b.lon.values).any())
    assert int(np.isfinite(last.lat.values).sum()) == 4
    assert int(np.isfinite(last.lon.values).sum()) == 4
    assert np.isnan(last.u10.values[:, 4:, :]).all()
    assert np.isfinite(last.u10.values[:, :4, :4]).all()
