"""open_store: paths, file:// and memory:// URLs, plugin schemes, and its error messages."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.abc.store import Store
from zarr.storage import LocalStore, MemoryStore

from insitu.plugins.registry import PluginNotFoundError
from insitu.store.opener import UnknownSchemeError, open_store, redact_text, redact_url, url_secrets
from insitu.testing import temporary_plugin

pytestmark = pytest.mark.usefixtures("fresh_registry")


def _write_group(store: Store) -> np.ndarray:
    values = np.arange(12, dtype="int32").reshape(3, 4)
    zarr.create_array(store, name="a", data=values, chunks=(2, 2))
    return values


def _read(store: Store) -> np.ndarray:
    return np.asarray(zarr.open_array(store=store, path="a", mode="r")[...])


@pytest.fixture
def local_zarr(tmp_path: Path) -> tuple[Path, np.ndarray]:
    path = tmp_path / "data dir.zarr"
    return path, _write_group(LocalStore(path))


@pytest.mark.parametrize("form", ["str", "path", "file_url", "file_url_localhost", "file_url_quoted"])
def test_local_forms_open_the_same_store(local_zarr: tuple[Path, np.ndarray], form: str) -> None:
    path, values = local_zarr
    url: Any = {
        "str": str(path),
        "path": path,
        "file_url": f"file://{path}",
        "file_url_localhost": f"file://localhost{path}",
        "file_url_quoted": path.as_uri(),  # the space is percent-encoded
    }[form]
    store = open_store(url)
    assert isinstance(store, LocalStore)
    np.testing.assert_array_equal(_read(store), values)


def test_relative_path_and_relative_file_url(
    local_zarr: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, values = local_zarr
    monkeypatch.chdir(path.parent)
    np.testing.assert_array_equal(_read(open_store(path.name)), values)
    np.testing.assert_array_equal(_read(open_store(f"file://{path.name}")), values)


def test_local_store_is_read_only_by_default(local_zarr: tuple[Path, np.ndarray]) -> None:
    path, _ = local_zarr
    assert open_store(path).read_only
    with pytest.raises(ValueError, match="read-only"):
        zarr.create_array(open_store(path), name="b", shape=(2,), dtype="int8")


def test_writable_mode_creates_a_missing_directory(tmp_path: Path) -> None:
    target = tmp_path / "new" / "out.zarr"
    store = open_store(target, mode="w")
    assert not store.read_only
    values = _write_group(store)
    np.testing.assert_array_equal(_read(open_store(f"file://{target}")), values)


def test_store_instance_passes_through() -> None:
    store = MemoryStore()
    assert open_store(store) is store
    assert open_store(store, mode="w") is store
    with pytest.raises(ValueError, match="backend"):
        open_store(store, backend="local")


def test_memory_url_names_a_process_wide_store() -> None:
    url = f"memory://{uuid.uuid4().hex}/nested"
    values = _write_group(open_store(url, mode="w"))
    again = open_store(url)
    assert isinstance(again, MemoryStore)
    assert again.read_only
    np.testing.assert_array_equal(_read(again), values)
    other = open_store(f"memory://{uuid.uuid4().hex}", mode="a")
    assert asyncio.run(other.is_empty("")), "a new name starts empty"


def test_unknown_memory_name_is_not_found() -> None:
    name = f"memory://{uuid.uuid4().hex}"
    with pytest.raises(FileNotFoundError, match=name):
        open_store(name)


def test_nonexistent_local_path_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.zarr"
    with pytest.raises(FileNotFoundError, match=r"nope\.zarr") as info:
        open_store(missing)
    assert info.value.filename == str(missing)
    with pytest.raises(FileNotFoundError, match=r"nope\.zarr"):
        open_store(f"file://{missing}")


def test_a_file_is_not_a_store(tmp_path: Path) -> None:
    file = tmp_path / "data.nc"
    file.write_bytes(b"\x89HDF")
    with pytest.raises(NotADirectoryError, match=r"data\.nc"):
        open_store(file)


@pytest.mark.parametrize("url", ["", "://bucket/x", "3d://bucket/x", "s3://", "file://"])
def test_malformed_url_raises_value_error_naming_it(url: str) -> None:
    with pytest.raises(ValueError, match="malformed store URL") as info:
        open_store(url)
    assert repr(url) in str(info.value)


def test_unknown_cloud_scheme_names_the_package_to_install() -> None:
    with pytest.raises(UnknownSchemeError, match=r"'s3'.*pip install 'insitu-stores\[s3\]'") as info:
        open_store("s3://bucket/era5.zarr")
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, KeyError)


def test_unknown_scheme_lists_known_schemes_and_cloud_packages() -> None:
    with pytest.raises(UnknownSchemeError) as info:
        open_store("nosuch://x")
    message = str(info.value)
    assert "'nosuch'" in message
    assert "'file', 'memory'" in message
    assert "pip install 'insitu-stores[arraylake,azure,gcs,http,icechunk,s3]'" in message


def test_unknown_backend_lists_registered_backends(local_zarr: tuple[Path, np.ndarray]) -> None:
    path, _ = local_zarr
    with pytest.raises(PluginNotFoundError, match=r"unknown store 'obstorex'.*'local', 'memory'"):
        open_store(path, backend="obstorex")


def test_invalid_mode_is_rejected(local_zarr: tuple[Path, np.ndarray]) -> None:
    path, _ = local_zarr
    with pytest.raises(ValueError, match="mode must be one of"):
        open_store(path, mode="rw")


RECORDING_PLUGIN = """
from zarr.storage import MemoryStore
from insitu.plugins.hookspecs import hookimpl

CALLS = []

def builder(url, **options):
    CALLS.append((url, options))
    return MemoryStore(read_only=options["read_only"])

def not_a_store(url, **options):
    return {"url": url}

@hookimpl
def insitu_register_stores(register):
    register("recording", builder, schemes=("rec",))
    register("broken", not_a_store, schemes=("broken",))
"""


def test_plugin_builder_receives_url_mode_and_options(tmp_path: Path) -> None:
    with temporary_plugin(tmp_path, "recorder", RECORDING_PLUGIN) as module:
        store = open_store("rec://bucket/x.zarr", anon=True)
        assert store.read_only
        open_store("REC://bucket/y.zarr", mode="a", region="eu")
        open_store(tmp_path, backend="recording")
        calls = sys.modules[module].CALLS
        assert calls == [
            ("rec://bucket/x.zarr", {"read_only": True, "anon": True}),
            ("REC://bucket/y.zarr", {"read_only": False, "region": "eu"}),
            (str(tmp_path), {"read_only": True}),
        ]
        with pytest.raises(TypeError, match="not a zarr Store"):
            open_store("broken://x")


# -- credentials in URLs -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://reader:PW@host/x.zarr", "https://reader:***@host/x.zarr"),
        ("https://ghp_token123@host/x.zarr", "https://***@host/x.zarr"),  # a lone user part is a token
        ("https://u:p@ss@host/x.zarr", "https://u:***@host/x.zarr"),  # an unencoded "@" in a password
        (
            "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AK%2F1"
            "&X-Amz-Date=20250101T000000Z&X-Amz-Signature=abcdef",
            "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=***"
            "&X-Amz-Date=20250101T000000Z&X-Amz-Signature=***",
        ),
        (
            "https://acct.blob.core.windows.net/c?sv=2022&sig=S%2Bg%3D",
            "https://acct.blob.core.windows.net/c?sv=2022&sig=***",
        ),
        ("https://host/x#access_token=abcd", "https://host/x#access_token=***"),
        ("s3://bucket/x.zarr?versionId=3", "s3://bucket/x.zarr?versionId=3"),  # not a credential
        ("/data/x.zarr", "/data/x.zarr"),
    ],
)
def test_redact_url_hides_each_kind_of_credential(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert redact_url(url) == redact_url(url), "stable: it can name a location"


def test_url_secrets_lists_what_a_backend_may_show_apart_from_the_url() -> None:
    secrets = url_secrets("https://reader:pass%2Fword@host/x?sig=S%2Bg%3D1234&sv=2022")
    assert set(secrets) == {"pass%2Fword", "pass/word", "S%2Bg%3D1234", "S+g=1234"}
    text = "GET https://reader:pass%2Fword@host/x failed: BasicAuth(login='reader', password='pass/word')"
    assert redact_text(text, secrets) == (
        "GET https://reader:***@host/x failed: BasicAuth(login='reader', password='***')"
    )


def test_a_malformed_url_hides_its_credentials() -> None:
    with pytest.raises(ValueError, match="malformed store URL") as info:
        open_store("://reader:PWsecret@host/x.zarr")
    assert "PWsecret" not in str(info.value)
    assert "'://reader:***@host/x.zarr'" in str(info.value)


LEAKY_PLUGIN = """
import errno
from insitu.plugins.hookspecs import hookimpl

def quotes_the_url(url, **options):
    try:
        raise OSError(f"connect failed for {url}")
    except OSError as exc:
        raise ValueError(f"cannot open {url}") from exc

def missing(url, **options):
    raise FileNotFoundError(errno.ENOENT, "nothing at", url)

@hookimpl
def insitu_register_stores(register):
    register("leaky", quotes_the_url, schemes=("leaky",))
    register("missing", missing, schemes=("missing",))
"""


def test_a_builder_error_that_quotes_the_url_hides_its_credentials(tmp_path: Path) -> None:
    """A third party's builder may put the URL in its messages; open_store hides the credentials."""
    import traceback

    # The URLs live in variables: a traceback quotes the source line of each frame.
    leaky = "leaky://reader:PWsecret@host/x?token=TOKsecret"
    missing_url = "missing://reader:PWsecret@host/x"
    with temporary_plugin(tmp_path, "leaky", LEAKY_PLUGIN):
        with pytest.raises(
            ValueError, match=r"cannot open leaky://reader:\*\*\*@host/x\?token=\*\*\*"
        ) as info:
            open_store(leaky)
        shown = "".join(traceback.format_exception(info.value))
        assert "PWsecret" not in shown
        assert "TOKsecret" not in shown
        with pytest.raises(FileNotFoundError) as missing:
            open_store(missing_url)
        assert missing.value.filename == "missing://reader:***@host/x"
        assert "PWsecret" not in str(missing.value)


class _ReprShowsItsUrl(MemoryStore):
    """A store built outside open_store whose repr quotes its URL, password and all."""

    def __repr__(self) -> str:
        return "ThirdPartyStore('https://reader:PWsecret@host/x.zarr')"


def test_a_missing_group_message_hides_the_credentials_a_store_repr_shows() -> None:
    import traceback

    import insitu

    with pytest.raises(insitu.ConfigError, match="no Zarr array or group") as info:
        insitu.open_geometries(_ReprShowsItsUrl())
    assert "https://reader:***@host/x.zarr" in str(info.value)
    assert "PWsecret" not in "".join(traceback.format_exception(info.value))
