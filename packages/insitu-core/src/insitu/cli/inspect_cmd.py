"""``insitu inspect``: what a store holds, and how insitu would batch it.

Reads metadata, the coordinate arrays and a few chunks (to measure the
compression ratio); never the whole store.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from insitu.cli.common import add_store_arguments, open_store_from_args, print_table

if TYPE_CHECKING:
    # numpy and zarr are imported by the functions that read a store: the command is registered
    # (and `insitu --help` printed) without them.
    import zarr

    from insitu.arrays.transforms import SlabSpec

#: Chunks read per array to estimate its compression ratio.
SAMPLED_CHUNKS = 3
#: block_chunks values whose memory the report lists.
BLOCK_CHUNKS = (1, 4, 16, 64)
#: Attributes shown in the CF column.
CF_ATTRIBUTES = (
    "units",
    "calendar",
    "scale_factor",
    "add_offset",
    "_FillValue",
    "missing_value",
    "valid_min",
    "valid_max",
    "valid_range",
    "_Unsigned",
    "long_name",
    "standard_name",
)


class InspectCommand:
    """insitu inspect URL_OR_PATH: groups, arrays, dims, shapes, dtypes, chunking, sharding,
    codecs and their sampled compression ratio, CF attributes, coordinates, which arrays insitu
    would batch along which dimension (and why the others are skipped), and the pool memory
    each block_chunks needs."""

    help = "describe a store: arrays, chunking, codecs, coordinates, what insitu would batch"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add the store arguments, ``--path``, ``--sample-dim`` and ``--json``."""
        add_store_arguments(parser)
        parser.add_argument("--path", default="", help="a group inside the store")
        parser.add_argument(
            "--sample-dim", default=None, help="the sample dimension (default: insitu's choice)"
        )
        parser.add_argument("--json", action="store_true", help="print JSON instead of tables")

    def run(self, args: argparse.Namespace) -> int:
        """Print the store's description (tables, or JSON with ``--json``); exit status 0."""
        store = open_store_from_args(args)
        report = inspect_store(store, path=args.path, sample_dim=args.sample_dim)
        if args.json:
            print(json.dumps(report, indent=1, default=str))
        else:
            print(render(report))
        return 0


def inspect_store(store: Any, *, path: str = "", sample_dim: str | None = None) -> dict[str, Any]:
    """The report ``insitu inspect`` prints, as a JSON-able dict.

    Raises ConfigError naming an unknown ``sample_dim`` (and the dimensions
    that exist), MetadataError naming a metadata document zarr cannot read.
    """
    import zarr

    import insitu
    from insitu.plan.memory_model import arena_bytes

    members = _group_members(store, path)
    groups = [path or "/"] + [
        f"{path}/{name}".lstrip("/") for name, m in members if isinstance(m, zarr.Group)
    ]
    arrays = {name: m for name, m in members if isinstance(m, zarr.Array)}
    try:
        geoms = insitu.open_geometries(store, sample_dim=sample_dim, path=path, include_static=True)
    except insitu.ConfigError as exc:
        if sample_dim is not None or isinstance(exc, insitu.MetadataError):
            raise  # something the user typed, or a broken store: the command fails
        # Nothing insitu would batch (no numeric array of 2+ dims): the rest is still worth showing.
        return _report(store, groups, arrays, None, {"error": str(exc)}, {}, {})
    batching: dict[str, Any] = {
        "sample_dim": geoms.sample_dim,
        "chosen_by_default": geoms.chosen_by_default,
        "arrays": {
            n: ("static" if g.static else g.sample_dim or f"axis {g.sample_axis}") for n, g in geoms.items()
        },
        "skipped": geoms.skipped,
    }
    moving = [g for g in geoms.values() if not g.static]
    # A block never holds more chunks than the array has along the sample dimension.
    specs = [(_decoded_spec(g), g.n_slabs) for g in moving]
    pool = {str(k): sum(arena_bytes(spec, min(k, n)) for spec, n in specs) for k in BLOCK_CHUNKS}
    coords = {
        dim: {"size": int(v.size), "first": _show(v[0]), "last": _show(v[-1]), "dtype": str(v.dtype)}
        for dim, v in geoms.coords.items()
    }
    return _report(store, groups, arrays, geoms, batching, pool, coords)


def _group_members(store: Any, path: str) -> list[tuple[str, Any]]:
    """Every member of the group at ``path``, with metadata errors naming their document."""
    import zarr

    from insitu.errors import MetadataError
    from insitu.store.loop import run_sync
    from insitu.store.metadata import blame_metadata, is_metadata_failure

    try:
        root = zarr.open_group(store=store, path=path, mode="r")
        return list(root.members(max_depth=None))
    except FileNotFoundError as exc:  # zarr's GroupNotFoundError: a directory that is not Zarr
        where = f"path {path!r} of " if path else ""
        raise MetadataError(f"no Zarr group at {where}{store}: {exc}") from exc
    except Exception as exc:
        if not is_metadata_failure(exc):
            raise
        raise run_sync(blame_metadata(store, path, exc)) from exc


def _report(
    store: Any,
    groups: list[str],
    arrays: Mapping[str, zarr.Array],
    geoms: Mapping[str, Any] | None,
    batching: dict[str, Any],
    pool: dict[str, int],
    coords: dict[str, Any],
) -> dict[str, Any]:
    geoms = geoms or {}
    return {
        "store": repr(store),
        "groups": groups,
        "arrays": {name: _describe(arr, geoms.get(name)) for name, arr in sorted(arrays.items())},
        "coordinates": coords,
        "batching": batching,
        "pool_bytes_per_block_chunks": pool,
    }


def _describe(arr: zarr.Array, geom: Any) -> dict[str, Any]:
    """One array: its layout, sizes, dtypes on disk and as delivered, fill values, its role."""
    import numpy as np

    from insitu.arrays.cf import cf_encoding, cf_fill_value

    meta: dict[str, Any] = dict(arr.metadata.to_dict())
    attrs: dict[str, Any] = dict(arr.attrs)
    dims = meta.get("dimension_names") or attrs.get("_ARRAY_DIMENSIONS")
    cf = {k: attrs[k] for k in CF_ATTRIBUTES if k in attrs}
    if "_FillValue" in cf:  # base64 on v3 for float data: show the number it encodes
        cf["_FillValue"] = _show(cf_fill_value(meta, name=arr.name))
    shards = getattr(arr, "shards", None)
    grid = [math.ceil(s / c) for s, c in zip(arr.shape, arr.chunks, strict=True)]
    encoding = cf_encoding(meta, name=arr.name)
    delivered = encoding.default_dtype() if encoding is not None else np.dtype(arr.dtype)
    if geom is None:
        role, along = "not batched", None
    elif geom.static:
        role, along = "static", None
    else:
        role, along = "samples", geom.n_slabs
    return {
        "dims": list(dims) if dims else None,
        "shape": list(arr.shape),
        "dtype": str(arr.dtype),
        "dtype_delivered": str(delivered),
        "chunks": list(arr.chunks),
        "shards": list(shards) if shards else None,
        "chunk_count": math.prod(grid),
        "chunk_count_along_sample_dim": along,
        "stored_bytes": int(arr.nbytes_stored()),
        "decoded_bytes": int(arr.nbytes),
        "delivered_bytes": int(arr.size) * delivered.itemsize,
        "zarr_format": meta.get("zarr_format"),
        "codecs": _codecs(meta),
        "fill_value": _show(arr.fill_value),
        "cf_fill_value": _show(cf_fill_value(meta, name=arr.name)),
        "compression_ratio": _compression_ratio(arr),
        "role": role,
        "cf": cf,
    }


def _codecs(meta: Mapping[str, Any]) -> list[str]:
    if "codecs" in meta:  # v3: a list of {name, configuration}
        out = []
        for c in meta["codecs"]:
            name = c["name"] if isinstance(c, Mapping) else str(c)
            if name == "sharding_indexed":
                inner = c.get("configuration", {}).get("codecs", [])
                name += "[" + ",".join(i["name"] if isinstance(i, Mapping) else str(i) for i in inner) + "]"
            out.append(name)
        return out
    parts = [f.get("id", str(f)) if isinstance(f, Mapping) else str(f) for f in meta.get("filters") or ()]
    comp = meta.get("compressor")
    if comp:
        parts.append(comp.get("id", str(comp)) if isinstance(comp, Mapping) else str(comp))
    return parts


def _compression_ratio(arr: zarr.Array) -> float | None:
    """Decoded over stored bytes of up to :data:`SAMPLED_CHUNKS` stored objects (chunks or shards)."""
    import numpy as np
    from zarr.core.buffer import default_buffer_prototype

    from insitu.store.loop import run_sync

    store, grid = (
        arr.store,
        [math.ceil(s / c) for s, c in zip(arr.shape, arr.shards or arr.chunks, strict=True)],
    )
    if not grid or 0 in grid:
        return None
    key_of = arr.metadata.encode_chunk_key
    picks = {
        tuple(int(i) for i in np.unravel_index(k, grid))
        for k in np.linspace(0, math.prod(grid) - 1, SAMPLED_CHUNKS).astype(int)
    }
    stored = decoded = 0
    per_object = math.prod(arr.shards or arr.chunks) * arr.dtype.itemsize
    for coords in picks:
        key = f"{arr.path}/{key_of(coords)}" if arr.path else key_of(coords)
        raw = run_sync(store.get(key, prototype=default_buffer_prototype()))
        if raw is None:
            continue
        stored += len(raw)
        decoded += per_object
    return round(decoded / stored, 2) if stored else None


def _decoded_spec(geom: Any) -> SlabSpec:
    """One pooled slab of ``geom`` as the dataset holds it by default (CF-decoded)."""
    from insitu.arrays.cf import cf_transform_for
    from insitu.arrays.transforms import output_spec

    decode = cf_transform_for(geom.metadata, name=geom.name)
    return output_spec(geom, [decode] if decode is not None else [])


def _chunk_counts(a: Mapping[str, Any]) -> str:
    along = a["chunk_count_along_sample_dim"]
    return str(a["chunk_count"]) if along is None else f"{along} along / {a['chunk_count']}"


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _show(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.datetime64):
        return str(np.datetime_as_string(value, unit="s"))
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)


def render(report: Mapping[str, Any]) -> str:
    """The report as text tables."""
    lines = [f"store: {report['store']}", f"groups: {', '.join(report['groups'])}", ""]
    rows = [
        [
            name,
            " x ".join(map(str, a["shape"])),
            ",".join(a["dims"] or ["?"]),
            "x".join(map(str, a["chunks"])),
            _chunk_counts(a),
            "x".join(map(str, a["shards"])) if a["shards"] else "-",
            "+".join(a["codecs"]) or "-",
            f"{a['compression_ratio']:.2f}" if a["compression_ratio"] else "-",
            _size(a["stored_bytes"]),
            _size(a["decoded_bytes"]),
        ]
        for name, a in report["arrays"].items()
    ]
    lines += print_table(
        ["array", "shape", "dims", "chunks", "n chunks", "shards", "codecs", "ratio", "stored", "decoded"],
        rows,
    )
    rows = [
        [
            name,
            a["dtype"] if a["dtype"] == a["dtype_delivered"] else f"{a['dtype']} -> {a['dtype_delivered']}",
            a["fill_value"],
            "-" if a["cf_fill_value"] is None else a["cf_fill_value"],
            a["role"],
            ", ".join(f"{k}={v}" for k, v in a["cf"].items() if k not in ("long_name", "standard_name"))
            or "-",
        ]
        for name, a in report["arrays"].items()
    ]
    lines.append("")
    lines += print_table(
        ["array", "dtype (stored -> delivered)", "fill_value", "_FillValue", "role", "CF"], rows
    )
    coords = report["coordinates"]
    if coords:
        lines += ["", "coordinates:"]
        lines += print_table(
            ["dim", "size", "first", "last", "dtype"],
            [[d, c["size"], c["first"], c["last"], c["dtype"]] for d, c in coords.items()],
        )
    b = report["batching"]
    lines.append("")
    if "error" in b:
        lines.append(f"batching: {b['error']}")
    else:
        how = "chosen by default" if b["chosen_by_default"] else "as given"
        lines.append(f"batching: sample dimension {b['sample_dim']!r} ({how})")
        for name, role in b["arrays"].items():
            lines.append(
                f"  {name}: {'static (read once, in every batch)' if role == 'static' else 'samples along ' + str(role)}"
            )
        for name, why in b["skipped"].items():
            lines.append(f"  {name}: skipped ({why})")
    if report["pool_bytes_per_block_chunks"]:
        lines.append("")
        lines.append(
            "pool memory for one block of chunks (CF-decoded, at most the chunks that exist; "
            "before read-ahead and other transforms):"
        )
        for k, n in report["pool_bytes_per_block_chunks"].items():
            lines.append(f"  block_chunks={k:<4} {n / 2**20:10.1f} MiB")
    return "\n".join(lines)
