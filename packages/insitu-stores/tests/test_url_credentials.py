"""Credentials written into a URL (user:password@, a presigned query) never print.

Every store shows its URL in its repr, its str, its error messages and its
cache identity; each of those hides the password, signature or token, and an
exception's chain does not bring the backend's own message (which quotes the
request URL) back into a printed traceback.
"""

from __future__ import annotations

import socket
import threading
import traceback
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from s3_servers import Fault, FaultProxy, S3Server

import insitu
from insitu.store.retry import RetryPolicy
from insitu_stores import (
    StoreError,
    StorePermissionError,
    arraylake_store,
    fsspec_store,
    icechunk_store,
    obstore_store,
)

BUILDERS = {"obstore": obstore_store, "fsspec": fsspec_store}
PASSWORD = "PWsecret-0123"
SIGNATURE = "SIGsecret-4567"
# One attempt, short timeouts: a refused connection is answered at once on loopback.
ONCE = RetryPolicy(retries=0, timeout_s=30.0, connect_timeout_s=10.0)


def _shown(exc: BaseException) -> str:
    """Everything a log shows for ``exc``: the formatted traceback, its chain included."""
    return "".join(traceback.format_exception(exc)) + repr(exc)


def _assert_hidden(text: str) -> None:
    assert PASSWORD not in text
    assert SIGNATURE not in text


@pytest.fixture(scope="module")
def closed_port() -> int:
    """A loopback port nothing listens on: every connection to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class AuthRecorder:
    """An HTTP server on loopback that answers 404 to everything and records Authorization headers."""

    def __init__(self) -> None:
        seen: list[str | None] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                seen.append(self.headers.get("Authorization"))
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_HEAD = do_GET

        self.seen = seen
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.host = f"127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, name="auth-recorder", daemon=True).start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def auth_recorder() -> Iterator[AuthRecorder]:
    server = AuthRecorder()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("backend", sorted(BUILDERS))
def test_a_url_password_is_not_in_repr_str_or_identity(backend: str, closed_port: int) -> None:
    url = f"https://reader:{PASSWORD}@127.0.0.1:{closed_port}/x.zarr"
    store = insitu.open_store(url, backend=backend, retry=ONCE)
    for text in (repr(store), str(store), store.insitu_identity(), repr(store.location), store.url):
        _assert_hidden(text)
    assert f"https://reader:***@127.0.0.1:{closed_port}/x.zarr" in repr(store)


@pytest.mark.parametrize("backend", sorted(BUILDERS))
def test_the_identity_names_the_location_not_the_credentials(backend: str, closed_port: int) -> None:
    def identity(url: str) -> str:
        return str(BUILDERS[backend](url, retry=ONCE).insitu_identity())

    base = f"http://reader:{PASSWORD}@127.0.0.1:{closed_port}"
    first = identity(f"{base}/x.zarr")
    assert identity(f"{base}/x.zarr") == first, "stable: the same URL gives the same identity"
    assert identity(f"{base}/y.zarr") != first, "distinct: another location is another identity"
    # A rotated password reads the same location: a persisted cache stays valid for it.
    assert identity(f"http://reader:other-password@127.0.0.1:{closed_port}/x.zarr") == first


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("backend", sorted(BUILDERS))
def test_an_unreachable_host_error_hides_the_password(backend: str, scheme: str, closed_port: int) -> None:
    store = insitu.open_store(
        f"{scheme}://reader:{PASSWORD}@127.0.0.1:{closed_port}/x.zarr", backend=backend, retry=ONCE
    )
    with pytest.raises(StoreError) as info:
        insitu.open_geometries(store)
    _assert_hidden(_shown(info.value))
    assert f"{scheme}://reader:***@127.0.0.1:{closed_port}/x.zarr" in str(info.value), "names the URL"


@pytest.mark.parametrize("backend", sorted(BUILDERS))
def test_a_refusal_from_the_server_hides_the_password(backend: str, s3: S3Server) -> None:
    proxy = FaultProxy(s3.endpoint)
    try:
        proxy.faults.append(Fault(path="", action="status:403"))
        host = proxy.endpoint.removeprefix("http://")
        store = insitu.open_store(
            f"http://reader:{PASSWORD}@{host}/bucket/x.zarr", backend=backend, retry=ONCE
        )
        with pytest.raises(StorePermissionError) as info:
            insitu.open_geometries(store)
        _assert_hidden(_shown(info.value))
    finally:
        proxy.stop()


@pytest.mark.parametrize("backend", sorted(BUILDERS))
def test_url_credentials_still_reach_the_server(backend: str, auth_recorder: AuthRecorder) -> None:
    """Hidden from view, not dropped: both backends send user:password@ as Basic authentication."""
    store = insitu.open_store(
        f"http://reader:{PASSWORD}@{auth_recorder.host}/x.zarr", backend=backend, retry=ONCE
    )
    with pytest.raises(insitu.ConfigError, match="no Zarr array or group") as info:
        insitu.open_geometries(store)
    _assert_hidden(_shown(info.value))
    assert set(auth_recorder.seen) == {"Basic cmVhZGVyOlBXc2VjcmV0LTAxMjM="}  # base64 of reader:PASSWORD


@pytest.mark.parametrize(
    "query",
    [
        f"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={SIGNATURE}&X-Amz-Signature={SIGNATURE}",
        f"sv=2022-11-02&sig={SIGNATURE}",
        f"token={SIGNATURE}",
        f"X-Goog-Signature={SIGNATURE}",
    ],
)
@pytest.mark.parametrize("backend", sorted(BUILDERS))
def test_a_presigned_query_is_refused_without_echoing_it(backend: str, query: str, closed_port: int) -> None:
    with pytest.raises(ValueError, match=r"unexpected '\?' or '#' part") as info:
        insitu.open_store(f"https://127.0.0.1:{closed_port}/x.zarr?{query}", backend=backend)
    _assert_hidden(_shown(info.value))
    assert "=***" in str(info.value), "the message shows the URL with the credential replaced"


@pytest.mark.parametrize("backend", sorted(BUILDERS))
def test_credentials_in_a_cloud_url_are_refused_without_echoing_them(backend: str) -> None:
    with pytest.raises(ValueError, match="carry no credentials; pass them as options") as info:
        BUILDERS[backend](f"s3://AKIAKEY:{PASSWORD}@bucket/x.zarr")
    _assert_hidden(_shown(info.value))


@pytest.mark.parametrize("backend", sorted(BUILDERS))
def test_an_endpoint_password_is_hidden(backend: str, closed_port: int) -> None:
    endpoint = f"http://admin:{PASSWORD}@127.0.0.1:{closed_port}"
    store = BUILDERS[backend]("s3://bucket/x.zarr", endpoint=endpoint, anonymous=True, retry=ONCE)
    for text in (repr(store), str(store), store.insitu_identity()):
        _assert_hidden(text)
    with pytest.raises(StoreError) as info:
        insitu.open_geometries(store)
    _assert_hidden(_shown(info.value))


def test_icechunk_and_arraylake_urls_hide_their_query() -> None:
    with pytest.raises(ValueError, match="may only set one of") as info:
        icechunk_store(f"icechunk+s3://bucket/repo?token={SIGNATURE}")
    _assert_hidden(_shown(info.value))
    with pytest.raises(ValueError, match="may set branch, tag or snapshot") as info:
        arraylake_store(f"arraylake://org/repo?token={SIGNATURE}")
    _assert_hidden(_shown(info.value))
