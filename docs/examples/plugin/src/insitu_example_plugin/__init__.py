"""A minimal insitu plugin package: a chunk transform registered through the ``insitu`` entry point."""

from __future__ import annotations

from insitu_example_plugin.transform import Negate

__all__ = ["Negate"]
