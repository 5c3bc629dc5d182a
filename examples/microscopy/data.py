"""The microscopy example's data: a synthetic cell volume, an OME-NGFF writer and reader.

- :func:`make_cells` draws a volume of cell nuclei (textured ellipsoids,
  blurred by the microscope, lit unevenly, with shot and read noise) and its
  instance label image, deterministically from a seed.
- :func:`write_ome_zarr` writes an image and its labels as OME-NGFF: a
  ``multiscales`` group (axes with types and units, one scale transformation
  per level), and a ``labels/<name>`` image-label group beside it. Version
  0.5 (Zarr v3, metadata under ``"ome"``, array ``dimension_names``) or 0.4
  (Zarr v2, the layout of IDR's public images).
- :func:`open_ome` reads that metadata back from any store (synthetic or
  real) and describes the two arrays to insitu: the sample axis is ``z``,
  found by name in the ``axes`` metadata, so it works whether the arrays
  name their dimensions (0.5) or not (0.4).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import zarr
from zarr.abc.store import Store

import insitu
from insitu import ArrayGeometry

#: OME-NGFF axes of the synthetic image, in the spec's order (time, channel, then space: z, y, x).
AXES = (
    {"name": "t", "type": "time", "unit": "second"},
    {"name": "c", "type": "channel"},
    {"name": "z", "type": "space", "unit": "micrometer"},
    {"name": "y", "type": "space", "unit": "micrometer"},
    {"name": "x", "type": "space", "unit": "micrometer"},
)
#: Voxel size of the synthetic image (t in seconds, z/y/x in micrometres).
SCALE = (1.0, 1.0, 0.5, 0.36, 0.36)
CHANNELS = ("nuclei", "membrane")


# -- synthetic cells --------------------------------------------------------------------------------
def _blur(volume: np.ndarray, sigmas: Sequence[float]) -> np.ndarray:
    """Separable Gaussian blur (reflecting edges), one 1-D pass per axis with ``sigma > 0``."""
    out = volume.astype(np.float32, copy=True)
    for axis, sigma in enumerate(sigmas):
        if sigma <= 0:
            continue
        radius = max(1, math.ceil(3 * sigma))
        taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
        taps /= taps.sum()
        pad = [(0, 0)] * out.ndim
        pad[axis] = (radius, radius)
        padded = np.pad(out, pad, mode="reflect")
        acc = np.zeros_like(out)
        n = out.shape[axis]
        for k, w in enumerate(taps):
            acc += np.float32(w) * np.take(padded, np.arange(k, k + n), axis=axis)
        out = acc
    return out


def make_cells(
    shape: tuple[int, int, int],
    *,
    seed: int = 0,
    channels: int = 2,
    radius: tuple[float, float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """A synthetic fluorescence volume and its instance labels, both (Z, Y, X) per channel.

    Returns ``image`` uint16 ``(channels, Z, Y, X)`` and ``labels`` uint16
    ``(Z, Y, X)`` (0 background, 1..n one id per cell). Channel 0 shows the
    nuclei (what the labels mark); channel 1, when asked for, a dimmer shell
    around each one. Nuclei have radii in ``radius`` pixels (default: from
    1/20 to 1/11 of the plane's smaller side). What makes a global threshold fail and a learned
    segmenter succeed: cells of very different brightness, a strong
    illumination falloff towards one corner on top of a background glow that
    rises towards the other, out-of-focus light from the planes above and
    below, texture inside the nuclei, and noise.
    """
    nz, ny, nx = shape
    rng = np.random.default_rng(seed)
    labels = np.zeros(shape, np.uint16)
    nuclei = np.zeros(shape, np.float32)
    shells = np.zeros(shape, np.float32)
    r_lo, r_hi = radius or (max(3.0, min(ny, nx) / 20), max(4.5, min(ny, nx) / 11))
    # About a quarter of the volume in cells: count from the mean ellipsoid volume.
    mean_volume = 4 / 3 * math.pi * ((r_lo + r_hi) / 2) ** 3 * 0.9
    n_cells = max(4, round(0.32 * nz * ny * nx / mean_volume))
    zz, yy, xx = np.ogrid[:nz, :ny, :nx]
    for cell in range(1, n_cells + 1):
        cz, cy, cx = rng.uniform(0, nz), rng.uniform(0, ny), rng.uniform(0, nx)
        ry, rx = rng.uniform(r_lo, r_hi, size=2)
        rz = (ry + rx) / 2 * rng.uniform(0.7, 1.1)
        angle = rng.uniform(0, math.pi)
        brightness = float(np.exp(rng.uniform(np.log(0.22), 0.0)))
        box = tuple(
            slice(max(0, math.floor(c - 1.5 * r)), min(n, math.ceil(c + 1.5 * r) + 1))
            for c, r, n in ((cz, rz, nz), (cy, max(ry, rx), ny), (cx, max(ry, rx), nx))
        )
        dz, dy, dx = zz[box[0], :, :] - cz, yy[:, box[1], :] - cy, xx[:, :, box[2]] - cx
        u = dy * math.cos(angle) + dx * math.sin(angle)
        v = -dy * math.sin(angle) + dx * math.cos(angle)
        r2 = (dz / rz) ** 2 + (u / ry) ** 2 + (v / rx) ** 2
        inside = (r2 <= 1.0) & (labels[box] == 0)  # the first cell drawn keeps a shared voxel
        labels[box][inside] = cell
        # Brighter towards the rim of the nucleus, as chromatin often is.
        nuclei[box][inside] = brightness * (0.75 + 0.25 * np.sqrt(r2[inside]))
        ring = (r2 > 1.0) & (r2 <= 1.7)
        shells[box][ring] = np.maximum(shells[box][ring], 0.5 * brightness)
    texture = _blur(rng.standard_normal(shape).astype(np.float32), (1.0, 1.2, 1.2))
    texture /= texture.std() + 1e-6
    nuclei *= np.clip(1.0 + 0.35 * texture, 0.2, None)
    # The microscope: a point spread function longer along the optical axis (z).
    nuclei = _blur(nuclei, (1.6, 1.1, 1.1))
    fy, fx = np.meshgrid(np.linspace(0, 1, ny), np.linspace(0, 1, nx), indexing="ij")
    illumination = 0.25 + 0.75 * np.exp(-((fy - 0.15) ** 2 + (fx - 0.1) ** 2) / (2 * 0.45**2))
    glow = 0.28 * np.exp(-((fy - 0.95) ** 2 + (fx - 1.0) ** 2) / (2 * 0.5**2))
    depth = np.linspace(1.0, 0.7, nz, dtype=np.float32)[:, None, None]  # deeper planes are dimmer
    photons = 400.0
    image = np.empty((channels, *shape), np.uint16)
    signals = [nuclei, _blur(shells, (1.6, 1.5, 1.5))][:channels]
    for c, signal in enumerate(signals):
        expected = photons * depth * (signal * illumination + glow) + 12.0
        counts = rng.poisson(expected).astype(np.float32) + rng.normal(100.0, 4.0, shape)
        image[c] = np.clip(counts, 0, 65535).astype(np.uint16)
    return image, labels


# -- OME-NGFF ---------------------------------------------------------------------------------------
def _multiscales(
    name: str, axes: Sequence[Mapping[str, Any]], scale: Sequence[float], levels: int, version: str
) -> list[dict[str, Any]]:
    datasets = []
    for level in range(levels):
        factor = [1.0 if a["type"] != "space" or a["name"] == "z" else 2.0**level for a in axes]
        datasets.append(
            {
                "path": str(level),
                "coordinateTransformations": [
                    {"type": "scale", "scale": [s * f for s, f in zip(scale, factor, strict=True)]}
                ],
            }
        )
    meta: dict[str, Any] = {"name": name, "axes": [dict(a) for a in axes], "datasets": datasets}
    if version == "0.4":
        meta["version"] = "0.4"
    return [meta]


def _ome_attrs(version: str, content: Mapping[str, Any]) -> dict[str, Any]:
    """Group attributes: under ``"ome"`` with a version (0.5), or at the top level (0.4)."""
    if version == "0.5":
        return {"ome": {"version": "0.5", **content}}
    return dict(content)


def _downsample(array: np.ndarray, level: int, *, is_label: bool) -> np.ndarray:
    """Level ``level`` of the pyramid: y and x (the last two axes) halved ``level`` times."""
    out = array
    for _ in range(level):
        y, x = out.shape[-2] // 2 * 2, out.shape[-1] // 2 * 2
        out = out[..., :y, :x]
        if is_label:  # labels are never averaged: one of the four pixels
            out = out[..., ::2, ::2]
        else:
            parts = out[..., ::2, ::2].astype(np.float32) + out[..., 1::2, ::2] + out[..., ::2, 1::2]
            out = ((parts + out[..., 1::2, 1::2]) / 4).astype(array.dtype)
    return out


def write_ome_zarr(
    path: str | os.PathLike[str],
    image: np.ndarray,
    labels: np.ndarray,
    *,
    version: str = "0.5",
    axes: Sequence[Mapping[str, Any]] = AXES,
    scale: Sequence[float] = SCALE,
    image_chunks: Sequence[int] | None = None,
    label_chunks: Sequence[int] | None = None,
    label_name: str = "cells",
    levels: int = 2,
    channel_names: Sequence[str] = CHANNELS,
    compressor: Any = None,
) -> str:
    """Write ``image`` (shaped like ``axes``) and its ``labels`` (the same axes, one channel) as an
    OME-NGFF image with a label image in ``labels/<label_name>``; returns the path.

    ``version="0.5"``: Zarr v3, metadata under ``"ome"`` and arrays naming
    their dimensions. ``"0.4"``: Zarr v2 with ``/``-separated chunk keys and
    no dimension names, as IDR serves its images. Chunks default to one
    plane per chunk for the image and 30 planes per chunk for the labels.
    ``compressor`` (a numcodecs codec, for 0.4) defaults to zarr's own.
    """
    if version not in ("0.4", "0.5"):
        raise ValueError(f"OME-NGFF version must be '0.4' or '0.5', got {version!r}")
    names = [a["name"] for a in axes]
    if image.ndim != len(names) or labels.ndim != len(names):
        raise ValueError(f"image {image.shape} and labels {labels.shape} must have the axes {names}")
    z = names.index("z")
    if image_chunks is None:
        image_chunks = tuple(1 if i < z or i == z else n for i, n in enumerate(image.shape))
    if label_chunks is None:
        label_chunks = tuple(min(30, n) if i == z else 1 if i < z else n for i, n in enumerate(labels.shape))
    zarr_format: Literal[2, 3] = 3 if version == "0.5" else 2

    def array(group: zarr.Group, level: int, data: np.ndarray, chunks: Sequence[int]) -> None:
        chunks = tuple(min(c, n) for c, n in zip(chunks, data.shape, strict=True))
        extra: dict[str, Any] = {}
        if version == "0.5":
            extra["dimension_names"] = names
        else:
            extra["chunk_key_encoding"] = {"name": "v2", "separator": "/"}
            if compressor is not None:
                extra["compressors"] = compressor
        arr = group.create_array(
            str(level), shape=data.shape, chunks=chunks, dtype=data.dtype, fill_value=0, **extra
        )
        arr[...] = data

    root = zarr.open_group(os.fspath(path), mode="w", zarr_format=zarr_format)
    window_max = int(np.percentile(image, 99.9)) if image.size else 1
    omero = {
        "channels": [
            {
                "label": channel_names[c] if c < len(channel_names) else f"channel {c}",
                "color": ["00FF00", "FF00FF", "00FFFF"][c % 3],
                "active": True,
                "window": {"min": 0, "max": 65535, "start": 0, "end": window_max},
            }
            for c in range(image.shape[names.index("c")] if "c" in names else 1)
        ]
    }
    root.attrs.update(
        _ome_attrs(
            version,
            {"multiscales": _multiscales("synthetic cells", axes, scale, levels, version), "omero": omero},
        )
    )
    for level in range(levels):
        array(root, level, _downsample(image, level, is_label=False), image_chunks)
    label_root = root.create_group("labels")
    label_root.attrs.update(_ome_attrs(version, {"labels": [label_name]}))
    group = label_root.create_group(label_name)
    ids = np.unique(labels)
    ids = ids[ids > 0]
    colours = np.random.default_rng(0).integers(64, 256, size=(len(ids), 3))
    image_label: dict[str, Any] = {
        "colors": [
            {"label-value": int(i), "rgba": [*map(int, rgb), 255]}
            for i, rgb in zip(ids, colours, strict=True)
        ],
        "source": {"image": "../../"},
    }
    if version == "0.4":
        image_label["version"] = "0.4"
    group.attrs.update(
        _ome_attrs(
            version,
            {
                "multiscales": _multiscales(label_name, axes, scale, levels, version),
                "image-label": image_label,
            },
        )
    )
    for level in range(levels):
        array(group, level, _downsample(labels, level, is_label=True), label_chunks)
    return os.fspath(path)


def write_synthetic(
    path: str | os.PathLike[str], shape: tuple[int, int, int], *, seed: int, version: str = "0.5"
) -> str:
    """The example's default store: :func:`make_cells` as a (T=1, C=2, Z, Y, X) OME-NGFF image."""
    image, labels = make_cells(shape, seed=seed)
    return write_ome_zarr(path, image[None], labels[None, None], version=version)


# -- reading it back ---------------------------------------------------------------------------------
def _ome(attrs: Mapping[str, Any]) -> Mapping[str, Any]:
    """OME metadata of a group: under ``"ome"`` (0.5) or at the top level (0.4 and before)."""
    inner = attrs.get("ome")
    return inner if isinstance(inner, Mapping) else attrs


def _axis_names(multiscale: Mapping[str, Any]) -> tuple[str, ...]:
    axes = multiscale.get("axes")
    if not axes:
        raise ValueError("this OME-NGFF image has no 'axes' (version 0.3 or older); use 0.4 or later")
    # 0.3 listed names; 0.4 and later list {"name", "type", "unit"} objects.
    return tuple(a if isinstance(a, str) else a["name"] for a in axes)


@dataclass(frozen=True)
class OmeImage:
    """An OME-NGFF image and one of its label images, as insitu geometries sampled along z.

    ``image`` is delivered as ``(C, Y, X)`` per plane (the time point ``t``
    chosen, channels as selected), ``mask`` as ``(Y, X)`` (its channel axis
    dropped); ``dims`` names those axes for each batch label, for transforms
    that take dimension names.
    """

    image: ArrayGeometry
    mask: ArrayGeometry
    dims: dict[str, tuple[str, ...]]
    axes: tuple[str, ...]
    label_name: str
    channel_names: tuple[str, ...]
    scale: tuple[float, ...]


def open_ome(
    store: Store,
    *,
    label: str | None = None,
    level: int = 0,
    channels: Sequence[int] | None = None,
    timepoint: int = 0,
) -> OmeImage:
    """Describe an OME-NGFF image and its label image ``labels/<label>`` (default: the first
    listed) at pyramid ``level``, both sampled along ``z``.

    Raises ValueError naming what is missing: no ``multiscales``, no ``z``
    axis, no ``labels`` group, or a label image whose z/y/x extent differs
    from the image's at that level.
    """
    root = zarr.open_group(store=store, mode="r")
    meta = _ome(dict(root.attrs))
    if "multiscales" not in meta:
        raise ValueError(f"no OME-NGFF 'multiscales' metadata in the group's attributes: {sorted(meta)}")
    multiscale = meta["multiscales"][0]
    axes = _axis_names(multiscale)
    if "z" not in axes:
        raise ValueError(f"the image has no 'z' axis to sample along (axes {list(axes)})")
    datasets = multiscale["datasets"]
    if not 0 <= level < len(datasets):
        raise ValueError(f"level {level} does not exist: the image has {len(datasets)} levels")
    image_path = datasets[level]["path"]
    scale = tuple(
        float(s)
        for t in datasets[level].get("coordinateTransformations", [])
        if t.get("type") == "scale"
        for s in t["scale"]
    )
    try:
        label_group = zarr.open_group(store=store, path="labels", mode="r")
    except (FileNotFoundError, KeyError, zarr.errors.GroupNotFoundError) as exc:
        raise ValueError("the image has no 'labels' group: nothing to train a segmenter on") from exc
    listed = list(_ome(dict(label_group.attrs)).get("labels", []))
    if not listed:
        raise ValueError("the image's 'labels' group lists no label image")
    name = label if label is not None else str(listed[0])
    if name not in listed:
        raise ValueError(f"no label image {name!r}; the image has {listed}")
    label_meta = _ome(dict(zarr.open_group(store=store, path=f"labels/{name}", mode="r").attrs))
    label_multiscale = label_meta["multiscales"][0]
    label_axes = _axis_names(label_multiscale)
    mask_path = f"labels/{name}/{label_multiscale['datasets'][level]['path']}"

    geoms = insitu.open_geometries(
        store,
        [image_path, mask_path],
        sample_dim={image_path: axes.index("z"), mask_path: label_axes.index("z")},
    )
    image, mask = geoms[image_path], geoms[mask_path]
    chosen: dict[str | int, Any] = {}
    if "t" in axes:
        chosen[axes.index("t")] = timepoint
    if "c" in axes:
        n_channels = image.shape[axes.index("c")]
        picked = list(range(n_channels)) if channels is None else [int(c) for c in channels]
        if not all(0 <= c < n_channels for c in picked):
            raise ValueError(f"channels {picked} do not exist: the image has {n_channels}")
        chosen[axes.index("c")] = picked
    image = image.isel(chosen).named("image")
    dropped: dict[str | int, Any] = {label_axes.index(a): 0 for a in ("t", "c") if a in label_axes}
    mask = mask.isel(dropped).named("mask")
    image_dims = tuple(a for a in axes if a not in ("z", "t"))
    mask_dims = tuple(a for a in label_axes if a not in ("z", "t", "c"))
    extent = {a: image.shape[axes.index(a)] for a in ("z", "y", "x") if a in axes}
    label_extent = {a: mask.shape[label_axes.index(a)] for a in ("z", "y", "x") if a in label_axes}
    if extent != label_extent:
        raise ValueError(
            f"label image {name!r} has extent {label_extent} at level {level}, the image {extent}"
        )
    omero = meta.get("omero", {}).get("channels", [])
    channel_names = tuple(str(c.get("label", i)) for i, c in enumerate(omero))
    return OmeImage(
        image=image,
        mask=mask,
        dims={"image": image_dims, "mask": mask_dims},
        axes=axes,
        label_name=name,
        channel_names=channel_names,
        scale=scale,
    )
