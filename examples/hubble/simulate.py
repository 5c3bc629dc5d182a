"""Synthetic WFC3/IR calibrated exposures, written as real FITS files (one ``_flt.fits`` per frame).

Each file has the layout of a WFC3/IR ``_flt.fits`` product from the archive:
an empty primary HDU carrying the exposure keywords (``INSTRUME``,
``DETECTOR``, ``FILTER``, ``EXPTIME``, ``SAMP_SEQ``, ...), then one imset of
image extensions ``SCI`` (float32 count rate, ``BUNIT = 'ELECTRONS/S'``),
``ERR`` (float32), ``DQ`` (int16 data-quality bits), ``SAMP`` (int16 samples
per pixel) and ``TIME`` (float32 seconds), and a ``WCSCORR`` binary table, as
the archive's files have after astrometric updates. The simulation adds one
extension real files do not have: ``TRUTH``, the noiseless frame the noisy
``SCI`` was drawn from, stored as int16 with ``BSCALE = 1/128`` and
``BZERO = 256`` (0 to 512 e-/s in steps of 1/128: a power-of-two scale, so
``BZERO + BSCALE * stored`` is exact in float64).

What a frame holds (all deterministic from the seed and the frame number):

- **Sky**: a zodiacal-like background of 0.5-1.5 e-/s with a gentle gradient.
- **Stars**: PSF-shaped point sources (a pixel-integrated core of FWHM ~1.1
  pixels plus a wider halo: WFC3/IR undersamples its PSF) at random sub-pixel
  positions, fluxes from a power law (many faint, few bright), capped so no
  pixel exceeds the ``TRUTH`` range; and a few small exponential galaxies.
- **Noise**: Poisson shot noise on sky, sources and dark current over
  ``EXPTIME``, Gaussian read noise (15 e- for the fitted ramp), and cosmic
  rays the ramp fit missed (1-4 pixel tracks of hundreds to thousands of e-),
  which are not flagged.
- **Bad pixels** (a property of the detector, the same in every frame): dead
  pixels and a round dead patch (``SCI`` is NaN, ``DQ`` bit 4) and hot
  columns (``SCI`` offset by a few e-/s, ``DQ`` bit 16).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import erf  # type: ignore[import-untyped]  # scipy ships no type information

# astropy ships no type information, and the types session does not install it.
fits: Any = importlib.import_module("astropy.io.fits")

# TRUTH is stored as int16: physical = BZERO + BSCALE * stored covers [0, 512) e-/s.
TRUTH_BSCALE = 1.0 / 128.0
TRUTH_BZERO = 256.0

DQ_BAD_DETECTOR_PIXEL = 4
DQ_HOT_PIXEL = 16

READ_NOISE_E = 15.0  # effective read noise of a fitted up-the-ramp exposure, electrons
DARK_E_PER_S = 0.05
# (SAMP_SEQ, NSAMP, EXPTIME): sample sequences of the kind WFC3/IR exposures use.
SEQUENCES = (("SPARS10", 13, 102.9), ("SPARS25", 11, 252.9), ("SPARS50", 11, 502.9))


@dataclass(frozen=True)
class Frame:
    """One simulated exposure: the noisy products and the noiseless truth, all (ny, nx)."""

    sci: np.ndarray  # float32 e-/s, NaN at dead pixels
    err: np.ndarray  # float32 e-/s
    dq: np.ndarray  # int16 flags
    truth: np.ndarray  # float64 e-/s, on the TRUTH grid (multiples of TRUTH_BSCALE)
    exptime: float
    samp_seq: str
    nsamp: int


def detector_defects(shape: tuple[int, int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Masks of dead pixels and hot pixels: the same detector for every frame of one seed."""
    rng = np.random.default_rng([seed, 7])
    ny, nx = shape
    dead = rng.random(shape) < 0.003
    # A round patch of dead pixels, like the IR detector's "death star".
    cy, cx = rng.uniform(0.15, 0.85) * ny, rng.uniform(0.15, 0.85) * nx
    radius = max(2.0, 0.03 * min(ny, nx))
    yy, xx = np.mgrid[0:ny, 0:nx]
    dead |= (yy - cy) ** 2 + (xx - cx) ** 2 <= radius**2
    hot = np.zeros(shape, dtype=bool)
    n_columns = max(1, nx // 128)
    hot[:, rng.choice(nx, size=n_columns, replace=False)] = True
    hot &= ~dead
    return dead, hot


def _pixel_gaussian(offsets: np.ndarray, sigma: float) -> np.ndarray:
    """Fraction of a unit 1-D Gaussian falling in each pixel; ``offsets`` = pixel centre - source."""
    scale = sigma * np.sqrt(2.0)
    return 0.5 * (erf((offsets + 0.5) / scale) - erf((offsets - 0.5) / scale))


def _stars(shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """Point sources: pixel-integrated core + halo (sums of separable Gaussians)."""
    ny, nx = shape
    n = rng.poisson(ny * nx / 250.0)
    half = 5
    image = np.zeros((ny + 2 * half, nx + 2 * half))
    if n == 0:
        return image[half:-half, half:-half]
    y = rng.uniform(0, ny, n)
    x = rng.uniform(0, nx, n)
    # N(>F) ~ F^-0.6 between 0.3 and 1200 e-/s: mostly faint stars, a few bright ones.
    lo, hi, slope = 0.3, 1200.0, 0.6
    flux = lo * (1.0 - rng.random(n) * (1.0 - (lo / hi) ** slope)) ** (-1.0 / slope)
    iy, ix = np.floor(y).astype(int), np.floor(x).astype(int)
    steps = np.arange(-half, half + 1)
    dy = (iy[:, None] + steps[None, :]) - (y[:, None] - 0.5)  # pixel centre minus source position
    dx = (ix[:, None] + steps[None, :]) - (x[:, None] - 0.5)
    stamps = np.zeros((n, steps.size, steps.size))
    for weight, sigma in ((0.8, 0.47), (0.2, 1.6)):  # core FWHM ~1.1 px; halo
        stamps += weight * _pixel_gaussian(dy, sigma)[:, :, None] * _pixel_gaussian(dx, sigma)[:, None, :]
    stamps *= flux[:, None, None]
    rows = (iy[:, None] + steps[None, :] + half)[:, :, None]
    cols = (ix[:, None] + steps[None, :] + half)[:, None, :]
    np.add.at(image, (np.broadcast_to(rows, stamps.shape), np.broadcast_to(cols, stamps.shape)), stamps)
    return image[half:-half, half:-half]


def _galaxies(shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """A few small elliptical exponential discs, integrated on a 3x3 sub-pixel grid."""
    ny, nx = shape
    image = np.zeros(shape)
    n = rng.poisson(ny * nx / 2500.0)
    sub = (np.arange(3) - 1) / 3.0
    yy, xx = np.mgrid[0:ny, 0:nx]
    for _ in range(n):
        cy, cx = rng.uniform(0, ny), rng.uniform(0, nx)
        flux = rng.uniform(3.0, 60.0)
        scale = rng.uniform(0.7, 2.5)
        q, angle = rng.uniform(0.35, 1.0), rng.uniform(0, np.pi)
        r = int(np.ceil(6 * scale)) + 1
        y0, y1 = max(0, int(cy) - r), min(ny, int(cy) + r + 1)
        x0, x1 = max(0, int(cx) - r), min(nx, int(cx) + r + 1)
        if y0 >= y1 or x0 >= x1:
            continue
        py = yy[y0:y1, x0:x1][..., None, None] + 0.5 + sub[:, None] - cy
        px = xx[y0:y1, x0:x1][..., None, None] + 0.5 + sub[None, :] - cx
        u = px * np.cos(angle) + py * np.sin(angle)
        v = (-px * np.sin(angle) + py * np.cos(angle)) / q
        profile = np.exp(-np.hypot(u, v) / scale).mean(axis=(-2, -1))
        image[y0:y1, x0:x1] += flux * profile / (2 * np.pi * scale**2 * q)
    return image


def _cosmic_rays(shape: tuple[int, int], exptime: float, rng: np.random.Generator) -> np.ndarray:
    """Electrons deposited by cosmic rays the ramp fit missed: short tracks, one to four pixels."""
    ny, nx = shape
    deposit = np.zeros(shape)
    n = rng.poisson(ny * nx * exptime * 1.5e-5)
    for _ in range(n):
        y, x = rng.integers(0, ny), rng.integers(0, nx)
        length = rng.integers(1, 5)
        step = rng.choice([(0, 1), (1, 0), (1, 1), (1, -1)])
        energy = rng.lognormal(np.log(900.0), 0.7)
        share = rng.dirichlet(np.ones(length))
        for k in range(length):
            yk, xk = y + k * step[0], x + k * step[1]
            if 0 <= yk < ny and 0 <= xk < nx:
                deposit[yk, xk] += energy * share[k]
    return deposit


def simulate_frame(shape: tuple[int, int], seed: int, index: int) -> Frame:
    """Frame ``index`` of the run ``seed``: truth, then the detector's view of it."""
    rng = np.random.default_rng([seed, index])
    ny, nx = shape
    samp_seq, nsamp, exptime = SEQUENCES[int(rng.integers(len(SEQUENCES)))]
    sky = rng.uniform(0.5, 1.5)
    gy, gx = rng.normal(0, 0.1, 2)
    yy, xx = np.mgrid[0:ny, 0:nx]
    background = sky * (1.0 + gy * (yy / ny - 0.5) + gx * (xx / nx - 0.5))
    scene = background + _stars(shape, rng) + _galaxies(shape, rng)
    # The truth as the TRUTH extension stores it (so targets and file agree exactly).
    stored = np.clip(np.round((scene - TRUTH_BZERO) / TRUTH_BSCALE), -32768, 32767)
    truth = TRUTH_BZERO + TRUTH_BSCALE * stored

    electrons = rng.poisson((truth + DARK_E_PER_S) * exptime).astype(np.float64)
    electrons += rng.normal(0.0, READ_NOISE_E, shape) + _cosmic_rays(shape, exptime, rng)
    sci = electrons / exptime - DARK_E_PER_S
    dead, hot = detector_defects(shape, seed)
    sci[hot] += 4.0 + rng.normal(0.0, 0.5, int(hot.sum()))
    err = np.sqrt(np.maximum(sci, 0.0) * exptime + READ_NOISE_E**2) / exptime
    sci[dead] = np.nan
    dq = np.zeros(shape, dtype=np.int16)
    dq[dead] |= DQ_BAD_DETECTOR_PIXEL
    dq[hot] |= DQ_HOT_PIXEL
    return Frame(
        sci=sci.astype(np.float32),
        err=err.astype(np.float32),
        dq=dq,
        truth=truth,
        exptime=exptime,
        samp_seq=samp_seq,
        nsamp=nsamp,
    )


def write_flt(path: Path, frame: Frame, rootname: str, seed: int) -> None:
    """One ``_flt.fits`` file in the archive's layout, plus the simulation's TRUTH extension."""
    ny, nx = frame.sci.shape
    full = (ny, nx) == (1014, 1014)
    primary = fits.PrimaryHDU()
    h = primary.header
    h["TELESCOP"] = ("HST", "telescope used to acquire data")
    h["INSTRUME"] = ("WFC3", "identifier for instrument used to acquire data")
    h["DETECTOR"] = ("IR", "detector in use: UVIS or IR")
    h["FILENAME"] = (path.name, "name of file")
    h["ROOTNAME"] = (rootname, "rootname of the observation set")
    h["FILTER"] = ("F140W", "element selected from filter wheel")
    h["APERTURE"] = ("IR" if full else f"IRSUB{nx}", "aperture name")
    h["SUBARRAY"] = (not full, "data from a subarray (T) or full frame (F)")
    h["SAMP_SEQ"] = (frame.samp_seq, "MultiAccum exposure time sequence name")
    h["NSAMP"] = (frame.nsamp, "number of MULTIACCUM samples")
    h["EXPTIME"] = (frame.exptime, "exposure duration (seconds)--calculated")
    h["CCDGAIN"] = (2.5, "commanded gain of CCD")
    h["NEXTEND"] = (7, "number of extensions in file")
    h["SIMULATE"] = (True, "simulated: TRUTH holds the noiseless frame")
    h["SIMSEED"] = (seed, "seed of the simulation")

    def image(data: np.ndarray, name: str, bunit: str) -> fits.ImageHDU:
        hdu = fits.ImageHDU(data, name=name)
        hdu.header["EXTVER"] = (1, "extension version number")
        hdu.header["BUNIT"] = (bunit, "brightness units")
        hdu.header["INHERIT"] = (True, "inherit the primary header")
        return hdu

    sci = image(frame.sci, "SCI", "ELECTRONS/S")
    sci.header["PHOTFLAM"] = (1.4737e-20, "inverse sensitivity, ergs/cm2/A/e-")
    samp = np.full(frame.sci.shape, frame.nsamp - 1, dtype=np.int16)
    time = np.full(frame.sci.shape, frame.exptime, dtype=np.float32)
    # int16 with BSCALE/BZERO set on the header: astropy writes the integers as they are.
    truth = image(
        np.round((frame.truth - TRUTH_BZERO) / TRUTH_BSCALE).astype(np.int16), "TRUTH", "ELECTRONS/S"
    )
    truth.header["BSCALE"] = TRUTH_BSCALE
    truth.header["BZERO"] = TRUTH_BZERO
    wcscorr = fits.BinTableHDU.from_columns(
        [
            fits.Column(name="WCS_ID", format="40A", array=np.array(["IDC_w3m18525i"])),
            fits.Column(name="CRVAL1", format="D", array=np.array([150.1])),
            fits.Column(name="CRVAL2", format="D", array=np.array([2.2])),
        ],
        name="WCSCORR",
    )
    hdus = [
        primary,
        sci,
        image(frame.err, "ERR", "ELECTRONS/S"),
        image(frame.dq, "DQ", "UNITLESS"),
        image(samp, "SAMP", "SAMPLES"),
        image(time, "TIME", "SECONDS"),
        wcscorr,
        truth,
    ]
    fits.HDUList(hdus).writeto(path, overwrite=True)


def write_frames(directory: Path, n_frames: int, shape: tuple[int, int], seed: int) -> list[Path]:
    """``n_frames`` simulated exposures as ``<rootname>_flt.fits`` files; returns their paths, in order.

    Files already there from the same seed and shape are kept (the simulation is deterministic)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(n_frames):
        rootname = f"isim{index:04d}q"
        path = directory / f"{rootname}_flt.fits"
        if not _matches(path, shape, seed):
            write_flt(path, simulate_frame(shape, seed, index), rootname, seed)
        paths.append(path)
    return paths


def _matches(path: Path, shape: tuple[int, int], seed: int) -> bool:
    if not path.is_file():
        return False
    try:
        with fits.open(path) as hdul:
            return bool(hdul[0].header.get("SIMSEED") == seed and hdul["SCI"].shape == shape)
    except (OSError, KeyError):
        return False
