"""open_store(storage_options=...): routed to builders that declare it, refused by the others."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from zarr.storage import LocalStore

from insitu import ConfigError
from insitu.store.opener import open_store
from insitu.testing import temporary_plugin

pytestmark = pytest.mark.usefixtures("fresh_registry")

PLUGIN = """
from zarr.storage import MemoryStore
from insitu.plugins.hookspecs import hookimpl

CALLS = []

def declares(url, *, read_only=True, storage_options=None, **options):
    CALLS.append((url, storage_options, options))
    return MemoryStore(read_only=read_only)

def kwargs_only(url, **options):
    CALLS.append((url, None, options))
    return MemoryStore(read_only=options["read_only"])

@hookimpl
def insitu_register_stores(register):
    register("declares", declares, schemes=("decl",))
    register("kwargs-only", kwargs_only, schemes=("kw",))
"""


@pytest.mark.parametrize("empty", [None, {}])
def test_none_or_empty_storage_options_open_a_local_path(tmp_path: Path, empty: Any) -> None:
    assert isinstance(open_store(tmp_path, storage_options=empty), LocalStore)


def test_a_builder_without_storage_options_refuses_a_non_empty_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"local_store.*given: anon") as info:
        open_store(tmp_path, storage_options={"anon": True})
    assert isinstance(info.value, ValueError)
    with pytest.raises(ConfigError, match="memory_store"):
        open_store("memory://x", mode="w", storage_options={"anon": True})


def test_storage_options_must_be_a_mapping_of_names(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must be a dict"):
        open_store(tmp_path, storage_options="anon=true")
    with pytest.raises(ConfigError, match="keys must be strings"):
        open_store(tmp_path, storage_options={1: True})


def test_routed_to_a_builder_that_declares_it_and_never_into_kwargs(tmp_path: Path) -> None:
    with temporary_plugin(tmp_path, "so", PLUGIN) as module:
        given = {"anon": True}
        open_store("decl://b/x", storage_options=given, region="eu")
        open_store("decl://b/y", storage_options={})
        calls = sys.modules[module].CALLS
        assert calls == [("decl://b/x", {"anon": True}, {"region": "eu"}), ("decl://b/y", None, {})]
        assert calls[0][1] is not given, "the builder gets its own copy"
        # A **kwargs builder would read storage_options as one option of that name: refused.
        with pytest.raises(ConfigError, match="kwargs_only"):
            open_store("kw://b/x", storage_options={"anon": True})
        open_store("kw://b/x", storage_options=None)
        assert calls[-1] == ("kw://b/x", None, {"read_only": True})
