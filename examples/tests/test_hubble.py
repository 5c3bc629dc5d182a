"""examples.hubble: FITS frames read in place through the virtual store, masked, denoised.

Checks that what the store serves is what astropy reads from the files
(physical values: BZERO + BSCALE * stored where a header scales), that bad
pixels are masked as documented, that the store serves byte ranges of the
original files and writes nothing, that the archive path reads files laid
out like the Hubble archive's, and that the smoke run beats its baseline.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from zarr.abc.store import ByteRequest
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore

import insitu
from examples.hubble.__main__ import main
from examples.hubble.data import (
    BAD_DQ,
    DQ,
    MAST_EXAMPLE_ROOTNAMES,
    SCI,
    TRUTH,
    Frames,
    frame_urls,
    make_dataset,
    mast_url,
    open_frames,
    references,
)
from examples.hubble.model import masked_mse, psnr
from examples.hubble.simulate import TRUTH_BSCALE, TRUTH_BZERO, simulate_frame, write_frames

fits = pytest.importorskip("astropy.io.fits")

pytestmark = pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3")


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_frames(tmp_path_factory.mktemp("sim"), n_frames=6, shape=(64, 48), seed=5)


def _read_all(store: Any, geometries: list[insitu.ArrayGeometry], **kwargs: Any) -> dict[str, np.ndarray]:
    """Every sample of each array, through the engine, in sample order."""
    manifest = insitu.split_by_chunk(geometries[0], (1.0,), names=("all",))
    out: dict[str, list[tuple[int, np.ndarray]]] = {g.name: [] for g in geometries}
    with insitu.InSituDataset(store, manifest, geometries=geometries, batch_size=4, **kwargs) as ds:
        for batch in ds.all:
            for g in geometries:
                out[g.name] += list(zip(batch.sample_indices.tolist(), batch[g.name], strict=True))
    return {name: np.stack([a for _, a in sorted(rows, key=lambda r: r[0])]) for name, rows in out.items()}


# -- values --------------------------------------------------------------------------------------
def test_frames_equal_astropy(simulated: list[Path]) -> None:
    frames = open_frames(simulated, truth=True)
    assert frames.n_frames == 6
    assert frames.frame_shape == (64, 48)
    geoms = frames.geometries
    assert (geoms[SCI].dtype, geoms[DQ].dtype, geoms[TRUTH].dtype) == (
        np.dtype("float32"),
        np.dtype("int16"),
        np.dtype("float64"),  # BSCALE/BZERO applied on read
    )
    assert geoms[SCI].chunk_shape == (1, 64, 48)  # one file, one frame, one chunk
    served = _read_all(frames.store, [geoms[SCI], geoms[DQ], geoms[TRUTH]])
    for i, path in enumerate(simulated):
        with fits.open(path) as hdul:
            np.testing.assert_array_equal(served[SCI][i], hdul["SCI"].data)  # NaN where astropy has NaN
            np.testing.assert_array_equal(served[DQ][i], hdul["DQ"].data)
            # astropy scales int16 into float32; the store into float64.
            np.testing.assert_allclose(served[TRUTH][i], hdul["TRUTH"].data, rtol=1e-6)
        with fits.open(path, do_not_scale_image_data=True) as hdul:
            stored = hdul["TRUTH"].data
            header = hdul["TRUTH"].header
            assert stored.dtype == np.dtype(">i2")
            assert (header["BSCALE"], header["BZERO"]) == (TRUTH_BSCALE, TRUTH_BZERO)
            physical = header["BZERO"] + header["BSCALE"] * stored.astype(np.float64)
            np.testing.assert_array_equal(served[TRUTH][i], physical)  # exact: BSCALE is 2**-7
    # The simulation's own truth is what the file holds.
    np.testing.assert_array_equal(served[TRUTH][2], simulate_frame((64, 48), 5, 2).truth)


def test_truth_is_cast_to_float32_in_the_pool(simulated: list[Path]) -> None:
    frames = open_frames(simulated, truth=True)
    ds = make_dataset(frames, seed=0, batch_size=2, test_fraction=0.5)
    with ds:
        assert ds.test.pooled_dtypes[TRUTH] == np.dtype("float32")
        batch = next(iter(ds.test))
    assert batch["x"].dtype == batch["y"].dtype == np.float32
    assert batch["x"].shape == batch["y"].shape == batch["good"].shape == (2, 64, 48)
    assert batch["sky"].shape == batch["sigma"].shape == (2,)


# -- masking -------------------------------------------------------------------------------------
def test_bad_pixels_are_masked(simulated: list[Path]) -> None:
    frames = open_frames(simulated, truth=True)
    raw = _read_all(frames.store, [frames.geometries[n] for n in (SCI, DQ, TRUTH)])
    expected_bad = ((raw[DQ].astype(np.int64) & BAD_DQ) != 0) | np.isnan(raw[SCI])
    assert np.isnan(raw[SCI]).any()
    assert ((raw[DQ] & 16) != 0).any()
    assert (np.isnan(raw[SCI]) <= ((raw[DQ] & 4) != 0)).all()  # every NaN is flagged bad in DQ

    ds = make_dataset(frames, seed=0, batch_size=3, test_fraction=0.5)
    with ds:
        batches = list(ds.test)
    for batch in batches:
        bad = expected_bad[batch.sample_indices]
        np.testing.assert_array_equal(batch["good"] == 0, bad)
        for label in ("x", "y"):
            assert np.isfinite(batch[label]).all()
            assert (batch[label][bad] == 0).all()  # the sky level, after normalisation
        # Normalisation: back in e-/s on good pixels.
        sky, sigma = batch["sky"][:, None, None], batch["sigma"][:, None, None]
        np.testing.assert_allclose(
            (batch["x"] * sigma + sky)[~bad], raw[SCI][batch.sample_indices][~bad], rtol=1e-5, atol=1e-4
        )
        np.testing.assert_allclose(
            (batch["y"] * sigma + sky)[~bad], raw[TRUTH][batch.sample_indices][~bad], rtol=1e-5, atol=1e-4
        )

    # Masked pixels count in no loss and no score, whatever the prediction there.
    batch = batches[0]
    good = batch["good"]
    y = torch.from_numpy(batch["y"])
    prediction = y + 0.1
    wild = prediction.clone()
    wild[torch.from_numpy(good) == 0] = 1e6
    g = torch.from_numpy(good)
    assert float(masked_mse(wild, y, g)) == pytest.approx(float(masked_mse(prediction, y, g)))
    mask = good[0] > 0
    assert psnr(wild[0].numpy(), batch["y"][0], mask) == pytest.approx(
        psnr(prediction[0].numpy(), batch["y"][0], mask)
    )


# -- in place --------------------------------------------------------------------------------------
class RecordingStore(WrapperStore[Any]):
    """Records every key the engine asks for and the bytes it got back."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.reads: list[tuple[str, bytes]] = []

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        buffer = await self._store.get(key, prototype, byte_range)
        if buffer is not None and not key.endswith("zarr.json"):
            assert byte_range is None, "whole chunks are read: a chunk is one byte range of one file"
            self.reads.append((key, buffer.to_bytes()))
        return buffer


def _digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_store_serves_byte_ranges_of_the_original_files(simulated: list[Path]) -> None:
    directory = simulated[0].parent
    before = _digests(directory)
    frames = open_frames(simulated, truth=True)

    # The references: each chunk is the data block of one HDU of one file, where the header says.
    refs = references(frames)
    assert set(refs) == {SCI, DQ, TRUTH}
    for i, path in enumerate(simulated):
        with fits.open(path) as hdul:
            for name in (SCI, DQ, TRUTH):
                url, offset, length = refs[name][f"{i}.0.0"]
                info = hdul[name].fileinfo()
                assert url == path.resolve().as_uri()
                assert offset == info["datLoc"]
                assert length == hdul[name].header["NAXIS1"] * hdul[name].header["NAXIS2"] * abs(
                    hdul[name].header["BITPIX"] // 8
                )

    # What the engine reads: exactly those ranges, byte for byte, and nothing else.
    recording = RecordingStore(frames.store)
    geoms = [frames.geometries[n] for n in (SCI, DQ, TRUTH)]
    served = _read_all(recording, geoms)
    file_bytes = {p.resolve().as_uri(): p.read_bytes() for p in simulated}
    seen = set()
    for key, data in recording.reads:
        name, _, chunk = key.partition("/c/")
        url, offset, length = refs[name][chunk.replace("/", ".")]
        assert data == file_bytes[url][offset : offset + length]
        seen.add((name, chunk))
    assert len(seen) == 3 * len(simulated)  # every chunk of every array...
    assert sum(len(d) for _, d in recording.reads) == sum(  # ...read once
        length for per_array in refs.values() for _, _, length in per_array.values()
    )
    # The big-endian bytes of the file decode to the served frame.
    url, offset, length = refs[SCI]["1.0.0"]
    direct = np.frombuffer(file_bytes[url][offset : offset + length], dtype=">f4").reshape(64, 48)
    np.testing.assert_array_equal(served[SCI][1], direct)

    # Nothing was written: no copy, no conversion, the files untouched.
    assert _digests(directory) == before
    with pytest.raises(ValueError, match="read-only"):
        frames.store.with_read_only(False)


# -- the archive's layout ------------------------------------------------------------------------
def _write_archive_flt(path: Path, rootname: str, shape: tuple[int, int], index: int) -> np.ndarray:
    """A file laid out like an archive WFC3/IR ``_flt.fits`` (no TRUTH); returns its SCI data."""
    frame = simulate_frame(shape, seed=11, index=index)
    sci = np.nan_to_num(frame.sci, nan=0.0)  # calwf3 writes finite values and flags them in DQ
    full = shape == (1014, 1014)
    primary = fits.PrimaryHDU()
    for key, value in {
        "NEXTEND": 6,
        "FILENAME": path.name,
        "FILETYPE": "SCI",
        "TELESCOP": "HST",
        "INSTRUME": "WFC3",
        "ROOTNAME": rootname,
        "PROPOSID": 14037,
        "DETECTOR": "IR",
        "SUBARRAY": not full,
        "APERTURE": "IR" if full else f"IRSUB{shape[1]}",
        "FILTER": "F140W",
        "SAMP_SEQ": "SPARS100",
        "NSAMP": 16,
        "EXPTIME": 1402.932,
        "CCDGAIN": 2.5,
    }.items():
        primary.header[key] = value

    def ext(data: np.ndarray, name: str, bunit: str) -> Any:
        hdu = fits.ImageHDU(data, name=name)
        hdu.header["EXTVER"] = 1
        hdu.header["INHERIT"] = True
        hdu.header["ROOTNAME"] = rootname
        hdu.header["BUNIT"] = bunit
        return hdu

    table = fits.BinTableHDU.from_columns(
        [
            fits.Column(name="WCS_ID", format="24A", array=np.array(["OPUS"])),
            fits.Column(name="CRVAL1", format="D"),
        ],
        name="WCSCORR",
    )
    fits.HDUList(
        [
            primary,
            ext(sci.astype(">f4"), "SCI", "ELECTRONS/S"),
            ext(frame.err.astype(">f4"), "ERR", "ELECTRONS/S"),
            ext(frame.dq.astype(">i2"), "DQ", "UNITLESS"),
            ext(np.full(shape, 15, dtype=">i2"), "SAMP", "SAMPLES"),
            ext(np.full(shape, 1402.932, dtype=">f4"), "TIME", "SECONDS"),
            table,
        ]
    ).writeto(path)
    return sci


def _archive(tmp_path: Path, rootnames: list[str], shape: tuple[int, int]) -> tuple[Path, list[np.ndarray]]:
    """Files under ``tmp_path/hst/public`` in the archive's layout, ``<ipppp>/<rootname>/<rootname>_flt.fits``."""
    prefix = tmp_path / "hst" / "public"
    sci = []
    for i, root in enumerate(rootnames):
        folder = prefix / root[:4] / root
        folder.mkdir(parents=True)
        sci.append(_write_archive_flt(folder / f"{root}_flt.fits", root, shape, i))
    return prefix, sci


def test_urls_follow_the_archive_layout(tmp_path: Path) -> None:
    assert mast_url("ICQTBBBXQ") == "s3://stpubdata/hst/public/icqt/icqtbbbxq/icqtbbbxq_flt.fits"
    assert frame_urls("s3://stpubdata/hst/public", MAST_EXAMPLE_ROOTNAMES) == [
        "s3://stpubdata/hst/public/icqt/icqtbbbxq/icqtbbbxq_flt.fits",
        "s3://stpubdata/hst/public/icqt/icqtbbc0q/icqtbbc0q_flt.fits",
    ]
    assert frame_urls("a_flt.fits, s3://b/c_flt.fits") == ["a_flt.fits", "s3://b/c_flt.fits"]
    prefix, _ = _archive(tmp_path, ["ib1a01aaq", "ib1a01abq"], (16, 16))
    assert frame_urls(str(prefix)) == [
        str(prefix / "ib1a" / r / f"{r}_flt.fits") for r in ("ib1a01aaq", "ib1a01abq")
    ]
    with pytest.raises(ValueError, match="--rootnames"):
        frame_urls("s3://stpubdata/hst/public")


def test_archive_full_frames_read_in_place(tmp_path: Path) -> None:
    roots = ["icqtbbbxq", "icqtbbc0q"]
    prefix, sci = _archive(tmp_path, roots, (1014, 1014))
    frames = open_frames(frame_urls(str(prefix), roots), truth=False)
    assert isinstance(frames, Frames)
    assert not frames.simulated
    assert set(frames.geometries) == {SCI, DQ}  # ERR, SAMP, TIME and the WCSCORR table are not read
    assert frames.n_frames == 2
    assert frames.frame_shape == (1014, 1014)
    assert frames.attributes["INSTRUME"] == "WFC3"
    assert frames.attributes["DETECTOR"] == "IR"
    served = _read_all(frames.store, [frames.geometries[SCI], frames.geometries[DQ]])
    for i, root in enumerate(roots):
        with fits.open(prefix / root[:4] / root / f"{root}_flt.fits") as hdul:
            np.testing.assert_array_equal(served[SCI][i], hdul["SCI"].data)
            np.testing.assert_array_equal(served[DQ][i], hdul["DQ"].data)
        np.testing.assert_array_equal(served[SCI][i], sci[i])

    # Without a truth, the target is the archived frame and the input that frame plus added noise:
    # fixed for held-out frames, redrawn each training epoch.
    ds = make_dataset(frames, seed=3, batch_size=1, test_fraction=0.5)
    with ds:
        first = next(iter(ds.test))
        again = next(iter(ds.test))
        ds.set_epoch(0)
        train0 = next(iter(ds.train))
        ds.set_epoch(1)
        train1 = next(iter(ds.train))
    np.testing.assert_array_equal(first["x"], again["x"])
    assert not np.array_equal(train0["x"], train1["x"])
    good = first["good"][0] > 0
    target = first["y"][0] * first["sigma"][0] + first["sky"][0]
    np.testing.assert_allclose(target[good], sci[1][good], rtol=1e-5, atol=1e-4)
    assert not np.allclose(first["x"][0][good], first["y"][0][good])


@pytest.mark.slow
def test_archive_mode_runs_through_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    roots = [f"ib1a01{c}q" for c in "abcdefgh"]
    prefix, _ = _archive(tmp_path, roots, (256, 256))  # IRSUB256 subarray exposures
    status = main(
        ["--store", str(prefix), "--rootnames", ",".join(roots), "--smoke", "--json", "--epochs", "8"]
    )
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    assert "8 archive frames of (256, 256)" in out
    assert result["example"] == "hubble"
    assert result["higher_is_better"]
    assert result["model"] > result["baseline"], out
    assert status == 0


# -- the smoke run ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_smoke_run_beats_the_median_filter(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["--smoke", "--json", "--workdir", str(tmp_path)])
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert status == 0
    assert result["beats_baseline"]
    assert result["model"] > result["baseline"] + 3.0  # dB: a margin, not a coin toss
    # The workdir holds the FITS files and nothing else: no converted copy.
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"isim{i:04d}q_flt.fits" for i in range(24)]
