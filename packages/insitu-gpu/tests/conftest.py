"""Fixtures: the store and dataset helpers live in tests_support (importable by test modules)."""

from __future__ import annotations

from tests_support import _private_weight_cache, dataset, store_data, store_path

__all__ = ["_private_weight_cache", "dataset", "store_data", "store_path"]
