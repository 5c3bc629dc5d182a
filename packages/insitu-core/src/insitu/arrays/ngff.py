"""OME-NGFF images: a ``multiscales`` group's levels as geometries with their physical spacing.

An OME-NGFF image group (versions 0.4, Zarr v2, attributes ``multiscales``; and
0.5, Zarr v3, attributes ``ome.multiscales``) lists its resolution levels, each
an array with a ``scale`` coordinate transformation (the physical size of one
index per axis) and the axes' names. :func:`open_ome_ngff` opens one level as
an :class:`~insitu.arrays.geometry.ArrayGeometry` carrying that ``spacing`` and
those dimension names, so an image and its labels (``labels/<name>``, an image
group of its own, often at a coarser level) sampled together in patches are
co-registered by their spacings (:mod:`insitu.arrays.coregistration`). A level
is chosen by number, or by the resolution wanted: the level whose spacing is
nearest it along the axes given.

Translations (the half-index shifts of some pyramids) are not applied: levels
are aligned at index 0, as integer downsampling aligns them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import zarr
from zarr.abc.store import Store

from insitu.arrays.discovery import open_geometries
from insitu.arrays.geometry import ArrayGeometry
from insitu.errors import ConfigError, MetadataError

__all__ = ["ngff_levels", "open_ome_ngff"]


def open_ome_ngff(
    store: Store,
    path: str = "",
    *,
    level: int | None = None,
    resolution: Mapping[str, float] | None = None,
    sample_dim: str | None = None,
) -> ArrayGeometry:
    """One level of the OME-NGFF image at ``path`` (a group with ``multiscales`` metadata): level
    0 by default, level ``level``, or the level nearest ``resolution`` (``{"y": 0.65, "x":
    0.65}``, physical sizes of one index, in the axes' units). ``sample_dim`` is the axis batches
    are sampled along (default ``t`` when the image has one, else ``z``, else the first).

    The geometry carries the level's ``spacing`` and the axes' names; its name is
    ``<path>/<level path>``. A group without multiscales, or a level or axis that does not
    exist, is a ConfigError naming it."""
    levels = ngff_levels(store, path, sample_dim=sample_dim)
    if level is not None and resolution is not None:
        raise ConfigError("give level= or resolution=, not both")
    if resolution is not None:
        return _nearest(levels, resolution, path)
    index = 0 if level is None else level
    if not isinstance(index, int) or not -len(levels) <= index < len(levels):
        raise ConfigError(
            f"OME-NGFF image {path or '/'!r} has levels 0..{len(levels) - 1}; got level={level!r}"
        )
    return levels[index]


def ngff_levels(store: Store, path: str = "", *, sample_dim: str | None = None) -> list[ArrayGeometry]:
    """Every level of the OME-NGFF image at ``path``, finest first (see :func:`open_ome_ngff`)."""
    meta = _multiscales(store, path)
    axes = [_axis_name(a) for a in meta.get("axes", [])]
    datasets = meta.get("datasets")
    if not isinstance(datasets, list) or not datasets:
        raise MetadataError(f"OME-NGFF image {path or '/'!r}: multiscales lists no datasets")
    sample = _sample_axis(axes, sample_dim, path)
    out = []
    for entry in datasets:
        level_path = str(entry.get("path", ""))
        spacing = _scale(entry, meta, len(axes), path)
        found = open_geometries(store, [level_path], sample_dim=sample, path=path)
        geom = next(iter(found.values()))
        if len(geom.shape) != len(axes):
            raise MetadataError(
                f"OME-NGFF image {path or '/'!r}: level {level_path!r} has {len(geom.shape)} axes, the "
                f"multiscales metadata {len(axes)} ({axes})"
            )
        name = f"{path}/{level_path}" if path else level_path
        out.append(replace(geom, name=name, dimension_names=tuple(axes), spacing=spacing))
    return out


def _multiscales(store: Store, path: str) -> dict[str, Any]:
    try:
        attrs = dict(zarr.open_group(store=store, path=path, mode="r").attrs)
    except Exception as exc:  # zarr raises several kinds for a missing or broken group
        raise ConfigError(f"no Zarr group at {path or '/'!r} to read OME-NGFF metadata from: {exc}") from exc
    ome = attrs.get("ome")
    found = ome.get("multiscales") if isinstance(ome, Mapping) else attrs.get("multiscales")
    if not isinstance(found, list) or not found or not isinstance(found[0], Mapping):
        raise ConfigError(
            f"group {path or '/'!r} has no OME-NGFF multiscales metadata (attributes: {sorted(attrs)}); "
            "open its arrays with open_geometries instead"
        )
    return dict(found[0])


def _axis_name(axis: Any) -> str:
    if isinstance(axis, Mapping) and isinstance(axis.get("name"), str):
        return str(axis["name"])
    if isinstance(axis, str):  # version 0.3 listed names only
        return axis
    raise MetadataError(f"OME-NGFF axis {axis!r} has no name")


def _sample_axis(axes: list[str], sample_dim: str | None, path: str) -> int:
    if sample_dim is not None:
        if sample_dim not in axes:
            raise ConfigError(f"OME-NGFF image {path or '/'!r} has axes {axes}; no sample_dim {sample_dim!r}")
        return axes.index(sample_dim)
    for name in ("t", "z"):
        if name in axes:
            return axes.index(name)
    return 0


def _scale(entry: Mapping[str, Any], meta: Mapping[str, Any], ndim: int, path: str) -> tuple[float, ...]:
    """A level's spacing: its own ``scale`` transformation times the image's (when given)."""
    spacing = [1.0] * ndim
    for transforms in (entry.get("coordinateTransformations"), meta.get("coordinateTransformations")):
        for t in transforms or []:
            if isinstance(t, Mapping) and t.get("type") == "scale":
                values = t.get("scale")
                if not isinstance(values, list) or len(values) != ndim:
                    raise MetadataError(
                        f"OME-NGFF image {path or '/'!r}: scale {values!r} does not give one number per axis ({ndim})"
                    )
                spacing = [s * float(v) for s, v in zip(spacing, values, strict=True)]
    return tuple(spacing)


def _nearest(levels: list[ArrayGeometry], resolution: Mapping[str, float], path: str) -> ArrayGeometry:
    """The level whose spacing is nearest ``resolution`` (by log ratio, summed over the axes
    given; ties go to the finer level)."""
    names = levels[0].dimension_names or ()
    unknown = [d for d in resolution if d not in names]
    bad = {d: v for d, v in resolution.items() if not (isinstance(v, (int, float)) and v > 0)}
    if bad:
        raise ConfigError(f"resolution must give positive sizes of one index, got {bad}")
    if unknown:
        raise ConfigError(
            f"OME-NGFF image {path or '/'!r} has axes {list(names)}; resolution names {unknown}"
        )

    def distance(g: ArrayGeometry) -> float:
        spacing = g.spacing or (1.0,) * len(names)
        return sum(abs(math.log(spacing[names.index(d)] / float(v))) for d, v in resolution.items())

    return min(levels, key=distance)
