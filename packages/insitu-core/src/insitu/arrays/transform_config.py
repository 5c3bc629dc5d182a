"""Transforms named in configuration: ``{"name": "regrid", "target": "1.5deg"}`` -> a transform.

Transform plugins register classes under a name (``insitu_register_transforms``);
a configuration names one and gives its keyword arguments. Names match the
registered ones ignoring case and underscores, so ``"random_crop"`` finds
``RandomCrop``. A list of configurations is a chain.

A chunk transform may also define ``bind(geom) -> transform``: the dataset
calls it once per array with that array's geometry (coordinates and
selection included), so a transform configured without knowing the array
(a ``Regrid`` to "1.5deg" reads its source grid from the array's
coordinates) is completed for each array it is applied to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from insitu.arrays.geometry import ArrayGeometry
from insitu.errors import ConfigError
from insitu.plugins.registry import get_registry


def transform_from_config(config: Mapping[str, Any] | Any) -> Any:
    """The transform a configuration names: ``{"name": ..., **keyword_arguments}``.

    Anything that is not a mapping (a transform object already) is returned
    unchanged. Raises ConfigError naming an unknown transform (and listing the
    registered ones) or arguments the transform refuses."""
    if not isinstance(config, Mapping):
        return config
    if "name" not in config or not isinstance(config["name"], str):
        raise ConfigError(f"a transform configuration needs a 'name' string, got {dict(config)!r}")
    options = {k: v for k, v in config.items() if k != "name"}
    registered = get_registry().entries("transforms")
    wanted = _key(config["name"])
    matches = [name for name in registered if _key(name) == wanted]
    if not matches:
        raise ConfigError(
            f"unknown transform {config['name']!r}; registered transforms: {sorted(registered)} "
            "(transform packages register theirs: pip install insitu-transforms)"
        )
    factory = registered[matches[0]].obj
    factory = getattr(factory, "insitu_target", factory)
    try:
        return factory(**options)
    except TypeError as exc:
        raise ConfigError(f"transform {config['name']!r} does not take {options!r}: {exc}") from exc


def transforms_from_config(configs: Sequence[Mapping[str, Any] | Any]) -> list[Any]:
    """Each entry of a list through :func:`transform_from_config`."""
    if isinstance(configs, (str, bytes, Mapping)):
        raise ConfigError(f"expected a list of transform configurations, got {configs!r}")
    return [transform_from_config(c) for c in configs]


def bind_to_array(transform: Any, geom: ArrayGeometry) -> Any:
    """``transform.bind(geom)`` when the transform defines it, else the transform itself."""
    bind = getattr(transform, "bind", None)
    if bind is None:
        return transform
    bound = bind(geom)
    if not callable(bound):
        raise ConfigError(
            f"{type(transform).__name__}.bind({geom.name!r}) returned {bound!r}, not a transform"
        )
    return bound


def _key(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


__all__ = ["bind_to_array", "transform_from_config", "transforms_from_config"]
