"""A WeatherBench2-like Zarr store: synthetic by default, the real one by URL.

WeatherBench2's ERA5 archives at 5.625° (``64x32_equiangular_conservative``)
are Zarr v2 groups written by xarray with consolidated metadata: 6-hourly
``time`` encoded as ``hours since 1959-01-01`` (CF), ``longitude`` 0 … 354.375
and ``latitude`` -87.1875 … 87.1875 (ascending, cell centres), surface fields
as ``(time, longitude, latitude)`` and pressure-level fields as
``(time, level, longitude, latitude)`` over 13 levels, float32, plus static
fields such as ``land_sea_mask`` as ``(longitude, latitude)``.
:func:`write_store` writes that layout: the fields are advected waves, so
that a field 6 h later follows from its neighbourhood now and a small
convolutional model can beat persistence; the waves' amplitudes drift
slowly and white noise is added, so it cannot be perfect.

The time chunking is one step per chunk (each chunk is one field, or one
field's 13 levels).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

WB2_URL = "gs://weatherbench2/datasets/era5/1959-2023_01_10-6h-64x32_equiangular_conservative.zarr"
WB2_LEVELS = (50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 925, 1000)
TIME_UNITS = "hours since 1959-01-01"
STEP_HOURS = 6

# What the model reads: the surface temperature and the 500 hPa geopotential.
VARIABLES = ("2m_temperature", "geopotential")
LEVEL = 500


@dataclass(frozen=True)
class Field:
    """How one synthetic variable looks and moves."""

    mean_equator: float  # value of the zonal mean at the equator
    mean_pole: float  # and at the poles (the mean goes as sin² of latitude in between)
    anomaly: float  # std of the travelling waves
    noise: float  # std of white noise added at every step (unpredictable)
    speed: float  # eastward phase speed, degrees of longitude per hour


FIELDS = {
    "2m_temperature": Field(300.0, 245.0, 4.0, 0.15, 1.0),
    "geopotential": Field(57_500.0, 50_000.0, 900.0, 15.0, 1.5),  # at 500 hPa; other levels scaled
    "10m_u_component_of_wind": Field(0.0, 0.0, 5.0, 0.5, 0.8),
}


def grid(n_lon: int = 64, n_lat: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """WeatherBench2's equiangular grid without poles: longitudes from 0, latitudes at cell centres."""
    lon = np.arange(n_lon) * (360.0 / n_lon)
    lat = -90.0 + (np.arange(n_lat) + 0.5) * (180.0 / n_lat)
    return lon, lat


def times(start: str, end: str) -> np.ndarray:
    """6-hourly datetime64[ns] from ``start`` to ``end`` inclusive."""
    first, last = np.datetime64(start, "h"), np.datetime64(end, "h")
    return np.arange(first, last + 1, np.timedelta64(STEP_HOURS, "h")).astype("datetime64[ns]")


def travelling_waves(
    rng: np.random.Generator, hours: np.ndarray, lon: np.ndarray, lat: np.ndarray, speed: float
) -> np.ndarray:
    """``(time, lon, lat)`` unit-variance waves moving east at ``speed`` deg/h, amplitudes drifting slowly.

    Zonal wavenumbers 1-7 with amplitudes smooth in latitude; each amplitude is
    an AR(1) process with a 30-day memory, so a 6-hour step changes it by
    about 10%.
    """
    ks = np.arange(1, 8)
    n_t, n_lat = len(hours), len(lat)
    envelope = np.cos(np.deg2rad(lat))[:, None] ** 0.5 / np.sqrt(ks)[None, :]  # (lat, k)
    smooth = np.exp(-0.5 * ((lat[:, None] - lat[None, :]) / 20.0) ** 2)  # correlate nearby latitudes
    smooth /= np.sqrt((smooth**2).sum(axis=1, keepdims=True))

    def draw() -> np.ndarray:
        z = rng.standard_normal((n_lat, len(ks))) + 1j * rng.standard_normal((n_lat, len(ks)))
        return (smooth @ z) * envelope / np.sqrt(2)

    memory = np.exp(-STEP_HOURS / (30 * 24))
    amplitude = np.empty((n_t, n_lat, len(ks)), dtype=np.complex128)
    amplitude[0] = draw()
    for t in range(1, n_t):
        amplitude[t] = memory * amplitude[t - 1] + np.sqrt(1 - memory**2) * draw()
    phase = np.exp(1j * ks[None, None, :] * np.deg2rad(lon[None, :, None] - speed * hours[:, None, None]))
    waves = np.einsum("tyk,txk->txy", amplitude, phase).real  # (time, lon, lat)
    return waves / waves.std()


def field_values(
    rng: np.random.Generator, name: str, hours: np.ndarray, lon: np.ndarray, lat: np.ndarray
) -> np.ndarray:
    """``(time, lon, lat)`` float32 values of one surface-like field."""
    f = FIELDS[name]
    s2 = np.sin(np.deg2rad(lat)) ** 2
    mean = f.mean_equator + (f.mean_pole - f.mean_equator) * s2  # (lat,)
    waves = travelling_waves(rng, hours, lon, lat, f.speed)
    noise = rng.standard_normal(waves.shape)
    return (mean[None, None, :] + f.anomaly * waves + f.noise * noise).astype(np.float32)


def write_store(
    path: str | os.PathLike[str],
    start: str,
    end: str,
    *,
    seed: int = 0,
    levels: tuple[int, ...] = (250, 500, 850),
    extras: bool = False,
    n_lon: int = 64,
    n_lat: int = 32,
) -> str:
    """Write a WeatherBench2-shaped store at ``path`` covering ``start`` … ``end`` (6-hourly).

    Deterministic from ``seed``. ``levels`` are the pressure levels of
    ``geopotential`` (500 must be one); ``extras=True`` adds what the real
    store has besides (a 10 m wind and a static ``land_sea_mask``), so that a
    run must pick its variables by name.
    """
    import xarray as xr

    if LEVEL not in levels:
        raise ValueError(f"levels must include {LEVEL}: {levels}")
    rng = np.random.default_rng(seed)
    lon, lat = grid(n_lon, n_lat)
    time = times(start, end)
    hours = (time - time[0]) / np.timedelta64(1, "h")
    t2m = field_values(rng, "2m_temperature", hours, lon, lat)
    z500 = field_values(rng, "geopotential", hours, lon, lat)
    # Other levels: the same waves, thicker aloft, each with its own noise.
    scale = np.log(1013.0 / np.asarray(levels, dtype=np.float64)) / np.log(1013.0 / LEVEL)
    z_mean = z500.mean(axis=(0, 1), keepdims=True)
    z = (z_mean + (z500 - z_mean) * 0.9)[:, None] * scale[None, :, None, None]
    z += rng.standard_normal(z.shape) * FIELDS["geopotential"].noise * 0.4
    z[:, levels.index(LEVEL)] = z500
    data = {
        "2m_temperature": (
            ("time", "longitude", "latitude"),
            t2m,
            {"units": "K", "long_name": "2 metre temperature"},
        ),
        "geopotential": (
            ("time", "level", "longitude", "latitude"),
            z.astype(np.float32),
            {"units": "m**2 s**-2", "long_name": "Geopotential"},
        ),
    }
    if extras:
        u10 = field_values(rng, "10m_u_component_of_wind", hours, lon, lat)
        data["10m_u_component_of_wind"] = (("time", "longitude", "latitude"), u10, {"units": "m s**-1"})
        mask = (rng.random((n_lon, n_lat)) < 0.3).astype(np.float32)
        data["land_sea_mask"] = (("longitude", "latitude"), mask, {"units": "(0 - 1)"})
    coords = {
        "time": time,
        "level": ("level", np.asarray(levels, dtype=np.int64), {"units": "millibar"}),
        "longitude": ("longitude", lon.astype(np.float64), {"units": "degrees_east"}),
        "latitude": ("latitude", lat.astype(np.float64), {"units": "degrees_north"}),
    }
    ds = xr.Dataset({k: xr.Variable(*v) for k, v in data.items()}, coords=coords)
    chunks = {"time": 1, "level": len(levels), "longitude": n_lon, "latitude": n_lat}
    encoding: dict[str, dict[str, object]] = {
        name: {"chunks": tuple(chunks[d] for d in dims)} for name, (dims, *_) in data.items()
    }
    encoding["time"] = {"units": TIME_UNITS, "calendar": "proleptic_gregorian", "dtype": "int64"}
    ds.to_zarr(os.fspath(path), mode="w", zarr_format=2, consolidated=True, encoding=encoding)
    return os.fspath(path)


# --- Opening a store: the same functions for the synthetic store and the real one ---------------

CLOUD_SCHEMES = ("gs", "gcs", "s3")


def is_url(store: str) -> bool:
    return "://" in store


def open_insitu_store(store: str) -> Any:
    """insitu's store for a path or URL: obstore for cloud URLs, unsigned (WeatherBench2 is public)."""
    import insitu

    if is_url(store) and store.split("://", 1)[0] in CLOUD_SCHEMES:
        return insitu.open_store(store, anonymous=True)
    return insitu.open_store(store)


def open_xarray(store: str) -> Any:
    """``xr.open_zarr(...)``, dask-backed with the store's own chunks, as a user opens it.

    A local path goes to xarray as is. A URL goes through zarr's ``ObjectStore``
    over obstore (unsigned for cloud URLs): that needs no gcsfs/s3fs, and its
    client is rebuilt in each DataLoader worker from the pickled dataset, which
    is why :mod:`stacks` starts workers from a forkserver for URLs.
    """
    import xarray as xr

    if not is_url(store):
        return xr.open_zarr(store, chunks={})
    import obstore.store
    import zarr.storage

    if store.split("://", 1)[0] in CLOUD_SCHEMES:
        objects = obstore.store.from_url(store, skip_signature=True)
    else:
        objects = obstore.store.from_url(store)
    return xr.open_zarr(zarr.storage.ObjectStore(objects, read_only=True), chunks={})


def model_fields(ds: Any) -> Any:
    """The Dataset the model reads: :data:`VARIABLES`, geopotential at :data:`LEVEL` hPa."""
    return ds[list(VARIABLES)].sel(level=LEVEL)


def lead_steps(ds: Any, lead_hours: int) -> int:
    """How many steps of the store's (regular) time axis ``lead_hours`` spans."""
    step = (ds.indexes["time"][1] - ds.indexes["time"][0]) / np.timedelta64(1, "h")
    if lead_hours % step:
        raise ValueError(f"a lead of {lead_hours} h is not a whole number of {step:g} h steps")
    return int(lead_hours // step)


def anchor_range(ds: Any, dates: tuple[str, str], lead: int) -> range:
    """Time indices of the samples whose time lies in ``dates`` (inclusive, as xarray's label slices)."""
    found = ds.indexes["time"].slice_indexer(*dates)
    start, stop = int(found.start), int(found.stop)
    if stop + lead > ds.sizes["time"]:
        raise ValueError(
            f"{dates} ends less than {lead} steps before the store does: no target for the last samples"
        )
    if stop <= start:
        raise ValueError(f"no time step of the store lies in {dates}")
    return range(start, stop)


def normalisation(ds: Any, dates: tuple[str, str], lead: int, n_max: int = 64) -> tuple[list[float], ...]:
    """Per channel mean and std of the fields, and std of their change over ``lead`` steps.

    From at most ``n_max`` time steps spread evenly over ``dates``, computed
    once and handed to both stacks, so that their models see the same inputs.
    Dask runs its synchronous scheduler here: a thread pool started in a
    process that later forks DataLoader workers leaves those workers hung.
    """
    import dask

    anchors = anchor_range(ds, dates, lead)
    picks = np.unique(np.linspace(anchors.start, anchors.stop - 1, min(n_max, len(anchors))).astype(int))
    fields = model_fields(ds)
    mean, std, change = [], [], []
    with dask.config.set(scheduler="synchronous"):
        for name in VARIABLES:
            now = fields[name].isel(time=picks).values.astype(np.float64)
            later = fields[name].isel(time=picks + lead).values.astype(np.float64)
            mean.append(float(now.mean()))
            std.append(float(now.std()))
            change.append(float((later - now).std()))
    return mean, std, change
