"""WFC3/IR frames read in place from FITS files: the virtual store, the dataset and the bad-pixel mask.

The same functions serve the simulated files and the archive's: only the
file URLs and the connection options differ, and whether a ``TRUTH``
extension exists (it does only in simulated files).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from zarr.abc.store import Store

import insitu
from insitu_transforms import Cast

SCI, DQ, TRUTH = "SCI", "DQ", "TRUTH"

#: DQ bits that make a pixel unusable (WFC3 data-quality flags): bad detector pixel (4), hot
#: pixel (16), unstable response (32), full-well saturation (256), bad flat (512), A-to-D
#: saturation (2048). Warm pixels (64) and pixels whose cosmic ray the ramp fit removed (8192)
#: carry good values and stay.
BAD_DQ = 4 | 16 | 32 | 256 | 512 | 2048

#: The Hubble archive's public bucket on AWS (anonymous reads; region us-east-1).
MAST_PREFIX = "s3://stpubdata/hst/public"
MAST_REGION = "us-east-1"
#: Two full-frame WFC3/IR F140W exposures (program 14037, visit BB; STScI's IR notebooks use them).
MAST_EXAMPLE_ROOTNAMES = ("icqtbbbxq", "icqtbbc0q")


def mast_url(rootname: str, prefix: str = MAST_PREFIX, suffix: str = "flt") -> str:
    """Where the archive keeps one exposure's product: ``<prefix>/<ipppp>/<rootname>/<rootname>_flt.fits``."""
    root = rootname.lower()
    return f"{prefix.rstrip('/')}/{root[:4]}/{root}/{root}_{suffix}.fits"


def frame_urls(store: str, rootnames: Sequence[str] = ()) -> list[str]:
    """The FITS files ``--store`` names, one per frame, in sample order.

    - ``a_flt.fits,b_flt.fits`` (paths or URLs, comma-separated): those files;
    - a local directory without ``rootnames``: every ``*_flt.fits`` under it, sorted;
    - a prefix laid out like the archive (``s3://stpubdata/hst/public``, or a
      local copy of that layout) with ``rootnames``: one ``_flt.fits`` per rootname.
    """
    parts = [p.strip() for p in store.split(",") if p.strip()]
    if not parts:
        raise ValueError("--store names no file")
    if all(p.lower().endswith((".fits", ".fit", ".fts")) for p in parts):
        if rootnames:
            raise ValueError("give either FITS files or a prefix with --rootnames, not both")
        return parts
    if len(parts) != 1:
        raise ValueError(f"--store {store!r}: a comma-separated list must name .fits files")
    if rootnames:
        return [mast_url(r, parts[0]) for r in rootnames]
    if "://" not in parts[0] and Path(parts[0]).is_dir():
        found = sorted(str(p) for p in Path(parts[0]).rglob("*_flt.fits"))
        if not found:
            raise ValueError(f"no *_flt.fits file under {parts[0]}")
        return found
    raise ValueError(
        f"--store {store!r} is neither FITS files nor a local directory; for the archive give "
        f"--store {MAST_PREFIX} --rootnames {','.join(MAST_EXAMPLE_ROOTNAMES)}"
    )


@dataclass
class Frames:
    """The frames of one store: ``SCI`` and ``DQ`` (and ``TRUTH`` when simulated), files along axis 0."""

    store: Store
    geometries: dict[str, insitu.ArrayGeometry]
    urls: list[str]
    simulated: bool
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def n_frames(self) -> int:
        return self.geometries[SCI].n_samples

    @property
    def frame_shape(self) -> tuple[int, ...]:
        return tuple(self.geometries[SCI].shape[1:])


def open_frames(urls: Sequence[str | os.PathLike[str]], *, truth: bool = False, **options: Any) -> Frames:
    """A virtual Zarr store over the files: no byte of them is copied or converted.

    ``insitu_stores.virtual_store`` reads each file's headers only and stacks
    each extension of the files into one array with a new first axis (``file``),
    one file per chunk: chunk ``i`` of ``SCI`` is the byte range of file
    ``i``'s SCI data block (offset and length from its header), fetched with a
    ranged read and decoded from big-endian FITS; ``TRUTH``'s BSCALE/BZERO are
    applied on read. ``truth``: the files have a ``TRUTH`` extension (simulated
    files do, the archive's do not). ``options`` go to the store
    (``anonymous=True``, ``region=``...). The files must agree on shape and
    type (full frames, or the same subarray).
    """
    import zarr

    from insitu_stores import virtual_store

    names = [os.fspath(u) for u in urls]
    hdus = [SCI, DQ, TRUTH] if truth else [SCI, DQ]
    store = virtual_store(names, hdus=hdus, **options)
    geometries = dict(insitu.open_geometries(store, variables=hdus))
    attributes = dict(zarr.open_group(store, mode="r").attrs)
    return Frames(store, geometries, names, truth, attributes)


def references(frames: Frames) -> dict[str, dict[str, tuple[str, int, int]]]:
    """What the store serves, per array and chunk key: ``(file URL, byte offset, length)``.

    Read from the virtual store's manifests (virtualizarr's public
    ``to_virtual_dataset``): chunk ``i.0.0`` of ``SCI`` is ``length`` bytes of
    file ``i`` starting at ``offset``, the first byte of its SCI data block.
    """
    virtual = frames.store.manifest_store.to_virtual_dataset()  # type: ignore[attr-defined]
    out: dict[str, dict[str, tuple[str, int, int]]] = {}
    for name in frames.geometries:
        entries = virtual[name].data.manifest.dict()
        out[name] = {k: (e["path"], int(e["offset"]), int(e["length"])) for k, e in entries.items()}
    return out


def bad_pixels(sci: np.ndarray, dq: np.ndarray) -> np.ndarray:
    """True where a pixel is unusable: a bad DQ bit, or a value that is not finite (NaN, inf)."""
    return ((dq.astype(np.int64) & BAD_DQ) != 0) | ~np.isfinite(sci)


class DenoisingPairs:
    """Batch transform: ``SCI``/``DQ``(/``TRUTH``) to normalised network inputs and targets.

    Out: ``x`` (noisy frame, float32), ``good`` (1.0 where the pixel is usable,
    0.0 where it is masked), ``y`` (target), and per frame ``sky`` and
    ``sigma``, so that ``x * sigma + sky`` is back in e-/s.

    - Masking: a pixel is bad where its DQ has a :data:`BAD_DQ` bit or its
      value is NaN/inf (:func:`bad_pixels`). Bad pixels are set to the sky
      level (0 after normalisation) in ``x`` and ``y``, and ``good`` tells the
      network and the loss where they are: they count in no loss and no score.
    - Normalisation, per frame: ``(v - sky) / sigma`` with the median and the
      median absolute deviation (x1.4826) of the frame's good pixels, so
      frames of any exposure time and background look alike to the network.
    - Simulated files: the input is ``SCI`` and the target ``TRUTH``.
      Archive files have no truth: the target is ``SCI`` as archived and the
      input is ``SCI`` plus added noise (read noise of ``extra_noise`` times the
      frame's own sigma, and cosmic rays), redrawn every epoch in training
      and fixed for held-out frames, from (``seed``, epoch, frame).
    """

    def __init__(self, simulated: bool, seed: int = 0, extra_noise: float = 1.5) -> None:
        self.simulated = simulated
        self.seed = seed
        self.extra_noise = extra_noise

    def __call__(self, batch: insitu.Batch) -> insitu.Batch:
        sci = batch[SCI].astype(np.float32)
        bad = bad_pixels(sci, batch[DQ])
        if self.simulated:
            noisy, target = sci, batch[TRUTH].astype(np.float32)
        else:
            target = sci
            noisy = self._add_noise(sci, bad, batch)
        masked = np.where(bad, np.float32(np.nan), noisy)
        sky = np.nanmedian(masked, axis=(1, 2))
        sigma = 1.4826 * np.nanmedian(np.abs(masked - sky[:, None, None]), axis=(1, 2))
        sky = np.where(np.isfinite(sky), sky, 0.0).astype(np.float32)
        sigma = np.where(np.isfinite(sigma) & (sigma > 0), sigma, 1.0).astype(np.float32)
        x = (noisy - sky[:, None, None]) / sigma[:, None, None]
        y = (target - sky[:, None, None]) / sigma[:, None, None]
        x[bad] = 0.0
        y[bad] = 0.0
        return batch.replace({"x": x, "good": (~bad).astype(np.float32), "y": y, "sky": sky, "sigma": sigma})

    def _add_noise(self, sci: np.ndarray, bad: np.ndarray, batch: insitu.Batch) -> np.ndarray:
        epoch = batch.epoch if batch.split == "train" else -1
        out = np.empty_like(sci)
        for row, index in enumerate(batch.sample_indices):
            rng = np.random.default_rng([self.seed, epoch + 1, int(index)])
            frame = np.where(bad[row], np.nan, sci[row])
            level = np.nanmedian(frame)
            scale = 1.4826 * np.nanmedian(np.abs(frame - level))
            scale = scale if np.isfinite(scale) and scale > 0 else 1.0
            noise = rng.normal(0.0, self.extra_noise * scale, sci.shape[1:]).astype(np.float32)
            hits = rng.random(sci.shape[1:]) < 2e-3  # cosmic rays: isolated pixels, 20-200 sigma
            noise[hits] += scale * rng.uniform(20.0, 200.0, int(hits.sum())).astype(np.float32)
            out[row] = sci[row] + noise
        return out


def make_dataset(
    frames: Frames,
    *,
    seed: int,
    batch_size: int,
    test_fraction: float,
    extra_noise: float = 1.5,
    on_bad_chunk: str = "raise",
) -> insitu.InSituDataset:
    """Frames split by file into ``train`` (first) and ``test`` (held out, last ``test_fraction``).

    One file is one chunk of every array, so a split never cuts a frame and a
    batch of ``batch_size`` frames reads ``batch_size`` byte ranges per array.
    ``TRUTH`` (float64 once scaled) is cast to float32 as each chunk is
    decoded, so the pool holds half the bytes.
    """
    labels = [SCI, DQ] + ([TRUTH] if frames.simulated else [])
    geometries = [frames.geometries[name] for name in labels]
    manifest = insitu.split_by_chunk(
        frames.geometries[SCI], (1.0 - test_fraction, test_fraction), names=("train", "test")
    )
    return insitu.InSituDataset(
        frames.store,
        manifest,
        geometries=geometries,
        batch_size=batch_size,
        block_chunks=max(2 * batch_size, 8),
        seed=seed,
        on_bad_chunk=on_bad_chunk,
        chunk_transforms={TRUTH: [Cast("float32")]} if frames.simulated else (),
        batch_transforms=[DenoisingPairs(frames.simulated, seed=seed, extra_noise=extra_noise)],
    )
