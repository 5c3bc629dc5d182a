"""A server that accepts connections and never answers: metadata reads through fsspec, whether
insitu built the store or the user did, end in ``insitu.StoreTimeoutError`` naming the URL and the
limit, within the retry policy's bound."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import insitu
from insitu.store.retry import RetryPolicy

pytest.importorskip("aiohttp")
fsspec_http = pytest.importorskip("fsspec.implementations.http")

SHORT = RetryPolicy(retries=0, timeout_s=1.0, connect_timeout_s=1.0)


@pytest.fixture
def hung_url() -> Iterator[str]:
    """The URL of a loopback server that accepts every connection and never replies."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/data.zarr"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


def _fails_within(work: Any, within_s: float) -> BaseException:
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            work()
        except BaseException as exc:
            out["error"] = exc

    started = time.monotonic()
    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(within_s)
    assert not t.is_alive(), f"still waiting after {within_s} s on a server that never answers"
    out["took"] = time.monotonic() - started
    assert "error" in out, "a server that never answers was read without an error"
    return out["error"]  # type: ignore[no-any-return]


@pytest.mark.timeout(120)
def test_fsspec_store_on_a_hung_server_times_out_naming_the_url_and_its_limit(hung_url: str) -> None:
    from insitu_stores import fsspec_store

    store = fsspec_store(hung_url, retry=SHORT)
    error = _fails_within(lambda: insitu.open_geometries(store), 60)
    assert isinstance(error, insitu.StoreTimeoutError), repr(error)
    assert error.limit_s == 1.0  # the store's per-request limit, not discovery's overall bound
    assert hung_url in str(error)
    assert "no answer within 1 s" in str(error)
    assert error.key == "zarr.json"


@pytest.mark.timeout(120)
def test_fsspec_store_passes_its_timeouts_to_aiohttp(hung_url: str) -> None:
    from insitu_stores import fsspec_store

    store = fsspec_store(hung_url, retry=SHORT)
    timeout = store._options["client_kwargs"]["timeout"]
    assert (timeout.sock_connect, timeout.sock_read, timeout.total) == (1.0, 1.0, None)
    own = fsspec_store(hung_url, retry=SHORT, client_kwargs={"timeout": None})
    assert own._options["client_kwargs"]["timeout"] is None  # the user's own setting wins


@pytest.mark.timeout(120)
def test_a_zarr_fsspec_store_insitu_did_not_build_does_not_hang_discovery(hung_url: str) -> None:
    from zarr.storage import FsspecStore

    fs = fsspec_http.HTTPFileSystem(asynchronous=True)
    store = FsspecStore(fs, path=hung_url, read_only=True)
    limit = SHORT.longest_call_s()
    error = _fails_within(lambda: insitu.open_geometries(store, retry=SHORT), 60)
    assert isinstance(error, insitu.StoreTimeoutError), repr(error)
    assert error.limit_s == limit
    assert hung_url in str(error)
    assert f"no answer within {limit:g} s opening the arrays' metadata" in str(error)
