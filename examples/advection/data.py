"""The advection example's data: a synthetic ERA5-like store, and the insitu dataset every script trains on.

**The store.** :func:`simulate` steps a toy atmosphere on a global lat/lon
grid: temperature on pressure levels carried by a smooth, slowly varying,
non-divergent wind (a seasonal jet plus drifting planetary waves), with
diffusion, relaxation towards a seasonal equilibrium that feels a land-sea
mask, and a little random forcing. :func:`write_era5_like` writes it with
xarray the way ERA5 copies usually look (``t``, ``u``, ``v`` on ``(time,
level, latitude, longitude)``, latitude north to south, temperature packed
into int16 with ``scale_factor`` / ``add_offset`` / ``_FillValue``, hours
since 1900 as the time axis, a static ``lsm``); :func:`write_wb2_like`
writes the same fields in WeatherBench2's layout (long variable names,
``(time, level, longitude, latitude)``, latitude south to north, float32,
Zarr v2 consolidated).

**The dataset.** :class:`Source` names where the fields are and what they
are called; :data:`SYNTHETIC` and :data:`WB2` differ only in that.
:func:`open_fields` opens the store by name (level and region selected, so
only their chunks are read), adds the target as the same temperature array
24 hours later (``geom.shift("24h")``) and splits by date;
:func:`build_dataset` turns it into batches of model arrays through
:class:`ForecastBatch`. The training scripts only add a framework.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

import insitu

if TYPE_CHECKING:
    import xarray as xr

EARTH_RADIUS_M = 6.371e6
STEP_HOURS = 6  # the stores' time step, as in ERA5 subsets and WeatherBench2
LEAD = "24h"  # the forecast lead: the target is the temperature this long after the inputs


# -- the toy atmosphere --------------------------------------------------------------------------
class _Atmosphere:
    """Temperature on pressure levels, advected by an analytic wind on a regular global grid.

    Rows run north to south (cell centres, as on WeatherBench2's equiangular
    grids), columns east from 0°. Winds come from a streamfunction, so they
    are non-divergent; temperature moves with them (semi-Lagrangian steps),
    diffuses a little, relaxes towards a seasonal equilibrium in which land
    has a larger annual cycle than sea, and gets a small random push each
    output step (what no model can predict from the inputs).
    """

    def __init__(self, n_lat: int, n_lon: int, levels: Sequence[float], seed: int) -> None:
        rng = np.random.default_rng([seed, 11])
        self.noise = np.random.default_rng([seed, 12])
        self.lat = 90.0 - (np.arange(n_lat) + 0.5) * 180.0 / n_lat
        self.lon = np.arange(n_lon) * 360.0 / n_lon
        self.levels = np.asarray(levels, dtype=np.float64)
        self.phi = np.radians(self.lat)[:, None]  # (H, 1)
        self.lam = np.radians(self.lon)[None, :]  # (1, W)
        self.dphi = math.radians(180.0 / n_lat)
        self.dlam = math.radians(360.0 / n_lon)
        self.cos_phi = np.cos(self.phi)
        self.land = 1.0 / (1.0 + np.exp(-4.0 * _smooth(rng, self.phi, self.lam, modes=10)))
        # Winds strengthen with height; the equilibrium cools with height, land matters less aloft.
        pressure = (self.levels / 1000.0)[:, None, None]
        self.wind_scale = 1.0 + 1.2 * (1.0 - pressure)
        self.t_surface = 295.0 * pressure**0.19
        self.land_weight = pressure**2
        # Drifting waves: psi_k = A_k cos(phi) sin(n_k (phi + pi/2)) cos(m_k lam - w_k t + a_k), their
        # amplitude breathing over a month or two. Differentiated by hand (u = -dpsi/dy, v = dpsi/dx),
        # each wave's wind is a latitude profile times a longitude phase: columns of (H, K) matrices.
        n_waves = 5
        m = rng.integers(2, 7, size=n_waves)
        n = rng.integers(2, 5, size=n_waves)
        speed = rng.uniform(3.0, 6.0, size=n_waves)  # m/s of meridional wind at each wave's peak
        shape = np.sin(n * (self.phi + np.pi / 2))  # (H, K)
        slope = -np.sin(self.phi) * shape + n * np.cos(self.phi) * np.cos(n * (self.phi + np.pi / 2))
        self.u_profiles = -speed / m * slope
        self.v_profiles = -speed * shape
        self.wavenumber = m.astype(np.float64)[:, None]  # (K, 1)
        period = rng.uniform(4.0, 14.0, n_waves) * rng.choice([-1.0, 1.0], n_waves)  # days, either way
        self.omega = 2 * np.pi / period  # rad/day
        self.alpha = rng.uniform(0, 2 * np.pi, n_waves)
        self.breathe = 2 * np.pi / rng.uniform(30.0, 90.0, n_waves)  # amplitude period, rad/day
        self.beta = rng.uniform(0, 2 * np.pi, n_waves)
        lat_abs = np.abs(self.lat)[:, None]
        self.jet = 15.0 * np.exp(-(((lat_abs - 40.0) / 12.0) ** 2))
        self.trades = -5.0 * np.exp(-((lat_abs / 14.0) ** 2))
        self.hemisphere = np.sign(self.lat)[:, None]
        self.temperature = self.equilibrium(0.0) + 2.0 * _smooth(rng, self.phi, self.lam, modes=12)
        self.noise_modes = np.stack([_smooth(rng, self.phi, self.lam, modes=3) for _ in range(16)])
        self.rows, self.cols = np.meshgrid(
            np.arange(n_lat, dtype=np.float64), np.arange(n_lon, dtype=np.float64), indexing="ij"
        )

    def season(self, day: float) -> float:
        """+1 in mid-January (northern winter), -1 in mid-July."""
        return math.cos(2 * np.pi * (day - 15.0) / 365.25)

    def equilibrium(self, day: float) -> np.ndarray:
        """The temperature each level relaxes to, (L, H, W): pole-to-equator contrast, seasons, land."""
        winter_north = self.season(day)
        sin_phi = np.sin(self.phi)
        return (
            self.t_surface
            - 32.0 * sin_phi**2
            - 10.0 * winter_north * sin_phi
            - self.land_weight * self.land * (8.0 * winter_north * sin_phi + 2.0)
        )

    def winds(self, day: float) -> tuple[np.ndarray, np.ndarray]:
        """Eastward and northward wind (m/s), each (L, H, W), ``day`` days into the run."""
        strength = 1.0 + 0.3 * self.season(day) * self.hemisphere  # the winter hemisphere's jet is stronger
        amplitude = 1.0 + 0.3 * np.sin(self.breathe * day + self.beta)
        theta = self.wavenumber * self.lam - (self.omega * day - self.alpha)[:, None]  # (K, W)
        u = (strength * self.jet + self.trades) + self.u_profiles @ (amplitude[:, None] * np.cos(theta))
        v = self.v_profiles @ (amplitude[:, None] * np.sin(theta))
        return self.wind_scale * u, self.wind_scale * v

    def step(self, day: float, hours: float) -> None:
        """Advance ``hours`` with the winds of ``day``: advect, diffuse, relax (6-day timescale)."""
        u, v = self.winds(day)
        seconds = hours * 3600.0
        # Departure points in grid units: rows grow southwards, columns eastwards.
        rows = self.rows + v * seconds / (EARTH_RADIUS_M * self.dphi)
        cols = self.cols - u * seconds / (EARTH_RADIUS_M * self.cos_phi * self.dlam)
        t = _bilinear(self.temperature, rows, cols)
        padded = np.pad(t, ((0, 0), (1, 1), (0, 0)), mode="edge")
        laplacian = padded[:, :-2] + padded[:, 2:] + np.roll(t, 1, axis=2) + np.roll(t, -1, axis=2) - 4 * t
        t = t + 0.02 * laplacian
        self.temperature = t + (self.equilibrium(day) - t) * hours / (6 * 24.0)

    def push(self) -> None:
        """The random part: a smooth perturbation of about 0.15 K per output step."""
        weights = self.noise.normal(0.0, 0.15 / 4.0, size=(len(self.levels), len(self.noise_modes)))
        self.temperature = self.temperature + np.tensordot(weights, self.noise_modes, axes=1)


def _smooth(rng: np.random.Generator, phi: np.ndarray, lam: np.ndarray, *, modes: int) -> np.ndarray:
    """A smooth random pattern of unit standard deviation from a few low wavenumbers."""
    out = np.zeros(np.broadcast_shapes(phi.shape, lam.shape))
    for _ in range(modes):
        m, n = rng.integers(1, 6, size=2)
        out += (
            rng.normal()
            / (m + n)
            * np.cos(m * lam + rng.uniform(0, 2 * np.pi))
            * np.cos(n * phi + rng.uniform(0, 2 * np.pi))
        )
    return out / max(float(out.std()), 1e-12)


def _bilinear(field: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """``field`` (L, H, W) at fractional grid positions (L, H, W) per level: rows clamped, columns periodic."""
    n_levels, n_lat, n_lon = field.shape
    rows = np.clip(rows, 0.0, n_lat - 1.0)
    r0 = np.minimum(np.floor(rows).astype(np.intp), n_lat - 2)
    fr = rows - r0
    c_floor = np.floor(cols)
    fc = cols - c_floor
    c0 = c_floor.astype(np.intp) % n_lon
    c1 = (c0 + 1) % n_lon
    flat = field.ravel()
    base = (np.arange(n_levels, dtype=np.intp) * n_lat * n_lon)[:, None, None] + r0 * n_lon
    top = flat[base + c0] * (1 - fc) + flat[base + c1] * fc
    bottom = flat[base + n_lon + c0] * (1 - fc) + flat[base + n_lon + c1] * fc
    return top * (1 - fr) + bottom * fr


#: CF attributes of the simulated variables and coordinates, as ERA5 files carry them.
ATTRS: dict[str, dict[str, str]] = {
    "t": {"units": "K", "long_name": "Temperature", "standard_name": "air_temperature"},
    "u": {"units": "m s**-1", "long_name": "U component of wind", "standard_name": "eastward_wind"},
    "v": {"units": "m s**-1", "long_name": "V component of wind", "standard_name": "northward_wind"},
    "lsm": {"units": "(0 - 1)", "long_name": "Land-sea mask"},
    "level": {"units": "millibars", "long_name": "pressure_level"},
    "latitude": {"units": "degrees_north", "long_name": "latitude"},
    "longitude": {"units": "degrees_east", "long_name": "longitude"},
}


def simulate(
    *,
    first_year: int = 2015,
    years: int = 4,
    shape: tuple[int, int] = (32, 64),
    levels: Sequence[int] = (500, 850),
    seed: int = 0,
) -> Iterator[xr.Dataset]:
    """The toy atmosphere, 6-hourly from 1 January ``first_year`` for ``years`` years, one ``xr.Dataset`` per year.

    Each Dataset has ``t`` (K), ``u``, ``v`` (m/s) on ``(time, level,
    latitude, longitude)`` and the static land-sea mask ``lsm`` on
    ``(latitude, longitude)`` (the same in every year), float32. The same
    arguments give the same values. Yielded year by year so a long run is
    written without holding it in memory.
    """
    import xarray as xr

    n_lat, n_lon = shape
    atmosphere = _Atmosphere(n_lat, n_lon, levels, seed)
    step_days = STEP_HOURS / 24

    def advance(day: float) -> None:
        # One semi-Lagrangian step per output step, with the winds of its midpoint.
        atmosphere.step(day + step_days / 2, STEP_HOURS)
        atmosphere.push()

    for day in np.arange(-30.0, 0.0, step_days):  # spin-up: forget the made-up initial state
        advance(float(day))
    origin = np.datetime64(f"{first_year}-01-01", "ns")
    for year in range(first_year, first_year + years):
        times = np.arange(
            np.datetime64(f"{year}-01-01", "ns"),
            np.datetime64(f"{year + 1}-01-01", "ns"),
            np.timedelta64(STEP_HOURS, "h"),
        )
        t, u, v = (np.empty((len(times), len(levels), n_lat, n_lon), np.float32) for _ in range(3))
        first_day = float((times[0] - origin) / np.timedelta64(1, "D"))
        for i in range(len(times)):
            day = first_day + i * step_days
            t[i] = atmosphere.temperature
            u[i], v[i] = atmosphere.winds(day)
            advance(day)
        dims = ("time", "level", "latitude", "longitude")
        yield xr.Dataset(
            {
                "t": (dims, t, ATTRS["t"]),
                "u": (dims, u, ATTRS["u"]),
                "v": (dims, v, ATTRS["v"]),
                "lsm": (("latitude", "longitude"), atmosphere.land.astype(np.float32), ATTRS["lsm"]),
            },
            coords={
                "time": times,
                "level": ("level", np.asarray(levels, dtype=np.int64), ATTRS["level"]),
                "latitude": ("latitude", atmosphere.lat.astype(np.float32), ATTRS["latitude"]),
                "longitude": ("longitude", atmosphere.lon.astype(np.float32), ATTRS["longitude"]),
            },
            attrs={
                "title": "Synthetic ERA5-like temperature advection (examples.advection.data)",
                "seed": seed,
            },
        )


# -- writing it the way real archives look -------------------------------------------------------
#: ERA5's packing of temperature: int16 steps of 2 mK around 260 K (200 K to 325 K representable).
T_PACKING = {"dtype": "int16", "scale_factor": 0.002, "add_offset": 260.0, "_FillValue": -32767}


def write_era5_like(
    years: Iterable[xr.Dataset],
    path: str | os.PathLike[str],
    *,
    chunks: Mapping[str, int] | None = None,
    zarr_format: int = 3,
) -> None:
    """Write :func:`simulate`'s years to ``path`` as an ERA5-like Zarr store with xarray.

    ``t`` is packed into int16 (``scale_factor``, ``add_offset``,
    ``_FillValue``); ``u``, ``v`` and the static ``lsm`` are float32; time
    is stored as hours since 1900-01-01. ``chunks`` maps dimension names to
    chunk lengths (default: 120 steps (30 days) of one level, the grid in 2 x 2 tiles,
    so that a region or a level is a fraction of the chunks).
    """
    consolidated = zarr_format == 2  # consolidated metadata is not part of the Zarr v3 specification
    first = True
    for ds in years:
        if first:
            sizes = {
                "time": 120,
                "level": 1,
                "latitude": max(ds.sizes["latitude"] // 2, 1),
                "longitude": max(ds.sizes["longitude"] // 2, 1),
            }
            sizes.update(chunks or {})
            field_chunks = tuple(sizes[d] for d in ("time", "level", "latitude", "longitude"))
            encoding: dict[str, dict[str, Any]] = {
                "time": {
                    "units": "hours since 1900-01-01 00:00:00",
                    "calendar": "proleptic_gregorian",
                    "dtype": "int64",
                },
                "t": {**T_PACKING, "chunks": field_chunks},
                "u": {"chunks": field_chunks},
                "v": {"chunks": field_chunks},
                "lsm": {"chunks": (sizes["latitude"], sizes["longitude"])},
            }
            ds.to_zarr(path, mode="w", encoding=encoding, zarr_format=zarr_format, consolidated=consolidated)
            first = False
        else:
            ds.drop_vars("lsm").to_zarr(
                path, append_dim="time", zarr_format=zarr_format, consolidated=consolidated
            )


#: WeatherBench2's names for what :func:`simulate` calls t, u, v and lsm.
WB2_NAMES = {
    "t": "temperature",
    "u": "u_component_of_wind",
    "v": "v_component_of_wind",
    "lsm": "land_sea_mask",
}


def write_wb2_like(
    years: Iterable[xr.Dataset],
    path: str | os.PathLike[str],
    *,
    chunks: Mapping[str, int] | None = None,
) -> None:
    """Write :func:`simulate`'s years as a local copy shaped like WeatherBench2's ERA5 stores.

    Like ``gs://weatherbench2/datasets/era5/1959-2023_01_10-6h-64x32_equiangular_conservative.zarr``:
    long variable names, fields on ``(time, level, longitude, latitude)``,
    static fields on ``(longitude, latitude)``, latitude from south to
    north, float32 throughout, time as int64 hours since 1959-01-01, Zarr v2
    with consolidated metadata. ``chunks`` maps dimension names to chunk
    lengths; a dimension not named is whole in every chunk (default: 40
    time steps of whole fields).
    """
    sizes = {"time": 40, **(chunks or {})}
    first = True
    for ds in years:
        out = ds.rename(WB2_NAMES).isel(latitude=slice(None, None, -1))
        out = out.transpose("time", "level", "longitude", "latitude")
        out["land_sea_mask"] = out["land_sea_mask"].transpose("longitude", "latitude")
        if first:
            encoding: dict[str, dict[str, Any]] = {
                "time": {
                    "units": "hours since 1959-01-01",
                    "calendar": "proleptic_gregorian",
                    "dtype": "int64",
                }
            }
            for name in WB2_NAMES.values():
                var = out[name]
                dims = [str(d) for d in var.dims]
                encoding[name] = {
                    "chunks": tuple(sizes.get(d, n) for d, n in zip(dims, var.shape, strict=True))
                }
            out.to_zarr(path, mode="w", encoding=encoding, zarr_format=2, consolidated=True)
            first = False
        else:
            out.drop_vars("land_sea_mask").to_zarr(path, append_dim="time", zarr_format=2, consolidated=True)


# -- where the data is: the only thing that differs between the synthetic store and WeatherBench2 -------
#: The North Atlantic and Europe: a box that crosses the Greenwich meridian (and so the stores'
#: 0/360 longitude seam), in the westerlies where advection dominates the day-to-day change.
REGION: dict[str, slice] = {"latitude": slice(15, 75), "longitude": slice(280, 40)}

#: Dates of the synthetic store (2015-2018, 6-hourly). Each training period stops a day before
#: the next one starts, so no training target (24 h ahead) falls in the validation or test period.
SYNTHETIC_SPLITS = {
    "train": ("2015-01-01", "2016-12-30"),
    "val": ("2017-01-01", "2017-12-30"),
    "test": ("2018-01-01", "2018-12-31"),
}
#: The smoke run's store covers 2015-2016 only.
SMOKE_SPLITS = {
    "train": ("2015-01-01", "2015-12-30"),
    "val": ("2016-01-01", "2016-06-29"),
    "test": ("2016-07-01", "2016-12-31"),
}
WB2_URL = "gs://weatherbench2/datasets/era5/1959-2023_01_10-6h-64x32_equiangular_conservative.zarr"
WB2_SPLITS = {
    "train": ("2010-01-01", "2017-12-30"),
    "val": ("2018-01-01", "2018-12-30"),
    "test": ("2019-01-01", "2019-12-31"),
}


@dataclass(frozen=True)
class Source:
    """Where the fields are and what they are called: everything that differs from one store to another.

    The level is selected by value (``None`` for a store without levels),
    the region by coordinate box; the sample dimension, the latitude order,
    the dimension order, the packing and the time encoding are read from the
    store, not configured here.
    """

    store: str
    temperature: str = "t"
    u: str = "u"
    v: str = "v"
    static: str = "lsm"
    level: int | None = 850
    region: Mapping[str, slice] = field(default_factory=lambda: dict(REGION))
    splits: Mapping[str, tuple[str, str]] = field(default_factory=lambda: dict(SYNTHETIC_SPLITS))
    storage_options: Mapping[str, Any] | None = None


#: The synthetic ERA5-like store written by ``write_era5_like`` (``store`` is filled in).
SYNTHETIC = Source(store="")
#: WeatherBench2's 5.625° ERA5 on Google Cloud Storage, read anonymously: 850 hPa fields.
WB2 = Source(
    store=WB2_URL,
    temperature=WB2_NAMES["t"],
    u=WB2_NAMES["u"],
    v=WB2_NAMES["v"],
    static=WB2_NAMES["lsm"],
    splits=WB2_SPLITS,
    storage_options={"anon": True},
)


@dataclass(frozen=True)
class Fields:
    """The arrays one training run reads, as insitu geometries, and the date split.

    ``inputs`` are temperature, u and v at time t; ``target`` is the same
    temperature array read 24 hours later; ``static`` is the land-sea mask
    (read once, delivered as ``(1, lat, lon)`` in every batch).
    """

    source: Source
    store: Any
    inputs: tuple[insitu.ArrayGeometry, ...]
    static: insitu.ArrayGeometry
    target: insitu.ArrayGeometry
    manifest: insitu.SplitManifest

    @property
    def geometries(self) -> list[insitu.ArrayGeometry]:
        return [*self.inputs, self.target, self.static]

    @property
    def temperature(self) -> str:
        return self.inputs[0].label


def open_fields(source: Source) -> Fields:
    """Open ``source`` by name: its variables, the level and region selected, the target 24 h ahead, the split.

    Only metadata and coordinates are read here; later, only the chunks the
    level and the region touch.
    """
    if source.storage_options:  # xarray's spelling, e.g. {"anon": True}; a local path takes none
        store = insitu.open_store(source.store, storage_options=dict(source.storage_options))
    else:
        store = insitu.open_store(source.store)
    sel: dict[str, Any] = dict(source.region)
    if source.level is not None:
        sel["level"] = source.level  # one value: the level axis is dropped, as in xarray
    names = [source.temperature, source.u, source.v, source.static]
    geoms = insitu.open_geometries(store, variables=names, sel=sel)
    temperature = geoms[source.temperature]
    # The target: the same stored array, 24 hours (4 steps of 6 h) after each input time.
    target = temperature.shift(LEAD)
    manifest = insitu.split_by_coord(temperature, source.splits)
    return Fields(
        source=source,
        store=store,
        inputs=(temperature, geoms[source.u], geoms[source.v]),
        static=geoms[source.static],
        target=target,
        manifest=manifest,
    )


# -- from insitu batches to model arrays ----------------------------------------------------------
CHANGE = "dt"  # the 24 h temperature change (K), a label the scaler is fitted on


def _orientation(geom: insitu.ArrayGeometry) -> tuple[tuple[int, int], bool]:
    """Axes of a delivered sample in (latitude, longitude) order, and whether latitude must be flipped
    to run north to south. Stores differ (ERA5: lat, lon from the north; WeatherBench2: lon, lat from
    the south); the model always sees the same orientation."""
    dims = geom.delivered_dims
    if sorted(d or "" for d in dims) != ["latitude", "longitude"]:
        raise ValueError(
            f"{geom.name!r} delivers dimensions {list(dims)}; expected latitude and longitude only "
            "(select one level)"
        )
    lat = geom.coord("latitude")
    ascending = lat is not None and len(lat) > 1 and bool(lat[1] > lat[0])
    return (dims.index("latitude"), dims.index("longitude")), ascending


def _north_up(array: np.ndarray, axes: tuple[int, int], flip: bool) -> np.ndarray:
    """(B, *sample) -> (B, lat, lon), north first."""
    out = np.transpose(array, (0, axes[0] + 1, axes[1] + 1))
    return out[:, ::-1] if flip else out


class ForecastBatch:
    """Batch transform: an insitu batch -> ``x`` (inputs), ``y`` (scaled 24 h change) and ``dt`` (K).

    ``x`` stacks standardised temperature, u, v and the land-sea mask as
    channels, ``(B, 4, lat, lon)`` with ``layout="NCHW"`` or ``(B, lat, lon,
    4)`` with ``"NHWC"``; ``y`` is the standardised change, with one channel
    laid out the same way; ``dt`` is the change in kelvin ``(B, lat, lon)``,
    for scoring. Latitude runs north to south whatever the store's order.
    """

    def __init__(self, fields: Fields, scaler: Any, layout: str = "NCHW") -> None:
        if layout not in ("NCHW", "NHWC"):
            raise ValueError(f"layout must be 'NCHW' or 'NHWC', got {layout!r}")
        self.scaler = scaler
        self.layout = layout
        self.inputs = [g.label for g in fields.inputs]
        self.static = fields.static.label
        self.target = fields.target.label
        self.orient = {g.label: _orientation(g) for g in (*fields.inputs, fields.static)}
        self.orient[self.target] = self.orient[self.inputs[0]]

    def grid(self, batch: Mapping[str, np.ndarray], label: str) -> np.ndarray:
        axes, flip = self.orient[label]
        return _north_up(np.asarray(batch[label]), axes, flip)

    def __call__(self, batch: insitu.Batch) -> insitu.Batch:
        now = self.grid(batch, self.inputs[0])
        change = self.grid(batch, self.target) - now
        n = now.shape[0]
        static = self.scaler.transform(self.static, self.grid(batch, self.static))  # (1, lat, lon)
        channels = [self.scaler.transform(label, self.grid(batch, label)) for label in self.inputs]
        channels.append(np.broadcast_to(static, (n, *static.shape[1:])))
        axis = 1 if self.layout == "NCHW" else -1
        x = np.stack(channels, axis=axis).astype(np.float32)
        y = np.expand_dims(self.scaler.transform(CHANGE, change), axis).astype(np.float32)
        return batch.replace({"x": x, "y": y, CHANGE: np.ascontiguousarray(change, dtype=np.float32)})


def fit_scaler(fields: Fields, *, batch_size: int = 64, max_batches: int | None = None) -> Any:
    """A StandardScaler for the inputs, the land-sea mask and the 24 h change, fitted on the train split.

    Statistics come from the training period only (never from the test
    period), in one streaming pass of a dataset that delivers the raw labels.
    """
    from insitu_transforms import StandardScaler

    labels = [*(g.label for g in fields.inputs), fields.static.label, CHANGE]
    temperature, target = fields.temperature, fields.target.label
    with insitu.InSituDataset(fields.store, fields.manifest, fields.geometries, batch_size=batch_size) as ds:
        batches = ({**batch, CHANGE: batch[target] - batch[temperature]} for batch in ds.train)
        return StandardScaler.fit(batches, labels=labels, max_batches=max_batches)


def build_dataset(
    fields: Fields, scaler: Any, *, batch_size: int, seed: int, layout: str = "NCHW", **options: Any
) -> insitu.InSituDataset:
    """The training dataset: shuffled train batches, ordered val and test, all as model arrays."""
    return insitu.InSituDataset(
        fields.store,
        fields.manifest,
        fields.geometries,
        batch_size=batch_size,
        seed=seed,
        batch_transforms=[ForecastBatch(fields, scaler, layout)],
        **options,
    )


# -- scoring ----------------------------------------------------------------------------------------
class Skill:
    """RMSE (K) of predicted 24 h changes and of persistence (a change of zero), accumulated per batch."""

    def __init__(self, scaler: Any) -> None:
        mean, std = scaler.stats(CHANGE)
        self.mean, self.std = float(mean), float(std)
        self.model_se = 0.0
        self.persistence_se = 0.0
        self.count = 0

    def add(self, prediction: np.ndarray, change: np.ndarray) -> None:
        """``prediction``: the model's scaled output, any layout with one channel; ``change``: ``dt`` (K)."""
        predicted = np.asarray(prediction, dtype=np.float64).reshape(change.shape) * self.std + self.mean
        truth = np.asarray(change, dtype=np.float64)
        self.model_se += float(np.square(predicted - truth).sum())
        self.persistence_se += float(np.square(truth).sum())
        self.count += truth.size

    @property
    def model(self) -> float:
        return math.sqrt(self.model_se / max(self.count, 1))

    @property
    def persistence(self) -> float:
        return math.sqrt(self.persistence_se / max(self.count, 1))
