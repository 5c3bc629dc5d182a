"""Arraylake: wiring through a stand-in client; the real client fails fast and clearly offline."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import zarr
from s3_servers import SilentServer
from test_conformance import StandInArraylake

import insitu
from insitu_stores import StorePermissionError, StoreTimeoutError, arraylake_store


@pytest.fixture
def repo(tmp_path: Path) -> object:
    import icechunk

    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "repo")))
    session = repo.writable_session("main")
    zarr.create_array(session.store, name="x", shape=(6, 2), chunks=(2, 2), dtype="i4")[...] = np.arange(
        12
    ).reshape(6, 2)
    snapshot = session.commit("x")
    repo.create_tag("release", snapshot_id=snapshot)
    return repo


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No stored login and no token in the environment."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    for name in ("ARRAYLAKE_TOKEN", "ARRAYLAKE_SERVICE_URI", "ARRAYLAKE_CLIENT__TOKEN"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.stop()


def test_stand_in_client_opens_the_repository_at_a_version(repo: object) -> None:
    client = StandInArraylake({"earth/demo": repo})
    store = arraylake_store("arraylake://earth/demo?tag=release", client=client)
    assert client.asked == ["earth/demo"]
    assert str(store).startswith("arraylake://earth/demo@")
    np.testing.assert_array_equal(
        zarr.open_array(store, path="x", mode="r")[...], np.arange(12).reshape(6, 2)
    )
    assert "arraylake://earth/demo" in store.insitu_identity()


def test_open_store_dispatches_arraylake_urls(repo: object) -> None:
    client = StandInArraylake({"earth/demo": repo})
    store = insitu.open_store("arraylake://earth/demo", client=client, branch="main")
    assert zarr.open_array(store, path="x", mode="r").shape == (6, 2)


def test_without_a_login_it_fails_at_once(offline: None) -> None:
    started = time.monotonic()
    with pytest.raises(
        StorePermissionError, match=r"cannot open Arraylake repository 'earth/demo'.*arraylake auth login"
    ):
        arraylake_store("earth/demo")
    assert time.monotonic() - started < 5.0


def test_an_unreachable_service_times_out_instead_of_hanging(offline: None, silent: SilentServer) -> None:
    token = "ema_not_a_real_token_0123456789"
    started = time.monotonic()
    with pytest.raises(StoreTimeoutError) as info:
        arraylake_store("earth/demo", token=token, service_uri=silent.endpoint, timeout_s=1.5)
    assert time.monotonic() - started < 6.0
    assert "earth/demo" in str(info.value)
    assert token not in str(info.value)


@pytest.mark.parametrize("name", ["demo", "arraylake://", "a/b/c", "/x"])
def test_malformed_repository_names(name: str) -> None:
    with pytest.raises(ValueError, match="malformed Arraylake repository"):
        arraylake_store(name, client=StandInArraylake({}))
