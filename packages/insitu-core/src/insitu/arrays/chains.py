"""Each array's chunk-transform chain: transforms given per array or for all, configurations
resolved through the registry, CF decoding first where the array carries CF attributes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from insitu.arrays.geometry import ArrayGeometry
from insitu.arrays.transform_config import bind_to_array, transforms_from_config
from insitu.arrays.transforms import ChunkTransform
from insitu.errors import ConfigError


@dataclass(frozen=True)
class ChunkChains:
    """Chains by array path, and the raw value that marks a bad chunk of an integer array whose
    CF decoding turns it into NaN (``error_fills``)."""

    transforms: dict[str, tuple[ChunkTransform, ...]] = field(default_factory=dict)
    error_fills: dict[str, Any] = field(default_factory=dict)

    def of(self, path: str) -> tuple[ChunkTransform, ...]:
        """The chain of the array at ``path``; empty when it has none."""
        return self.transforms.get(path, ())


def chunk_chains(
    spec: Sequence[ChunkTransform] | Mapping[str, Sequence[ChunkTransform]],
    cf_decode: bool | Mapping[str, bool],
    arrays: Sequence[ArrayGeometry],
    labels: Sequence[ArrayGeometry],
) -> ChunkChains:
    """The chains of ``arrays`` (pooled arrays and static fields): ``spec`` as given (mapping
    keys may be array paths, names or labels), with CF decoding prepended unless ``cf_decode``
    turns it off (for all, or ``{array: bool}``)."""
    given = _given_chains(spec, arrays, labels)
    return _with_cf_decoding(given, arrays, cf_decode, labels)


def _given_chains(
    spec: Sequence[ChunkTransform] | Mapping[str, Sequence[ChunkTransform]],
    arrays: Sequence[ArrayGeometry],
    labels: Sequence[ArrayGeometry],
) -> dict[str, tuple[ChunkTransform, ...]]:
    """Configurations (``{"name": ...}``) resolved through the registry, and transforms that
    define ``bind(geom)`` bound to each array they apply to."""
    geoms = {g.path: g for g in arrays}
    if isinstance(spec, Mapping):
        chains = {
            p: transforms_from_config(v) for p, v in by_path(spec, arrays, labels, "chunk_transforms").items()
        }
    else:
        shared = transforms_from_config(spec)
        chains = dict.fromkeys(geoms, shared) if shared else {}
    out = {}
    for path, chain in chains.items():
        for t in chain:
            if not callable(t) and not hasattr(t, "bind"):
                raise ConfigError(f"chunk transform {t!r} is not callable")
        out[path] = tuple(bind_to_array(t, geoms[path]) for t in chain)
    return out


def _with_cf_decoding(
    transforms: dict[str, tuple[ChunkTransform, ...]],
    arrays: Sequence[ArrayGeometry],
    cf_decode: bool | Mapping[str, bool],
    labels: Sequence[ArrayGeometry],
) -> ChunkChains:
    from insitu.arrays.cf import cf_transform_for

    if isinstance(cf_decode, Mapping):
        bad = {k: v for k, v in cf_decode.items() if not isinstance(v, (bool, np.bool_))}
        if bad:
            raise ConfigError(f"cf_decode values must be True or False, got {bad}")
        chosen = by_path(cf_decode, arrays, labels, "cf_decode")
        enabled = {g.path: bool(chosen.get(g.path, True)) for g in arrays}
    elif isinstance(cf_decode, (bool, np.bool_)):
        enabled = {g.path: bool(cf_decode) for g in arrays}
    else:
        raise ConfigError(f"cf_decode must be True, False or {{array: bool}}, got {cf_decode!r}")
    out = dict(transforms)
    fills: dict[str, Any] = {}
    for g in arrays:
        if not enabled[g.path]:
            continue
        decode = cf_transform_for(g.metadata, name=g.name)
        if decode is None:
            continue
        out[g.path] = (decode, *transforms.get(g.path, ()))
        if decode.encoding.fill_values and g.dtype.kind not in "fc":
            fills[g.path] = decode.encoding.fill_values[0]
    return ChunkChains(out, fills)


def check_nan_fill(arrays: Sequence[ArrayGeometry], chains: ChunkChains) -> None:
    """Refuse ``on_bad_chunk="nan"`` for integer arrays whose chain does not decode a marker to NaN."""
    ints = {
        g.name: str(g.dtype) for g in arrays if g.dtype.kind not in "fc" and g.path not in chains.error_fills
    }
    if ints:
        raise ConfigError(
            f"on_bad_chunk='nan' cannot mark bad chunks of integer array(s) {ints}: their samples "
            "would hold the fill value, which looks like data (and no CF fill value decodes to NaN); "
            "use on_bad_chunk='skip' (or 'raise')"
        )


def by_path(
    spec: Mapping[str, Any], arrays: Sequence[ArrayGeometry], labels: Sequence[ArrayGeometry], what: str
) -> dict[str, Any]:
    """A per-array mapping keyed by array path; its keys may be paths, names or labels. A name two
    arrays share (``"0"`` of an OME-NGFF image and of its labels) is refused, never applied to both."""
    paths = {g.path for g in arrays}
    out: dict[str, Any] = {}
    for key, value in spec.items():
        found = sorted(
            {g.path for g in arrays if key in (g.path, g.name)} | {g.path for g in labels if g.label == key}
        )
        if not found:
            known = sorted({g.name for g in arrays} | {g.label for g in labels} | paths)
            raise ConfigError(f"{what} names unknown array(s) [{key!r}]; arrays are {known}")
        if len(found) > 1:
            raise ConfigError(
                f"{what} key {key!r} names {len(found)} arrays (paths {found}); key it by path to say which"
            )
        if found[0] in out:
            raise ConfigError(f"{what} gives array {found[0]!r} twice (as {key!r} and another key)")
        out[found[0]] = value
    return out
