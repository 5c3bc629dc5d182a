"""Random patches weighted by a mask or balanced over label classes: drawn from region summaries,
without rejection, reading no chunk of a region the mask leaves empty."""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import CountingStore, FaultyStore, write_array
from numpy.lib.stride_tricks import sliding_window_view

import insitu
from insitu.engine import patch_summaries
from insitu.errors import ConfigError

N = 128  # the image is (1, N, N) in chunks of 16 x 16
CHUNK = 16
P = 8  # patches of 8 x 8


def _write(root: Path, **arrays: np.ndarray) -> None:
    zarr.open_group(str(root), mode="w")
    for name, data in arrays.items():
        write_array(root, name, data, (1, CHUNK, CHUNK), dimension_names=("z", "y", "x"))


def _quadrant(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """An image and a mask positive (at half density) only in the top-left quadrant."""
    rng = np.random.default_rng(1)
    image = rng.standard_normal((1, N, N)).astype("f4")
    mask = np.zeros((1, N, N), dtype="u1")
    mask[0, : N // 2, : N // 2] = rng.random((N // 2, N // 2)) < 0.5
    root = tmp_path / "img.zarr"
    _write(root, image=image, mask=mask)
    return root, image, mask


def _dataset(store: Any, *, draws: int = 4000, **kwargs: Any) -> insitu.InSituDataset:
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(geoms["image"], fractions=(1.0,), names=("train",))
    names = kwargs.pop("arrays", ("image", "mask"))
    return insitu.InSituDataset(
        store,
        manifest,
        geometries=[geoms[n] for n in names],
        patch={"y": P, "x": P},
        patch_sampling="random",
        patches_per_epoch=draws,
        batch_size=100,
        **kwargs,
    )


def _coverage(mask: np.ndarray) -> np.ndarray:
    """Coverage of every 8 x 8 patch position, by brute force."""
    return sliding_window_view(mask[0] != 0, (P, P)).mean(axis=(2, 3))


def test_weighted_patches_follow_mask_coverage_and_never_read_empty_regions(tmp_path: Path) -> None:
    root, image, mask = _quadrant(tmp_path)
    store = CountingStore(insitu.open_store(str(root)))
    ds = _dataset(store, draws=20000, patch_weights="mask")
    assert ds.summaries is not None
    summary_reads = {k for k in store.chunk_gets() if k.startswith("mask/")}
    store.gets.clear()
    origins = []
    for batch in ds.train:
        for i, (z, y, x) in enumerate(batch.patch_origins.tolist()):
            np.testing.assert_array_equal(batch["image"][i], image[z, y : y + P, x : x + P])
            assert batch["mask"][i].any()  # the coverage rule: every patch holds foreground
        origins.append(batch.patch_origins)
    o = np.concatenate(origins)
    assert len(o) == 20000
    # Frequencies follow coverage: per region of origins (a chunk), the observed share against
    # sum of coverage / total coverage, within 4 standard errors of a multinomial share.
    cov = _coverage(mask)
    regions = (np.arange(cov.shape[0]) // CHUNK)[:, None] * (N // CHUNK) + (np.arange(cov.shape[1]) // CHUNK)
    expected = np.bincount(regions.ravel(), weights=cov.ravel(), minlength=64) / cov.sum()
    observed = np.bincount((o[:, 1] // CHUNK) * (N // CHUNK) + o[:, 2] // CHUNK, minlength=64) / len(o)
    tolerance = 4 * np.sqrt(expected * (1 - expected) / len(o)) + 1e-3
    assert (np.abs(observed - expected) <= tolerance).all()
    # ... and positions follow coverage inside a region: the mean coverage of drawn patches is
    # the coverage-weighted mean, not the plain mean.
    drawn_cov = cov[o[:, 1], o[:, 2]]
    positive = cov[cov > 0]
    weighted_mean = float((positive**2).sum() / positive.sum())
    assert abs(drawn_cov.mean() - weighted_mean) < 0.01
    assert abs(weighted_mean - positive.mean()) > 0.03  # so the check above tells the two apart
    # The image's chunks outside the positive quadrant and its border were never fetched.
    read = {k for k in store.chunk_gets() if k.startswith("image/")}
    chunk_rows = {tuple(int(v) for v in k.split("/")[-2:]) for k in read}
    reach = (N // 2 + P - 2) // CHUNK  # the last chunk a patch from the quadrant can touch
    assert chunk_rows
    assert all(y <= reach and x <= reach for y, x in chunk_rows)
    assert len(read) <= (reach + 1) ** 2 < 64
    assert len(summary_reads) <= 64
    assert ds.summaries.chunks_read == 64  # the summary pass decoded each mask chunk once


def test_a_minimum_coverage_draws_uniformly_among_the_positions_meeting_it(tmp_path: Path) -> None:
    root, _, mask = _quadrant(tmp_path)
    ds = _dataset(insitu.open_store(str(root)), draws=8000, patch_weights="mask", patch_min_coverage=0.6)
    o = np.concatenate([b.patch_origins for b in ds.train])
    cov = _coverage(mask)
    assert (cov[o[:, 1], o[:, 2]] >= 0.6).all()
    eligible = int((cov >= 0.6).sum())
    distinct = len({(y, x) for _, y, x in o.tolist()})
    assert distinct > 0.9 * eligible * (1 - np.exp(-8000 / eligible))  # uniform: coupon-collector coverage


def _classes(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """Labels of three classes over 90% / 9% / 1% of the pixels, in separate places."""
    rng = np.random.default_rng(2)
    labels = np.zeros((1, N, N), dtype="i4")
    labels[0, :, : int(N * 0.1)] = 1  # ~10% of the columns...
    labels[0, : int(N * 0.1), : int(N * 0.1)] = 2  # ...of which a corner (1%) is class 2
    image = rng.standard_normal((1, N, N)).astype("f4")
    root = tmp_path / "seg.zarr"
    _write(root, image=image, labels=labels)
    return root, labels


@pytest.mark.parametrize(
    ("balance", "wanted"),
    [
        ("labels", {0: 1 / 3, 1: 1 / 3, 2: 1 / 3}),
        ({"labels": {0: 1, 1: 1, 2: 2}}, {0: 0.25, 1: 0.25, 2: 0.5}),
    ],
)
def test_class_balance_draws_each_class_at_its_share(
    tmp_path: Path, balance: Any, wanted: dict[int, float]
) -> None:
    root, labels = _classes(tmp_path)
    shares = np.bincount(labels.ravel(), minlength=3) / labels.size
    assert shares[0] > 0.85  # the mix is about 90 / 9 / 1
    assert shares[2] < 0.02
    ds = _dataset(insitu.open_store(str(root)), draws=9000, balance=balance, arrays=("image", "labels"))
    counts = np.zeros(3)
    for batch in ds.train:
        centres = batch["labels"][:, (P - 1) // 2, (P - 1) // 2]
        counts += np.bincount(centres, minlength=3)
    for c, share in wanted.items():
        assert abs(counts[c] / counts.sum() - share) < 0.03, (c, counts)  # tolerance: 3 points


def test_summaries_are_made_once_and_reused_by_a_second_epoch_and_a_second_process(tmp_path: Path) -> None:
    root, _, mask = _quadrant(tmp_path)
    cache = tmp_path / "cache"
    ds = _dataset(insitu.open_store(str(root)), draws=500, patch_weights="mask", cache_dir=str(cache))
    first = [b.patch_origins for b in ds.train]
    assert ds.summaries is not None
    assert (ds.summaries.computed, ds.summaries.loaded) == (1, 0)
    assert ds.summaries.chunks_read > 0
    read = ds.summaries.chunks_read
    ds.set_epoch(1)
    second = [b.patch_origins for b in ds.train]
    assert ds.summaries.computed == 1
    assert ds.summaries.chunks_read == read  # the second epoch read no mask chunk for its summary
    assert not np.array_equal(np.concatenate(first), np.concatenate(second))
    assert len(list((cache / "summaries").glob("summary-*.npz"))) == 1

    script = textwrap.dedent(
        f"""
        import insitu
        store = insitu.open_store({str(root)!r})
        g = insitu.open_geometries(store)
        ds = insitu.InSituDataset(store, insitu.split_by_chunk(g["image"], fractions=(1.0,), names=("train",)),
            geometries=[g["image"], g["mask"]], patch={{"y": {P}, "x": {P}}}, patch_sampling="random",
            patches_per_epoch=500, batch_size=100, patch_weights="mask", cache_dir={str(cache)!r})
        origins = [b.patch_origins for b in ds.train]
        print(ds.summaries.computed, ds.summaries.loaded, ds.summaries.chunks_read)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1", "0"]  # loaded, no mask chunk read for it

    # The mask's bytes change: the summary is made again.
    changed = mask.copy()
    changed[0, N - CHUNK :, N - CHUNK :] = 1
    zarr.open_array(str(root / "mask"), mode="a")[...] = changed
    again = _dataset(insitu.open_store(str(root)), draws=500, patch_weights="mask", cache_dir=str(cache))
    list(again.train)
    assert again.summaries is not None
    assert (again.summaries.computed, again.summaries.loaded) == (1, 0)


def test_weighted_draws_are_a_function_of_seed_and_epoch(tmp_path: Path) -> None:
    root, _, _ = _quadrant(tmp_path)
    runs = [
        np.concatenate(
            [
                b.patch_origins
                for b in _dataset(insitu.open_store(str(root)), draws=300, patch_weights="mask").train
            ]
        )
        for _ in range(2)
    ]
    np.testing.assert_array_equal(runs[0], runs[1])


def test_a_summary_pass_that_fails_part_way_leaves_no_summary(tmp_path: Path) -> None:
    root, _, _ = _quadrant(tmp_path)
    cache = tmp_path / "cache"
    broken = FaultyStore(insitu.open_store(str(root)), fail={"mask/c/0/2/2": OSError("disk read error")})
    with pytest.raises(OSError, match="disk read error"):
        _dataset(broken, draws=100, patch_weights="mask", cache_dir=str(cache))
    assert not list(cache.glob("summaries/*.npz"))
    assert not list(cache.glob("summaries/.summary-*"))


def test_bad_weighting_input_is_refused_naming_the_value(tmp_path: Path) -> None:
    root, _, _ = _quadrant(tmp_path)
    store = insitu.open_store(str(root))
    with pytest.raises(ConfigError, match=r"patch_weights='fg' names no array sampled.*\['image', 'mask'\]"):
        _dataset(store, patch_weights="fg")
    geoms = insitu.open_geometries(store)
    with pytest.raises(ConfigError, match="patch_sampling='random'"):
        insitu.InSituDataset(
            store,
            insitu.split_by_chunk(geoms["image"], fractions=(1.0,)),
            geometries=[geoms["image"], geoms["mask"]],
            patch={"y": P, "x": P},
            patch_weights="mask",
        )
    with pytest.raises(ConfigError, match="not integers"):
        _dataset(store, balance="image", arrays=("image", "mask"))
    with pytest.raises(ConfigError, match=r"patch_min_coverage=1\.5"):
        _dataset(store, patch_weights="mask", patch_min_coverage=1.5)
    # A mask on another grid, with no scale given: refused, naming it and its shape.
    small = tmp_path / "small.zarr"
    zarr.open_group(str(small), mode="w")
    write_array(small, "image", np.zeros((1, N, N), "f4"), (1, CHUNK, CHUNK), dimension_names=("z", "y", "x"))
    write_array(
        small, "mask", np.ones((1, N // 2, N // 2), "u1"), (1, CHUNK, CHUNK), dimension_names=("z", "y", "x")
    )
    with pytest.raises(ConfigError, match=r"array 'mask' \(shape \(1, 64, 64\).*with_spacing"):
        _dataset(insitu.open_store(str(small)), patch_weights="mask")


def test_a_class_no_position_holds_is_refused_naming_it(tmp_path: Path) -> None:
    root, _ = _classes(tmp_path)
    with pytest.raises(ConfigError, match=r"class\(es\) \[7\] of 'labels'.*classes present: \[0, 1, 2\]"):
        _dataset(insitu.open_store(str(root)), balance={"labels": {0: 1, 7: 1}}, arrays=("image", "labels"))


def test_a_mask_at_half_resolution_weights_by_its_scaled_footprint(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    image = rng.standard_normal((1, N, N)).astype("f4")
    half = np.zeros((1, N // 2, N // 2), dtype="u1")
    half[0, : N // 4, : N // 4] = 1  # the top-left quadrant, at half resolution
    root = tmp_path / "half.zarr"
    zarr.open_group(str(root), mode="w")
    write_array(root, "image", image, (1, CHUNK, CHUNK), dimension_names=("z", "y", "x"))
    write_array(root, "mask", half, (1, CHUNK // 2, CHUNK // 2), dimension_names=("z", "y", "x"))
    store = insitu.open_store(str(root))
    geoms = insitu.open_geometries(store)
    ds = insitu.InSituDataset(
        store,
        insitu.split_by_chunk(geoms["image"], fractions=(1.0,)),
        geometries=[geoms["image"], geoms["mask"].with_spacing(y=2, x=2)],
        patch={"y": P, "x": P},
        patch_sampling="random",
        patches_per_epoch=1000,
        batch_size=100,
        patch_weights="mask",
    )
    o = np.concatenate([b.patch_origins for b in ds.train])
    assert (o[:, 1] < N // 2).all()
    assert (o[:, 2] < N // 2).all()


def test_a_tampered_summary_is_made_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root, _, _ = _quadrant(tmp_path)
    cache = tmp_path / "cache"
    first = _dataset(insitu.open_store(str(root)), draws=200, patch_weights="mask", cache_dir=str(cache))
    origins = np.concatenate([b.patch_origins for b in first.train])
    (saved,) = (cache / "summaries").glob("summary-*.npz")
    np.savez(saved, values=np.ones(3))  # the wrong number of regions
    again = _dataset(insitu.open_store(str(root)), draws=200, patch_weights="mask", cache_dir=str(cache))
    assert again.summaries is not None
    assert (again.summaries.computed, again.summaries.loaded) == (1, 0)
    np.testing.assert_array_equal(np.concatenate([b.patch_origins for b in again.train]), origins)
    assert "ignoring the unreadable summary" in caplog.text


def test_a_summary_the_disk_cannot_hold_is_used_from_memory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _, _ = _quadrant(tmp_path)
    cache = tmp_path / "cache"

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(patch_summaries.os, "fsync", full)
    ds = _dataset(insitu.open_store(str(root)), draws=200, patch_weights="mask", cache_dir=str(cache))
    assert len(np.concatenate([b.patch_origins for b in ds.train])) == 200
    assert "could not keep the region summary" in caplog.text
    assert "No space left" in caplog.text
    assert not list((cache / "summaries").iterdir())  # no half-written file left
