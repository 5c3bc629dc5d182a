"""``insitu check-transform``: the transform checker from a shell (registered by this package)."""

from __future__ import annotations

import argparse
import importlib
import json
from typing import Any

from insitu.plugin_api import ConfigError


class CheckTransformCommand:
    """insitu check-transform TRANSFORM URL_OR_PATH LABEL: run a chunk transform on the first chunk
    of an array, check the output against what it declares (out_spec), time it against reading the
    chunk, and say whether it lets the engine's decode threads run side by side.

    TRANSFORM is a configuration, '{"name": "cast", "dtype": "float16"}' (a registered transform
    and its arguments), or an import path, 'my_package.module:my_transform' (an object, or a class
    or factory called without arguments). Exit status 1 when the check finds a problem."""

    help = "check a chunk transform on one real chunk: declared output, cost, GIL release"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add TRANSFORM, URL_OR_PATH (with ``--storage-options``) and LABEL, and the ``--path``,
        ``--repeats``, ``--no-threads`` and ``--json`` options."""
        from insitu.plugin_api import add_store_arguments

        parser.add_argument("transform", metavar="TRANSFORM", help="a JSON configuration or module:attribute")
        add_store_arguments(parser)
        parser.add_argument("label", metavar="LABEL", help="the array to read a chunk of")
        parser.add_argument("--path", default="", help="the group inside the store that holds LABEL")
        parser.add_argument("--repeats", type=int, default=5, help="timed runs (median reported)")
        parser.add_argument("--no-threads", action="store_true", help="skip the two-thread measurement")
        parser.add_argument("--json", action="store_true", help="print JSON")

    def run(self, args: argparse.Namespace) -> int:
        """Check the transform and print the report; exit status 1 when it finds a problem."""
        from insitu.plugin_api import open_store_from_args
        from insitu_transforms.checker import check_transform

        transform = load_transform(args.transform)
        label = f"{args.path.strip('/')}/{args.label}" if args.path.strip("/") else args.label
        report = check_transform(
            transform,
            open_store_from_args(args),
            label,
            repeats=args.repeats,
            measure_threads=not args.no_threads,
        )
        print(report.to_json() if args.json else str(report))
        return 0 if report.ok else 1


def load_transform(spec: str) -> Any:
    """A transform from a JSON configuration or a ``module:attribute`` import path."""
    from insitu.plugin_api import transform_from_config

    text = spec.strip()
    if text.startswith("{"):
        try:
            config = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"TRANSFORM is not valid JSON ({exc}): {spec!r}") from None
        return transform_from_config(config)
    module, sep, attr = text.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"TRANSFORM must be a JSON configuration or 'module:attribute', got {spec!r}")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise ConfigError(f"TRANSFORM {spec!r}: cannot import module {module!r} ({exc})") from exc
    except AttributeError:
        raise ConfigError(f"TRANSFORM {spec!r}: module {module!r} has no attribute {attr!r}") from None
    return obj() if isinstance(obj, type) else obj
