"""The SDSS example: batches are the stored spectra, the two chunk layouts give the same batches
from different reads, the smoke run beats PCA, and the real-store path reads a user's archive."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

import insitu
from examples.sdss import train
from examples.sdss.data import make_spectra, write_archive
from examples.sdss.model import PCA

N_FIBRES, N_WAVE = 320, 64  # 5 chunks of 64 fibres


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray, np.ndarray]:
    wave, flux, ivar, truth = make_spectra(N_FIBRES, N_WAVE, seed=4)
    path = write_archive(tmp_path_factory.mktemp("sdss") / "spectra.zarr", wave, flux, ivar, truth=truth)
    return path, flux, ivar


def layouts(path: str) -> tuple[insitu.SplitManifest, dict[str, list[insitu.ArrayGeometry]]]:
    store = insitu.open_store(path)
    geoms = {
        name: train.open_layout(store, name, flux="flux", ivar="ivar", sample_dim=None)
        for name in ("chunked64", "chunked1")
    }
    manifest = insitu.split_by_chunk(
        geoms["chunked64"][0], (0.8, 0.2), names=("train", "test"), contiguous=False, seed=7
    )
    return manifest, geoms


def test_the_archive_stores_each_layout(archive: tuple[str, np.ndarray, np.ndarray]) -> None:
    path, flux, ivar = archive

    def array(name: str) -> zarr.Array:
        return zarr.open_array(path, path=name, mode="r")

    assert array("chunked64/flux").chunks == (64, N_WAVE)
    assert array("chunked1/flux").chunks == (1, N_WAVE)
    for name in ("chunked64", "chunked1"):
        np.testing.assert_array_equal(array(f"{name}/flux")[:], flux)
        np.testing.assert_array_equal(array(f"{name}/ivar")[:], ivar)
        assert array(f"{name}/flux").metadata.dimension_names == ("fibre", "wavelength")  # type: ignore[union-attr]
    assert (ivar == 0).any()
    assert (flux[ivar == 0] == 0).all()


def test_batches_are_the_stored_spectra(archive: tuple[str, np.ndarray, np.ndarray]) -> None:
    path, flux, ivar = archive
    manifest, geoms = layouts(path)
    store = insitu.open_store(path)
    g = geoms["chunked64"]
    assert g[0].sample_dim == "fibre"
    assert g[0].sample_shape == (N_WAVE,)
    with insitu.InSituDataset(store, manifest, g, batch_size=50, seed=1) as ds:
        seen = []
        for split in ("train", "test"):
            for batch in ds.view(split):
                rows = batch.sample_indices
                np.testing.assert_array_equal(batch["flux"], flux[rows])
                np.testing.assert_array_equal(batch["ivar"], ivar[rows])
                seen += rows.tolist()
        assert sorted(seen) == list(range(N_FIBRES))


def test_normalize_scales_flux_and_ivar_together(archive: tuple[str, np.ndarray, np.ndarray]) -> None:
    path, flux, ivar = archive
    manifest, geoms = layouts(path)
    with train.make_dataset(
        insitu.open_store(path), geoms["chunked64"], manifest, seed=0, batch_size=32, cache_bytes=None
    ) as ds:
        batch = next(iter(ds.test))
    rows, scale = batch.sample_indices, batch["scale"][:, None]
    np.testing.assert_allclose(batch["flux"] * scale, flux[rows], rtol=1e-6)
    np.testing.assert_allclose(batch["ivar"] / scale**2, ivar[rows], rtol=1e-5)
    good = batch["ivar"] > 0
    rms = np.sqrt((np.where(good, batch["flux"], 0) ** 2).sum(axis=1) / good.sum(axis=1))
    np.testing.assert_allclose(rms, 1.0, rtol=1e-5)


def test_both_layouts_give_the_same_batches_from_different_reads(
    archive: tuple[str, np.ndarray, np.ndarray],
) -> None:
    path, _, _ = archive
    manifest, geoms = layouts(path)
    store = insitu.open_store(path)
    delivered: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    reads = {}
    for name, g in geoms.items():
        with insitu.InSituDataset(store, manifest, g, batch_size=24, block_chunks=2, seed=11) as ds:
            got = []
            for epoch in (0, 1):
                ds.set_epoch(epoch)
                got += [(b.sample_indices.copy(), b["flux"].copy(), b["ivar"].copy()) for b in ds.train]
            got += [(b.sample_indices.copy(), b["flux"].copy(), b["ivar"].copy()) for b in ds.test]
            delivered[name] = got
            reads[name] = ds.stats["reads"], ds.stats["chunks_decoded"]
    a, b = delivered["chunked64"], delivered["chunked1"]
    assert len(a) == len(b) > 0
    for (ia, fa, va), (ib, fb, vb) in zip(a, b, strict=True):
        np.testing.assert_array_equal(ia, ib)
        np.testing.assert_array_equal(fa, fb)
        np.testing.assert_array_equal(va, vb)
    assert not np.array_equal(a[0][0], np.sort(a[0][0]))  # shuffled, the same way in both
    # Two arrays, every chunk read once (the data fits the cache): 5 chunks each vs 320 fibres each.
    assert reads["chunked64"] == (2 * 5, 2 * 5)
    assert reads["chunked1"] == (2 * N_FIBRES, 2 * N_FIBRES)


def test_pca_reconstructs_its_own_span_exactly() -> None:
    rng = np.random.default_rng(0)
    basis = rng.standard_normal((3, 40))
    spectra = rng.standard_normal((200, 3)) @ basis + 5.0
    weights = np.ones_like(spectra)
    pca = PCA(spectra, weights, k=3)
    held_out = rng.standard_normal((10, 3)) @ basis + 5.0
    w = np.ones_like(held_out)
    w[:, :5] = 0.0  # masked pixels: the weighted fit ignores them
    np.testing.assert_allclose(pca.reconstruct(held_out, w), held_out, atol=1e-4)


def test_smoke_run_beats_pca(capsys: pytest.CaptureFixture[str]) -> None:
    assert train.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    table = [line.split() for line in lines if line.strip().startswith(("chunked64", "chunked1"))]
    assert [row[0] for row in table] == ["chunked64", "chunked1"]
    assert int(table[1][2]) == 64 * int(table[0][2])  # reads: one object per fibre vs per 64 fibres
    assert table[0][-2:] == table[1][-2:]  # same chi2, same batch digest
    assert "model beats the baseline" in out


@pytest.mark.parametrize("named", [True, False], ids=["named-dims", "unnamed-dims"])
def test_real_store_path_on_a_user_archive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], named: bool
) -> None:
    """A user's archive: flux and ivar at the root, 32 spectra per chunk; Zarr v3 naming its
    dimensions, or Zarr v2 naming none (the fibre axis is then axis 0)."""
    _wave, flux, ivar, _ = make_spectra(1024, 128, seed=9)
    path = tmp_path / "survey.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=3 if named else 2)
    for name, values in (("flux", flux), ("ivar", ivar)):
        extra: dict[str, Any] = {"dimension_names": ("fibre", "wavelength")} if named else {}
        root.create_array(name, shape=values.shape, chunks=(32, 128), dtype="float32", **extra)[...] = values
    rc = train.main(["--store", str(path), "--layouts", "", "--smoke", "--epochs", "20"])
    out = capsys.readouterr().out
    assert "1024 fibres x 128 wavelengths" in out
    assert ("sample axis 'fibre'" if named else "sample axis 0") in out
    assert "chunks (32, 128)" in out
    assert "held-out chi2/pixel" in out
    assert rc == 0
