"""Store keys of stored chunks (or shards), from the array's chunk key encoding."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def chunk_key_encoder(metadata: Mapping[str, Any], array_path: str) -> Any:
    """Return ``encode(coords) -> store key`` for the stored objects of an array."""
    prefix = f"{array_path.strip('/')}/" if array_path.strip("/") else ""
    if int(metadata.get("zarr_format", 3)) == 2:
        sep = metadata.get("dimension_separator") or "."
        return lambda coords: prefix + (sep.join(map(str, coords)) if coords else "0")
    enc = metadata.get("chunk_key_encoding") or {"name": "default"}
    name = enc.get("name", "default") if isinstance(enc, Mapping) else str(enc)
    cfg = (enc.get("configuration") or {}) if isinstance(enc, Mapping) else {}
    if name == "v2":
        sep = cfg.get("separator", ".")
        return lambda coords: prefix + (sep.join(map(str, coords)) if coords else "0")
    if name != "default":
        raise ValueError(f"unknown chunk key encoding {name!r}")
    sep = cfg.get("separator", "/")
    # One format per number of dimensions: a key is made per chunk read, and formatting makes no
    # list for the garbage collector to count, as joining a list of the parts would.
    formats: dict[int, str] = {}

    def encode(coords: Sequence[int]) -> str:
        fmt = formats.get(len(coords))
        if fmt is None:
            fmt = formats[len(coords)] = sep.join([f"{prefix}c", *(["{}"] * len(coords))])
        return fmt.format(*coords)

    return encode
