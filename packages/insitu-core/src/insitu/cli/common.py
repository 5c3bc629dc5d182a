"""What the subcommands share: opening a store from the command line, and plain-text tables."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """``URL_OR_PATH`` and ``--storage-options JSON``."""
    parser.add_argument("url", metavar="URL_OR_PATH", help="the store: a path or URL")
    parser.add_argument(
        "--storage-options",
        default=None,
        metavar="JSON",
        help="store options in the fsspec spelling, e.g. '{\"anon\": true}'",
    )


def open_store_from_args(args: argparse.Namespace) -> Any:
    """The store ``args.url`` names, with ``--storage-options`` parsed as JSON."""
    import insitu

    options: dict[str, Any] = {}
    if args.storage_options:
        try:
            parsed = json.loads(args.storage_options)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--storage-options is not JSON ({exc}): {args.storage_options!r}") from None
        if not isinstance(parsed, dict):
            raise ValueError(f"--storage-options must be a JSON object, got {args.storage_options!r}")
        options["storage_options"] = parsed
    return insitu.open_store(args.url, **options)


def print_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Lines of a left-aligned table (a header, a rule, the rows)."""
    cells = [[str(c) for c in header], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    out = ["  ".join(c.ljust(w) for c, w in zip(cells[0], widths, strict=True)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells[1:]]
    return out
