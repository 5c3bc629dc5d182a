"""The SDSS example's data: synthetic survey spectra, written as one archive in two chunk layouts.

:func:`make_spectra` draws spectra on a logarithmic wavelength grid (as SDSS
co-adds are): stars (a blackbody with Balmer and metal absorption), passive
galaxies (a cool continuum, a 4000 Å break, absorption lines) and
star-forming galaxies (a blue power law with emission lines), the galaxies
redshifted; plus sky-dominated noise, with its inverse variance, and a few
bad pixels (inverse variance 0). Deterministic from a seed.

:func:`write_archive` stores them as Zarr v3 arrays ``flux`` and ``ivar``
``(fibre, wavelength)`` with a ``wavelength`` coordinate, once per chunk
layout: ``chunked64/`` (64 spectra per chunk, one object per 64 fibres) and
``chunked1/`` (one spectrum per chunk, one object per fibre). The values are
identical; only the chunking differs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

import numpy as np
import zarr

#: Rest wavelengths (Å) of the emission lines of star-forming galaxies, with their strength
#: relative to H-alpha before the per-spectrum ratios are drawn.
EMISSION = {
    "[OII] 3727": 3727.4,
    "H-beta": 4862.7,
    "[OIII] 4959": 4960.3,
    "[OIII] 5007": 5008.2,
    "[NII] 6548": 6549.9,
    "H-alpha": 6564.6,
    "[NII] 6584": 6585.3,
    "[SII] 6717": 6718.3,
    "[SII] 6731": 6732.7,
}
#: Rest wavelengths (Å) of absorption features: Balmer lines, Ca H and K, G band, Mg b, Na D.
BALMER = (4102.9, 4341.7, 4862.7, 6564.6)
METALS = (3934.8, 3969.6, 4305.6, 5176.7, 5895.6)
C_KMS = 299_792.458
LAYOUTS = {"chunked64": 64, "chunked1": 1}


def wavelength_grid(n_wave: int, lo: float = 3800.0, hi: float = 9200.0) -> np.ndarray:
    """``n_wave`` wavelengths (Å), evenly spaced in log10 as SDSS's ``loglam``: a redshift is a shift."""
    return np.logspace(math.log10(lo), math.log10(hi), n_wave)


def _lines(wave: np.ndarray, centres: np.ndarray, sigmas: np.ndarray, amplitudes: np.ndarray) -> np.ndarray:
    """Sum of Gaussians, (n, n_wave): ``centres``, ``sigmas`` and ``amplitudes`` are (n, n_lines)."""
    offsets = (wave[None, None, :] - centres[:, :, None]) / sigmas[:, :, None]
    return (amplitudes[:, :, None] * np.exp(-0.5 * offsets**2)).sum(axis=1)


def _blackbody(rest: np.ndarray, temperature: np.ndarray) -> np.ndarray:
    """Planck's law per unit wavelength on each fibre's rest-frame grid ``rest`` (n, n_wave),
    normalised to 1 at 5500 Å."""
    hc_k = 1.438777e8  # h c / k in Å K
    t = temperature[:, None]
    return (rest / 5500.0) ** -5 * np.expm1(hc_k / (5500.0 * t)) / np.expm1(hc_k / (rest * t))


def make_spectra(
    n_fibres: int, n_wave: int, *, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """``(wavelength, flux, ivar, truth)``: flux and ivar float32 ``(n_fibres, n_wave)``.

    ``truth`` holds each fibre's class (0 star, 1 passive galaxy, 2
    star-forming galaxy) and redshift. Flux is in SDSS's units (1e-17
    erg/s/cm²/Å), continua of 2 to 40 at 5500 Å; the noise is dominated by a
    sky that brightens to the red and has emission lines of its own."""
    rng = np.random.default_rng(seed)
    wave = wavelength_grid(n_wave)
    n = n_fibres
    kind = rng.choice(3, size=n, p=[0.3, 0.3, 0.4])
    z = np.where(kind == 0, rng.normal(0, 2e-4, n), rng.uniform(0.02, 0.4, n))
    rest = wave[None, :] / (1 + z[:, None])  # each fibre's rest-frame wavelengths
    # Line width: velocity dispersion, with the spectrograph's resolution (one pixel) in quadrature.
    pixel_kms = C_KMS * math.log(10) * math.log10(wave[-1] / wave[0]) / (n_wave - 1)
    sigma_v = np.where(kind == 0, 10.0, rng.uniform(60, 250, n))
    sigma_frac = np.sqrt(sigma_v**2 + pixel_kms**2) / C_KMS

    continuum = np.empty((n, n_wave))
    stars, passive, forming = kind == 0, kind == 1, kind == 2
    temperature = np.where(stars, rng.uniform(3500, 12000, n), rng.uniform(4000, 5500, n))
    continuum[stars | passive] = _blackbody(rest, temperature)[stars | passive]
    slope = rng.uniform(-2.0, -0.5, n)
    continuum[forming] = ((rest / 5500.0) ** slope[:, None])[forming]
    brk = rng.uniform(0.3, 0.6, n)  # the 4000 Å break of old stellar populations
    step = 1 - brk[:, None] / (1 + np.exp((rest - 4000.0) / 40.0))
    continuum[passive] = (continuum * step)[passive]

    def features(rest_lines: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        centre = np.asarray(rest_lines)[None, :] * (1 + z[:, None])
        return centre, centre * sigma_frac[:, None]

    shape = np.ones((n, n_wave))
    # Absorption: Balmer deepest near 9000 K (stars), metals in cool stars and old galaxies.
    balmer_depth = np.where(stars, 0.6 * np.exp(-(((temperature - 9000) / 2500) ** 2)), 0.05)
    metal_depth = np.where(stars, 0.4 * np.clip((7000 - temperature) / 3500, 0, 1), 0.3)
    metal_depth = np.where(forming, 0.0, metal_depth)
    for rest_lines, depth, width in ((BALMER, balmer_depth, 2.5), (METALS, metal_depth, 1.5)):
        centre, sigma = features(rest_lines)
        amplitude = np.repeat(depth[:, None], len(rest_lines), axis=1)
        shape -= _lines(wave, centre, np.maximum(sigma * width, 1.0), amplitude)
    flux_scale = np.exp(rng.uniform(np.log(2.0), np.log(40.0), n))
    model = flux_scale[:, None] * continuum * np.clip(shape, 0.05, None)

    # Emission lines of star-forming galaxies: the equivalent width of H-alpha, and line ratios set
    # by one number per galaxy, its gas metallicity (0 poor: strong [OIII]; 1 rich: strong [NII]),
    # as along the star-forming sequence of the BPT diagram.
    ew_halpha = np.exp(rng.uniform(np.log(15.0), np.log(120.0), n))
    metal = rng.uniform(0, 1, n)
    hbeta = 1 / (2.86 * (1 + 0.4 * metal))  # more dust in metal-rich galaxies: a steeper decrement
    oiii = hbeta * 10 ** (0.6 - 1.1 * metal)
    nii = 10 ** (-1.3 + 0.9 * metal)
    ratios = np.stack(
        [
            hbeta * (3.0 - 1.5 * metal),
            hbeta,
            oiii / 3,
            oiii,
            nii / 3,
            np.ones(n),
            nii,
            0.1 + 0.1 * metal,
            0.08 + 0.07 * metal,
        ],
        axis=1,
    )
    centre, sigma = features(list(EMISSION.values()))
    continuum_at_halpha = flux_scale * (6564.6 / 5500.0) ** slope
    # A line of equivalent width W over a continuum C has area W * C: peak = area / (sigma sqrt(2 pi)).
    area = (ew_halpha * continuum_at_halpha)[:, None] * ratios * (1 + z[:, None])
    peaks = area / (sigma * math.sqrt(2 * math.pi))
    model[forming] += _lines(wave, centre, sigma, peaks)[forming]

    # Noise: read noise, photon noise of the object, and a sky rising to the red with lines.
    sky_lines = np.concatenate([[5578.5, 5891.6, 6301.7, 6365.5], rng.uniform(6800, 9200, 40)])
    sky = 1.0 + 2.5 * (wave / 9200.0) ** 4
    sky_sigma = sky_lines * pixel_kms / C_KMS  # unresolved: the spectrograph's own width
    sky = sky + _lines(wave, sky_lines[None, :], sky_sigma[None, :], rng.uniform(3, 30, (1, 44)))[0]
    variance = 0.04 + 0.02 * np.abs(model) + 0.15 * sky[None, :]
    flux = model + rng.standard_normal((n, n_wave)) * np.sqrt(variance)
    ivar = 1.0 / variance
    bad = rng.random((n, n_wave)) < 0.003  # cosmic rays and bad columns: masked, flux zeroed
    flux[bad], ivar[bad] = 0.0, 0.0
    truth: dict[str, np.ndarray] = {"class": kind.astype(np.int8), "redshift": z.astype(np.float32)}
    return wave, flux.astype(np.float32), ivar.astype(np.float32), truth


def write_archive(
    path: str | os.PathLike[str],
    wave: np.ndarray,
    flux: np.ndarray,
    ivar: np.ndarray,
    *,
    layouts: Mapping[str, int] = LAYOUTS,
    truth: Mapping[str, np.ndarray] | None = None,
) -> str:
    """One Zarr v3 group per layout (``{name: spectra per chunk}``), each with ``flux``, ``ivar``
    ``(fibre, wavelength)`` chunked that many spectra per chunk, and the ``wavelength``
    coordinate; ``truth`` arrays (per fibre) go into each group too. Returns the path."""
    root = zarr.open_group(os.fspath(path), mode="w", zarr_format=3)
    root.attrs["description"] = (
        "synthetic survey spectra; the same values stored once per chunk layout: "
        + ", ".join(f"{name}/ ({k} spectra per chunk)" for name, k in layouts.items())
    )
    n_fibres, n_wave = flux.shape
    for name, per_chunk in layouts.items():
        group = root.create_group(name)
        for label, values, units in (
            ("flux", flux, "1e-17 erg/s/cm2/Angstrom"),
            ("ivar", ivar, "1/(1e-17 erg/s/cm2/Angstrom)^2"),
        ):
            arr = group.create_array(
                label,
                shape=values.shape,
                chunks=(min(per_chunk, n_fibres), n_wave),
                dtype="float32",
                dimension_names=("fibre", "wavelength"),
                # Keys "c.<i>.0": one folder of objects, as in a bucket (not one folder per fibre).
                chunk_key_encoding={"name": "default", "separator": "."},
                attributes={"units": units},
            )
            arr[...] = values
        coord = group.create_array(
            "wavelength", shape=(n_wave,), chunks=(n_wave,), dtype="float64", dimension_names=("wavelength",)
        )
        coord[...] = wave
        coord.attrs["units"] = "Angstrom"
        for label, values in (truth or {}).items():
            arr = group.create_array(
                label, shape=values.shape, chunks=values.shape, dtype=values.dtype, dimension_names=("fibre",)
            )
            arr[...] = values
    return os.fspath(path)
