"""Which metadata document a Zarr parsing error came from (store floor).

zarr reports a truncated ``zarr.json`` as ``Invalid control character at:
line 1 column 37`` and an unknown ``data_type`` as ``No Zarr data type found
that matches 'int17'``, naming neither the file nor the array. When opening a
group or its arrays fails that way, :func:`blame_metadata` reads the group's
metadata documents one by one to find the one at fault.
"""

from __future__ import annotations

import json
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype

from insitu.errors import InSituError, MetadataError

#: Metadata documents of Zarr v3 (``zarr.json``) and v2 (the rest).
METADATA_NAMES = ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")

# What zarr raises for a document it cannot parse or interpret: json.JSONDecodeError and
# unknown data types are ValueErrors, a missing or mistyped field a KeyError or TypeError.
PARSE_ERRORS = (ValueError, TypeError, KeyError)


def is_metadata_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (raised while zarr opened nodes) is zarr failing to read a document.

    insitu's own errors and "not found" (a FileNotFoundError, or a KeyError on
    some stores) are not: they already say what they mean.
    """
    return isinstance(exc, (ValueError, TypeError)) and not isinstance(exc, InSituError)


async def blame_metadata(store: Store, path: str, exc: BaseException) -> MetadataError:
    """A MetadataError naming the document under ``path`` that zarr could not read, and why.

    Lists the store when it can; otherwise (or when every document parses
    here) the message names the group and zarr's own reason.
    """
    for key in await _metadata_keys(store, path):
        raw = await store.get(key, prototype=default_buffer_prototype())
        if raw is None:
            continue
        try:
            doc = json.loads(raw.to_bytes())
        except ValueError as bad:  # JSONDecodeError, or bytes that are not UTF-8
            return MetadataError(f"{key}: not valid JSON ({bad}); the file is truncated or corrupt", key)
        if not isinstance(doc, dict):
            return MetadataError(f"{key}: expected a JSON object, got {type(doc).__name__}", key)
        problem = _array_metadata_problem(key, doc)
        if problem is not None:
            return MetadataError(f"array {_node_of(key)!r} ({key}): {problem}", key)
    where = f"group {path!r}" if path else "the store's root group"
    return MetadataError(f"cannot read the Zarr metadata of {where}: {exc}")


async def _metadata_keys(store: Store, path: str) -> list[str]:
    prefix = f"{path.strip('/')}/" if path else ""
    try:
        keys = [k async for k in store.list_prefix(prefix)]
    except (NotImplementedError, OSError):  # a store that cannot list: nothing to blame by name
        return []
    # Shallow documents first: a group's own metadata is read before its members'.
    found = [k for k in keys if k.rsplit("/", 1)[-1] in METADATA_NAMES]
    return sorted(found, key=lambda k: (k.count("/"), k))


def _array_metadata_problem(key: str, doc: dict[str, Any]) -> str | None:
    """Why zarr cannot interpret an array's metadata document, or None (not an array, or fine)."""
    from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata

    name = key.rsplit("/", 1)[-1]
    try:
        if name == "zarr.json" and doc.get("node_type") == "array":
            ArrayV3Metadata.from_dict(dict(doc))
        elif name == ".zarray":
            ArrayV2Metadata.from_dict(dict(doc))
    except PARSE_ERRORS as bad:
        return f"missing field {bad}" if isinstance(bad, KeyError) else str(bad)
    return None


def _node_of(key: str) -> str:
    node = key.rsplit("/", 1)[0] if "/" in key else ""
    return node or "/"
