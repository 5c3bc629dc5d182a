"""Cloud configuration against the loopback S3 server: the environment alone configures a store,
insitu's options merge on top of it key by key, misconfigurations are permanent (never retried),
missing or refused credentials say what to do, and a transient failure is retried by one layer."""

from __future__ import annotations

import ast
import os
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from s3_servers import ACCESS_KEY, SECRET_KEY, Fault, FaultProxy, S3Server, run

import insitu
from insitu.store.capabilities import RetriesItself
from insitu.store.fetch import ChunkFetcher
from insitu.store.retry import RetryPolicy
from insitu_stores import (
    StoreConfigurationError,
    StoreError,
    StorePermissionError,
    StoreTimeoutError,
    TransientStoreError,
    fsspec_store,
    obstore_store,
)
from insitu_stores.cloud import ENV_CLIENT_OPTIONS, CloudSetup, env_client_options
from insitu_stores.errors import Redactor
from insitu_stores.fsspec_backend import translate_fsspec_error
from insitu_stores.obstore_backend import translate_obstore_error

BUILDERS = {"obstore": obstore_store, "fsspec": fsspec_store}
# Small waits, so that nothing here can hang: every attempt and connection is cut short, and the
# whole test by pytest-timeout.
QUICK = RetryPolicy(retries=2, backoff_s=0.01, max_backoff_s=0.05, timeout_s=10.0, connect_timeout_s=2.0)
NO_CREDENTIALS_HINT = {
    "s3": (
        "no credentials found: for a public bucket pass storage_options={'anon': True} "
        "(or anonymous=True); otherwise set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or pass key/secret"
    ),
}
VALUES = np.arange(48, dtype="f4").reshape(16, 3)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No cloud variables but those a test sets, and no credential files botocore could find."""
    for name in list(os.environ):
        if name.startswith(("AWS_", "GOOGLE_", "AZURE_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))


@pytest.fixture(scope="module")
def data_bucket(s3: S3Server) -> str:
    bucket = s3.new_bucket("cloudcfg")
    arr = zarr.create_array(s3.zarr_store(bucket, "d.zarr"), shape=(16, 3), chunks=(2, 3), dtype="f4")
    arr[...] = VALUES
    return bucket


def _env_endpoint(monkeypatch: pytest.MonkeyPatch, endpoint: str, *, allow_http: bool = True) -> None:
    """Point S3 at ``endpoint`` with credentials, through the environment only."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    if allow_http:
        monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _assert_no_secret(text: str) -> None:
    assert SECRET_KEY not in text
    assert ACCESS_KEY not in text


# -- the environment alone configures a store -------------------------------------------------------
@pytest.mark.parametrize("backend", sorted(BUILDERS))
def test_the_environment_alone_configures_the_endpoint(
    backend: str, s3: S3Server, data_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _env_endpoint(monkeypatch, s3.endpoint)
    store = insitu.open_store(f"s3://{data_bucket}/d.zarr", backend=backend)  # no options in code
    np.testing.assert_array_equal(zarr.open_array(store, mode="r")[...], VALUES)
    # The endpoint the environment chose names the store (and its cache identity).
    assert s3.endpoint in str(store)
    assert s3.endpoint in store.insitu_identity()
    _assert_no_secret(repr(store) + str(store) + store.insitu_identity())


def test_insitus_client_options_merge_on_top_of_the_environments(
    s3: S3Server, data_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _env_endpoint(monkeypatch, s3.endpoint)
    monkeypatch.setenv("AWS_USER_AGENT", "from-the-environment")
    monkeypatch.setenv("AWS_TIMEOUT", "3s")
    monkeypatch.setenv("AWS_UNRELATED_SETTING", "ignored")
    store = obstore_store(
        f"s3://{data_bucket}/d.zarr", retry=QUICK, client_options={"pool_max_idle_per_host": "4"}
    )
    options = store.store.client_options
    assert options["allow_http"] == "true"  # the environment's, kept
    assert options["user_agent"] == "from-the-environment"
    assert options["timeout"] == "10s"  # the policy's (timeout_s=10), on top of AWS_TIMEOUT
    assert options["connect_timeout"] == "2s"
    assert options["pool_max_idle_per_host"] == "4"  # the caller's, on top of both
    assert "unrelated_setting" not in options
    assert run(store.get("c/1/0", _prototype())) is not None


def test_an_explicit_option_wins_over_the_environment(
    proxy: FaultProxy, data_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _env_endpoint(monkeypatch, proxy.endpoint)  # AWS_ALLOW_HTTP=true
    store = obstore_store(f"s3://{data_bucket}/d.zarr", allow_http=False, retry=QUICK)
    assert store.store.client_options["allow_http"] == "false"
    fetcher = ChunkFetcher(store, QUICK)
    with pytest.raises(StoreConfigurationError, match=r"allow_http=True or set AWS_ALLOW_HTTP=true"):
        run(fetcher.get("c/0/0"))
    assert proxy.requests_to("d.zarr/") == 0


def test_client_options_read_from_the_environment_are_obstores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ALLOW_HTTP", "1")
    monkeypatch.setenv("GOOGLE_PROXY_URL", "http://proxy.internal:3128")
    monkeypatch.setenv("AZURE_CONNECT_TIMEOUT", "2s")
    monkeypatch.setenv("AWS_S3_ALLOW_HTTP", "true")  # not a name obstore reads
    assert env_client_options("s3") == {"allow_http": "1"}
    assert env_client_options("gs") == {"proxy_url": "http://proxy.internal:3128"}
    assert env_client_options("az") == {"connect_timeout": "2s"}
    assert env_client_options("http") == {}
    # Every name read is one of obstore's client options (a rename upstream fails here).
    import obstore

    stub = Path(obstore.__file__).parent / "_store" / "_client.pyi"
    tree = ast.parse(stub.read_text())
    (config,) = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "ClientConfig"]
    declared = {
        n.target.id for n in config.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    assert ENV_CLIENT_OPTIONS - {"http2_max_frame_size"} <= declared


# -- misconfiguration: permanent, never retried -----------------------------------------------------
def test_a_plain_http_endpoint_without_allow_http_is_a_permanent_error(
    proxy: FaultProxy, data_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What users hit: the endpoint from the environment, AWS_ALLOW_HTTP forgotten. obstore cannot
    # build the request ("builder error"); that is a misconfiguration, not a connection failure.
    _env_endpoint(monkeypatch, proxy.endpoint, allow_http=False)
    store = obstore_store(f"s3://{data_bucket}/d.zarr", retry=QUICK)
    engine = RetryPolicy(retries=3, backoff_s=0.01)
    fetcher = ChunkFetcher(store, engine)
    started = time.monotonic()
    with pytest.raises(StoreConfigurationError) as info:
        run(fetcher.get("c/0/0"))
    assert time.monotonic() - started < 5
    err = info.value
    assert isinstance(err, ValueError)
    assert not isinstance(err, engine.transient), "a misconfiguration is not transient"
    assert "AWS_ALLOW_HTTP=true" in str(err)
    assert f"s3://{data_bucket}/d.zarr/c/0/0" in str(err)
    assert proxy.requests_to("d.zarr/") == 0, "nothing was sent"
    assert fetcher.retries == 0
    _assert_no_secret(str(err))


@pytest.mark.parametrize("backend", sorted(BUILDERS))
def test_a_misconfigured_store_is_not_retried_by_any_layer(
    backend: str, proxy: FaultProxy, data_bucket: str
) -> None:
    # A region botocore cannot use / an unknown obstore option: permanent by type.
    if backend == "fsspec":
        store = fsspec_store(
            f"s3://{data_bucket}/d.zarr",
            endpoint=proxy.endpoint,
            key=ACCESS_KEY,
            secret=SECRET_KEY,
            region="not a region!",
            retry=QUICK,
        )
    else:
        store = obstore_store(
            f"s3://{data_bucket}/d.zarr",
            endpoint="http://127.0.0.1:9/",
            allow_http=False,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
            retry=QUICK,
        )
    fetcher = ChunkFetcher(store, RetryPolicy(retries=3, backoff_s=0.01))
    with pytest.raises(StoreConfigurationError) as info:
        run(fetcher.get("c/0/0"))
    assert not isinstance(info.value, (ConnectionError, TimeoutError))
    assert fetcher.retries == 0
    assert proxy.requests_to("d.zarr/") == 0
    _assert_no_secret(str(info.value))


# -- credentials: a hint, never a secret ------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", sorted(BUILDERS))
def test_no_credentials_says_what_to_pass(
    backend: str, proxy: FaultProxy, data_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    # No instance metadata: botocore honours AWS_EC2_METADATA_DISABLED; obstore does not, and
    # asks AWS_METADATA_ENDPOINT instead, here a closed local port that refuses at once.
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_METADATA_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    policy = RetryPolicy(retries=1, backoff_s=0.01, max_backoff_s=0.05, timeout_s=5.0, connect_timeout_s=1.0)
    store = BUILDERS[backend](f"s3://{data_bucket}/d.zarr", retry=policy)
    fetcher = ChunkFetcher(store, RetryPolicy(retries=3, backoff_s=0.01))
    started = time.monotonic()
    with pytest.raises(StorePermissionError) as info:
        run(fetcher.get("c/0/0"))
    assert time.monotonic() - started < 20
    message = str(info.value)
    assert NO_CREDENTIALS_HINT["s3"] in message
    assert f"s3://{data_bucket}/d.zarr/c/0/0" in message
    assert isinstance(info.value, PermissionError)
    assert fetcher.retries == 0, "missing credentials are permanent"
    assert proxy.requests_to("d.zarr/") == 0, "no unsigned request went to the bucket"


@pytest.mark.parametrize("backend", sorted(BUILDERS))
def test_refused_credentials_say_what_to_check_without_quoting_them(
    backend: str, proxy: FaultProxy, data_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _env_endpoint(monkeypatch, proxy.endpoint)  # credentials from the environment
    proxy.faults.append(Fault("d.zarr/c/2/0", "status:403"))
    store = BUILDERS[backend](f"s3://{data_bucket}/d.zarr", retry=QUICK)
    fetcher = ChunkFetcher(store, RetryPolicy(retries=3, backoff_s=0.01))
    with pytest.raises(StorePermissionError) as info:
        run(fetcher.get("c/2/0"))
    message = str(info.value)
    # The service's code leads, with the hint for that code (the proxy answers S3's AccessDenied).
    assert message.startswith("AccessDenied: "), message
    assert "the credentials were accepted but lack permission" in message
    assert "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY" in message
    assert proxy.requests_to("d.zarr/c/2/0") == 1
    assert fetcher.retries == 0
    _assert_no_secret(message + repr(info.value))


@pytest.mark.parametrize("backend", sorted(BUILDERS))
def test_an_unsigned_request_refused_says_the_bucket_is_not_public(
    backend: str, proxy: FaultProxy, data_bucket: str
) -> None:
    proxy.faults.append(Fault("d.zarr/c/4/0", "status:403"))
    store = BUILDERS[backend](
        f"s3://{data_bucket}/d.zarr", endpoint=proxy.endpoint, anonymous=True, region="us-east-1", retry=QUICK
    )
    with pytest.raises(StorePermissionError, match=r"unsigned \(anonymous=True\).*not public"):
        run(ChunkFetcher(store, QUICK).get("c/4/0"))


# -- transient failures: retried by exactly one layer -----------------------------------------------
@pytest.mark.parametrize("backend", sorted(BUILDERS))
def test_a_transient_failure_is_retried_by_exactly_one_layer(
    backend: str, proxy: FaultProxy, data_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _env_endpoint(monkeypatch, proxy.endpoint)
    proxy.faults.append(Fault("d.zarr/c/3/0", "status:503", method="GET"))
    store = BUILDERS[backend](f"s3://{data_bucket}/d.zarr", retry=QUICK)
    fetcher = ChunkFetcher(store, QUICK)  # the engine's policy, the same attempts
    with pytest.raises(StoreError):
        run(fetcher.get("c/3/0"))
    assert proxy.requests_to("d.zarr/c/3/0") == QUICK.attempts, "one layer: not attempts squared"
    if isinstance(store, RetriesItself):  # obstore: its client retried, the engine did not
        assert fetcher.retries == 0
    else:  # fsspec: one attempt per call, the engine retried
        assert fetcher.retries == QUICK.retries


@pytest.mark.parametrize("backend", sorted(BUILDERS))
def test_a_transient_failure_that_clears_is_read(
    backend: str, proxy: FaultProxy, data_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _env_endpoint(monkeypatch, proxy.endpoint)
    proxy.faults.append(Fault("d.zarr/c/5/0", "reset", times=1, method="GET"))
    store = BUILDERS[backend](f"s3://{data_bucket}/d.zarr", retry=QUICK)
    fetcher = ChunkFetcher(store, QUICK)
    raw = run(fetcher.get("c/5/0"))
    assert raw is not None
    assert 2 <= proxy.requests_to("d.zarr/c/5/0") <= QUICK.attempts


# -- the classification, type by type ---------------------------------------------------------------
def _obstore_error(kind: str) -> BaseException:
    from obstore import exceptions as oe

    return getattr(oe, kind)("Generic S3 error: Error performing GET http://127.0.0.1:1/b/k")


@pytest.mark.parametrize(
    ("kind", "setup", "expected"),
    [
        ("PermissionDeniedError", None, StorePermissionError),
        ("UnauthenticatedError", None, StorePermissionError),
        ("UnknownConfigurationKeyError", None, StoreConfigurationError),
        ("InvalidPathError", None, StoreConfigurationError),
        ("NotSupportedError", None, StoreConfigurationError),
        # obstore 0.12's one generic type: 5xx, resets and timeouts after its own retries alike,
        # with no status or kind as data. Not guessed from the text: a plain StoreError.
        ("GenericError", CloudSetup("s3", endpoint="https://s3.example"), StoreError),
        # ...unless the store's own configuration says every request fails before it is sent.
        ("GenericError", CloudSetup("s3", endpoint="http://127.0.0.1:1"), StoreConfigurationError),
        ("GenericError", CloudSetup("s3", endpoint="http://127.0.0.1:1", allow_http=True), StoreError),
        # ...or that the request went to the credentials service because none was configured.
        ("GenericError", CloudSetup("s3", credential_hosts=("127.0.0.1:1",)), StorePermissionError),
    ],
)
def test_obstore_errors_are_classified_by_type(kind: str, setup: CloudSetup | None, expected: type) -> None:
    err = translate_obstore_error(
        _obstore_error(kind), "s3://b/k", url="s3://b", key="k", redact=Redactor(), setup=setup
    )
    assert type(err) is expected
    assert not isinstance(err, RetryPolicy().transient)
    if expected is StorePermissionError and setup is not None:
        assert NO_CREDENTIALS_HINT["s3"] in str(err)


def _fsspec_errors() -> list[tuple[BaseException, type]]:
    import aiohttp
    import botocore.exceptions as be

    def client_error(status: int, code: str) -> BaseException:
        response: Any = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}
        return be.ClientError(response, "GetObject")

    return [
        (be.NoCredentialsError(), StorePermissionError),
        (be.PartialCredentialsError(provider="env", cred_var="AWS_SECRET_ACCESS_KEY"), StorePermissionError),
        (client_error(403, "AccessDenied"), StorePermissionError),
        (be.NoRegionError(), StoreConfigurationError),
        (be.ParamValidationError(report="bad"), StoreConfigurationError),
        (aiohttp.InvalidURL("nota url"), StoreConfigurationError),
        (be.ReadTimeoutError(endpoint_url="http://x"), StoreTimeoutError),
        (be.ConnectTimeoutError(endpoint_url="http://x"), StoreTimeoutError),
        (aiohttp.SocketTimeoutError(), StoreTimeoutError),
        (be.EndpointConnectionError(endpoint_url="http://x"), TransientStoreError),
        (be.ConnectionClosedError(endpoint_url="http://x"), TransientStoreError),
        (aiohttp.ServerDisconnectedError(), TransientStoreError),
        (aiohttp.ClientPayloadError("cut"), TransientStoreError),
        (ConnectionResetError(), TransientStoreError),
        (client_error(503, "SlowDown"), TransientStoreError),
        (client_error(500, "InternalError"), TransientStoreError),
        (client_error(400, "InvalidArgument"), StoreError),
    ]


def test_fsspec_errors_are_classified_by_type() -> None:
    transient = RetryPolicy().transient
    for exc, expected in _fsspec_errors():
        err = translate_fsspec_error(exc, "s3://b/k", url="s3://b", key="k", redact=Redactor(), service="s3")
        assert type(err) is expected, (exc, err)
        assert isinstance(err, transient) == (expected in (StoreTimeoutError, TransientStoreError)), exc


def _prototype() -> Any:
    from zarr.buffer import default_buffer_prototype

    return default_buffer_prototype()
