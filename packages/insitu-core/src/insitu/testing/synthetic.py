"""Deterministic synthetic datasets written to Zarr, for demos, tests and benchmarks.

``make_era5_like`` writes hourly weather fields on a lat/lon grid that look and
compress like reanalysis data: a temperature field carried by a wind field
(semi-Lagrangian advection), relaxed towards a latitude/land climatology, with
a diurnal cycle that follows local solar time. ``make_linear_regression`` writes
a tiny supervised problem with a known answer. Both use only numpy and zarr and
write block by block, so a store far larger than memory can be generated.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import zarr
from numpy.typing import DTypeLike
from zarr.abc.store import Store
from zarr.codecs import BloscCodec, ZstdCodec

EARTH_RADIUS_M = 6.371e6
OMEGA = 7.292e-5  # Earth's rotation rate, s^-1
HOUR_S = 3600.0


@dataclass(frozen=True)
class _Variable:
    units: str
    long_name: str
    standard_name: str
    # Values are rounded to multiples of this step. Reanalyses are distributed GRIB-packed at
    # about 16 bits, so their float32 values carry zero low mantissa bits; rounding here
    # reproduces that, and with it the 2-3x zstd ratio real archives get.
    step: float


ERA5_VARIABLES: dict[str, _Variable] = {
    "t2m": _Variable("K", "2 metre temperature", "air_temperature", 1 / 64),
    "u10": _Variable("m s**-1", "10 metre U wind component", "eastward_wind", 1 / 256),
    "v10": _Variable("m s**-1", "10 metre V wind component", "northward_wind", 1 / 256),
    "msl": _Variable("Pa", "Mean sea level pressure", "air_pressure_at_mean_sea_level", 1 / 8),
}

StoreOrPath = str | os.PathLike[str] | Store


class _Atmosphere:
    """A toy atmosphere stepped one hour at a time on a regular lat/lon grid.

    Winds are a zonal jet plus drifting waves derived from a streamfunction (so
    they are non-divergent and pressure is in geostrophic balance with them).
    Temperature is advected by those winds and relaxed towards a climatology;
    the diurnal cycle and observation-like noise are added on output.
    """

    def __init__(self, n_lat: int, n_lon: int, seed: int) -> None:
        structure = np.random.default_rng([seed, 0])
        self.noise = np.random.default_rng([seed, 1])
        # Cell-centred latitudes (north to south, as ERA5 stores them) keep cos(lat) > 0.
        self.lat = 90.0 - (np.arange(n_lat) + 0.5) * 180.0 / n_lat
        self.lon = np.arange(n_lon) * 360.0 / n_lon
        phi = np.radians(self.lat)[:, None]
        lam = np.radians(self.lon)[None, :]
        self.dlat = math.radians(180.0 / n_lat)
        self.dlon = math.radians(360.0 / n_lon)
        self.cos_phi = np.cos(phi)

        self.land = 1.0 / (1.0 + np.exp(-3.0 * _smooth_field(structure, phi, lam, n_modes=8)))
        self.t_clim = (
            300.0
            - 45.0 * np.sin(phi) ** 2
            - 6.0 * self.land * np.abs(np.sin(phi))
            + 2.0 * _smooth_field(structure, phi, lam, n_modes=6)
        )
        lat_abs = np.abs(self.lat)[:, None]
        self.u_jet = 14.0 * np.exp(-(((lat_abs - 45.0) / 12.0) ** 2)) - 5.0 * np.exp(-((lat_abs / 15.0) ** 2))
        self.p_clim = (
            101325.0
            - 1500.0 * np.exp(-(((lat_abs - 60.0) / 10.0) ** 2))
            + 900.0 * np.exp(-(((lat_abs - 30.0) / 10.0) ** 2))
        )

        # Waves: psi_k = A_k cos(phi) sin(n_k (phi + pi/2)) cos(m_k lam - w_k t + a_k). Splitting
        # cos(m lam - w t + a) into cos/sin parts makes each hour a sum of precomputed fields.
        self.wave_freq: list[float] = []
        fields: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for _ in range(6):
            m = int(structure.integers(2, 7))
            n = int(structure.integers(2, 5))
            amplitude = structure.uniform(0.6, 1.4) * 1.5e7 / n
            period_h = structure.uniform(3.0, 9.0) * 24.0 * structure.choice([-1.0, 1.0])
            shape = amplitude * np.cos(phi) * np.sin(n * (phi + np.pi / 2))
            alpha = structure.uniform(0, 2 * np.pi)
            fields.extend(
                self._winds_and_pressure(shape * part, phi)
                for part in (np.cos(m * lam + alpha), np.sin(m * lam + alpha))
            )
            self.wave_freq.append(2 * np.pi / period_h)
        self.wave_u = np.stack([f[0] for f in fields])
        self.wave_v = np.stack([f[1] for f in fields])
        self.wave_p = np.stack([f[2] for f in fields])

        self.temperature = self.t_clim + 3.0 * _smooth_field(structure, phi, lam, n_modes=10)
        self.rows, self.cols = np.meshgrid(
            np.arange(n_lat, dtype=float), np.arange(n_lon, dtype=float), indexing="ij"
        )

    def _winds_and_pressure(
        self, psi: np.ndarray, phi: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """u = -dpsi/dy, v = dpsi/dx on the sphere; geostrophic pressure p' = rho f psi."""
        dpsi_dphi = np.gradient(psi, -self.dlat, axis=0)  # latitude decreases with row index
        dpsi_dlam = (np.roll(psi, -1, axis=1) - np.roll(psi, 1, axis=1)) / (2 * self.dlon)
        u = -dpsi_dphi / EARTH_RADIUS_M
        v = dpsi_dlam / (EARTH_RADIUS_M * self.cos_phi)
        coriolis = 2 * OMEGA * np.sin(phi)
        return u, v, 1.2 * coriolis * psi

    def winds(self, hour: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Eastward wind, northward wind (m/s) and pressure anomaly (Pa) at ``hour``."""
        phase = np.array(self.wave_freq) * hour
        weights = np.stack([np.cos(phase), np.sin(phase)], axis=1).ravel()
        u = self.u_jet + np.tensordot(weights, self.wave_u, axes=1)
        v = np.tensordot(weights, self.wave_v, axes=1)
        return u, v, np.tensordot(weights, self.wave_p, axes=1)

    def advance(self, u: np.ndarray, v: np.ndarray) -> None:
        """One hour: semi-Lagrangian advection, then relaxation to climatology (3-day timescale)."""
        # Departure points in grid units; rows grow southwards, columns eastwards.
        d_rows = v * HOUR_S / (EARTH_RADIUS_M * self.dlat)
        d_cols = u * HOUR_S / (EARTH_RADIUS_M * self.cos_phi * self.dlon)
        advected = _bilinear(self.temperature, self.rows + d_rows, self.cols - d_cols)
        self.temperature = advected + (self.t_clim - advected) / 72.0

    def diurnal(self, hour: int) -> np.ndarray:
        """Warmest at 15:00 local solar time; land swings far more than sea."""
        local_hour = (hour + self.lon[None, :] / 15.0) % 24.0
        amplitude = (0.5 + 5.0 * self.land) * self.cos_phi
        return amplitude * np.cos(2 * np.pi * (local_hour - 15.0) / 24.0)


def _smooth_field(rng: np.random.Generator, phi: np.ndarray, lam: np.ndarray, *, n_modes: int) -> np.ndarray:
    """A smooth random pattern of unit scale: a few low-wavenumber modes, red spectrum."""
    out = np.zeros(np.broadcast_shapes(phi.shape, lam.shape))
    for _ in range(n_modes):
        m, n = rng.integers(1, 5, size=2)
        a, b = rng.uniform(0, 2 * np.pi, size=2)
        out += rng.normal() / (m + n) * np.cos(m * lam + a) * np.cos(n * phi + b)
    return out / max(float(out.std()), 1e-12)


def _bilinear(field: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Sample ``field`` at fractional indices: rows clamped at the poles, columns periodic."""
    n_lat, n_lon = field.shape
    rows = np.clip(rows, 0.0, n_lat - 1.0)
    r0 = np.minimum(np.floor(rows).astype(np.intp), n_lat - 2) if n_lat > 1 else np.zeros_like(rows, np.intp)
    fr = rows - r0
    c_floor = np.floor(cols)
    fc = cols - c_floor
    c0 = c_floor.astype(np.intp) % n_lon
    c1 = (c0 + 1) % n_lon
    r1 = np.minimum(r0 + 1, n_lat - 1)
    top = field[r0, c0] * (1 - fc) + field[r0, c1] * fc
    bottom = field[r1, c0] * (1 - fc) + field[r1, c1] * fc
    return top * (1 - fr) + bottom * fr


def _compressors(name: str | None, zarr_format: int) -> Any:
    if name is None:
        return None
    if zarr_format == 2:
        import numcodecs

        v2 = {"zstd": numcodecs.Zstd(level=3), "blosc": numcodecs.Blosc("zstd", 3, numcodecs.Blosc.SHUFFLE)}
        codec = v2.get(name)
    else:
        v3 = {"zstd": ZstdCodec(level=3), "blosc": BloscCodec(cname="zstd", clevel=3)}
        codec = v3.get(name)
    if codec is None:
        raise ValueError(f"compressor must be 'zstd', 'blosc' or None, got {name!r}")
    return codec


def _create(
    group: zarr.Group,
    name: str,
    data_shape: tuple[int, ...],
    dims: tuple[str, ...],
    *,
    dtype: DTypeLike,
    chunks: tuple[int, ...],
    zarr_format: Literal[2, 3],
    compressors: Any = None,
    shards: tuple[int, ...] | None = None,
    attributes: dict[str, Any] | None = None,
) -> zarr.Array:
    attrs = dict(attributes or {})
    kwargs: dict[str, Any] = {}
    if zarr_format == 3:
        kwargs["dimension_names"] = dims
    else:
        attrs["_ARRAY_DIMENSIONS"] = list(dims)  # the xarray convention for v2 stores
    if np.issubdtype(np.dtype(dtype), np.floating):
        kwargs["fill_value"] = np.nan  # an unwritten chunk reads as missing, not as zeros
    return group.create_array(
        name,
        shape=data_shape,
        dtype=dtype,
        chunks=chunks,
        shards=shards,
        compressors=compressors,
        attributes=attrs,
        **kwargs,
    )


def make_era5_like(
    store_or_path: StoreOrPath,
    *,
    n_time: int = 720,
    shape: tuple[int, int] = (32, 64),
    chunks_time: int = 24,
    variables: Sequence[str] = ("t2m", "u10", "v10"),
    zarr_format: Literal[2, 3] = 3,
    shards_time: int | None = None,
    compressor: str | None = "zstd",
    seed: int = 0,
    dtype: DTypeLike = "float32",
    overwrite: bool = False,
) -> zarr.Group:
    """Write an hourly ERA5-like store and return its group, opened read-only.

    Arrays: each of ``variables`` (any of ``t2m``, ``u10``, ``v10``, ``msl``)
    with dims ``(time, lat, lon)``, chunked ``(chunks_time, lat, lon)`` and,
    for ``zarr_format=3``, optionally sharded ``(shards_time, lat, lon)``;
    plus coordinates ``time`` (hours since 2020-01-01), ``lat`` (north to
    south, cell centres) and ``lon`` (0 to 360, east).

    The same ``seed`` and grid give the same values whatever the chunking,
    sharding, format or compressor. Fields are generated one hour at a time
    and written one chunk (or shard) of hours at a time: memory stays at one
    block per variable. ``overwrite=False`` refuses to replace an existing
    store.
    """
    _check_era5_options(variables, zarr_format, n_time, shape, chunks_time, shards_time)
    group = zarr.open_group(store_or_path, mode="w" if overwrite else "w-", zarr_format=zarr_format)
    group.attrs.update(
        {
            "title": "Synthetic ERA5-like reanalysis (insitu.testing.synthetic.make_era5_like)",
            "seed": seed,
            "time_step_hours": 1,
        }
    )
    atmosphere = _Atmosphere(shape[0], shape[1], seed)
    _write_era5_coordinates(group, atmosphere, n_time, zarr_format)
    codec = _compressors(compressor, zarr_format)
    arrays = {
        name: _create_era5_array(
            group, name, (n_time, *shape), chunks_time, shards_time, codec, zarr_format, dtype
        )
        for name in variables
    }
    _write_era5_fields(arrays, atmosphere, n_time, shards_time or chunks_time, dtype)
    return zarr.open_group(group.store, mode="r", zarr_format=zarr_format)


def _check_era5_options(
    variables: Sequence[str],
    zarr_format: int,
    n_time: int,
    shape: tuple[int, int],
    chunks_time: int,
    shards_time: int | None,
) -> None:
    unknown = [v for v in variables if v not in ERA5_VARIABLES]
    if unknown:
        raise ValueError(f"unknown variables {unknown}; supported: {sorted(ERA5_VARIABLES)}")
    if len(set(variables)) != len(variables):
        raise ValueError(f"variables must be unique, got {list(variables)}")
    if zarr_format not in (2, 3):
        raise ValueError(f"zarr_format must be 2 or 3, got {zarr_format}")
    n_lat, n_lon = shape
    if n_time < 1 or n_lat < 1 or n_lon < 1 or chunks_time < 1:
        raise ValueError("n_time, shape and chunks_time must be positive")
    if shards_time is not None:
        if zarr_format != 3:
            raise ValueError("shards_time needs zarr_format=3 (sharding is a v3 codec)")
        if shards_time % chunks_time:
            raise ValueError(f"shards_time ({shards_time}) must be a multiple of chunks_time ({chunks_time})")


def _write_era5_coordinates(
    group: zarr.Group, atmosphere: _Atmosphere, n_time: int, zarr_format: Literal[2, 3]
) -> None:
    """``time`` (hours since 2020-01-01), ``lat`` and ``lon``, each one chunk."""
    times = _create(
        group,
        "time",
        (n_time,),
        ("time",),
        dtype="int64",
        chunks=(n_time,),
        zarr_format=zarr_format,
        attributes={"units": "hours since 2020-01-01 00:00:00", "calendar": "proleptic_gregorian"},
    )
    times[:] = np.arange(n_time, dtype="int64")
    for name, values, units in (
        ("lat", atmosphere.lat, "degrees_north"),
        ("lon", atmosphere.lon, "degrees_east"),
    ):
        coord = _create(
            group,
            name,
            values.shape,
            (name,),
            dtype="float32",
            chunks=values.shape,
            zarr_format=zarr_format,
            attributes={"units": units},
        )
        coord[:] = values.astype("float32")


def _create_era5_array(
    group: zarr.Group,
    name: str,
    shape: tuple[int, int, int],
    chunks_time: int,
    shards_time: int | None,
    codec: Any,
    zarr_format: Literal[2, 3],
    dtype: DTypeLike,
) -> zarr.Array:
    """One empty ``(time, lat, lon)`` field with its CF attributes."""
    _, n_lat, n_lon = shape
    return _create(
        group,
        name,
        shape,
        ("time", "lat", "lon"),
        dtype=dtype,
        chunks=(chunks_time, n_lat, n_lon),
        shards=None if shards_time is None else (shards_time, n_lat, n_lon),
        compressors=codec,
        zarr_format=zarr_format,
        attributes={
            "units": ERA5_VARIABLES[name].units,
            "long_name": ERA5_VARIABLES[name].long_name,
            "standard_name": ERA5_VARIABLES[name].standard_name,
        },
    )


def _write_era5_fields(
    arrays: dict[str, zarr.Array], atmosphere: _Atmosphere, n_time: int, block: int, dtype: DTypeLike
) -> None:
    """Step the atmosphere hour by hour, writing ``block`` hours of every field at a time."""
    n_lat, n_lon = atmosphere.lat.size, atmosphere.lon.size
    for start in range(0, n_time, block):
        stop = min(start + block, n_time)
        # Fresh buffers per block: without a compressor, zarr's MemoryStore keeps views of the
        # written memory, so reusing one buffer would rewrite chunks already stored.
        buffers = {name: np.empty((stop - start, n_lat, n_lon), dtype=dtype) for name in arrays}
        for hour in range(start, stop):
            u, v, p_wave = atmosphere.winds(hour)
            fields = _era5_hour(atmosphere, hour, u, v, p_wave)
            for name in arrays:
                step = ERA5_VARIABLES[name].step
                buffers[name][hour - start] = np.round(fields[name] / step) * step
            atmosphere.advance(u, v)
        for name in arrays:
            arrays[name][start:stop] = buffers[name]


def _era5_hour(
    atmosphere: _Atmosphere, hour: int, u: np.ndarray, v: np.ndarray, p_wave: np.ndarray
) -> dict[str, np.ndarray]:
    """Every field at ``hour``, before rounding to its step."""
    # Every field draws its noise every hour, requested or not, so values do not
    # depend on which variables were asked for.
    return {
        "t2m": atmosphere.temperature + atmosphere.diurnal(hour) + atmosphere.noise.normal(0, 0.15, u.shape),
        "u10": u + atmosphere.noise.normal(0, 0.3, u.shape),
        "v10": v + atmosphere.noise.normal(0, 0.3, u.shape),
        "msl": atmosphere.p_clim + p_wave + atmosphere.noise.normal(0, 20.0, u.shape),
    }


def make_linear_regression(
    store_or_path: StoreOrPath,
    *,
    n_samples: int = 1024,
    n_features: int = 4,
    n_targets: int = 1,
    chunks: int = 64,
    noise: float = 0.0,
    seed: int = 0,
    dtype: DTypeLike = "float32",
    overwrite: bool = False,
) -> zarr.Group:
    """Write ``x`` (samples, features) and ``y = x @ weights + bias (+ noise)`` (samples, targets).

    A supervised problem with a known answer, for checking that a model trained
    through a loader actually learns. ``weights`` and ``bias`` are stored in the
    group attributes. Returns the group opened read-only.
    """
    rng = np.random.default_rng(seed)
    weights = rng.normal(0.0, 1.0, size=(n_features, n_targets))
    bias = rng.normal(0.0, 0.5, size=n_targets)
    group = zarr.open_group(store_or_path, mode="w" if overwrite else "w-")
    group.attrs.update({"weights": weights.tolist(), "bias": bias.tolist(), "noise": noise, "seed": seed})
    x_arr = _create(
        group,
        "x",
        (n_samples, n_features),
        ("sample", "feature"),
        dtype=dtype,
        chunks=(chunks, n_features),
        zarr_format=3,
    )
    y_arr = _create(
        group,
        "y",
        (n_samples, n_targets),
        ("sample", "target"),
        dtype=dtype,
        chunks=(chunks, n_targets),
        zarr_format=3,
    )
    for start in range(0, n_samples, chunks):
        stop = min(start + chunks, n_samples)
        x = rng.normal(0.0, 1.0, size=(stop - start, n_features))
        y = x @ weights + bias + noise * rng.normal(size=(stop - start, n_targets))
        x_arr[start:stop] = x.astype(dtype)
        y_arr[start:stop] = y.astype(dtype)
    return zarr.open_group(group.store, mode="r")


__all__ = ["ERA5_VARIABLES", "make_era5_like", "make_linear_regression"]
