"""Transient errors are retried by exactly one layer (obstore's client under the store's policy, or
insitu's engine for fsspec); permanent ones fail fast; bad input fails clearly; secrets never print."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from conftest import write_fits
from s3_servers import ACCESS_KEY, SECRET_KEY, Fault, FaultProxy, S3Server, run
from zarr.buffer import default_buffer_prototype

import insitu
from insitu.store.capabilities import RetriesItself
from insitu.store.fetch import ChunkFetcher
from insitu.store.retry import RetryPolicy
from insitu_stores import (
    NotAnImageError,
    StoreError,
    StoreNotFoundError,
    StorePermissionError,
    StoreTimeoutError,
    TransientStoreError,
    fsspec_store,
    icechunk_store,
    obstore_store,
    virtual_store,
)

BUILDERS = {"obstore": obstore_store, "fsspec": fsspec_store}
# A per-request timeout far above what a loopback request costs even on a loaded machine: the
# tests below count requests exactly, and a request timed out by load would be one more.
FAST = RetryPolicy(retries=2, backoff_s=0.01, max_backoff_s=0.05, timeout_s=10.0, connect_timeout_s=5.0)
# What is raised once the retries are spent: obstore 0.12 reports 5xx and resets with one
# generic exception type (no status or kind as data), so its error is a plain StoreError.
EXHAUSTED = {"obstore": StoreError, "fsspec": TransientStoreError}
# Who retries: obstore's client, under the policy the store declares; the fsspec store makes one
# attempt per call and the engine's fetcher retries it.
RETRIES_ITSELF = {"obstore": True, "fsspec": False}


def _get(store: Any, key: str) -> Any:
    return run(store.get(key, default_buffer_prototype()))


def _fetch(store: Any, key: str, policy: RetryPolicy = FAST) -> tuple[Any, ChunkFetcher]:
    """Read ``key`` as the engine does: through a ChunkFetcher under ``policy``."""
    fetcher = ChunkFetcher(store, policy)
    return run(fetcher.get(key)), fetcher


@pytest.fixture(scope="module")
def data_bucket(s3: S3Server) -> str:
    bucket = s3.new_bucket("errors")
    arr = zarr.create_array(s3.zarr_store(bucket, "d.zarr"), shape=(12, 3), chunks=(2, 3), dtype="f4")
    arr[...] = np.arange(36, dtype="f4").reshape(12, 3)
    return bucket


def _via_proxy(
    builder: str, proxy: FaultProxy, bucket: str, retry: RetryPolicy = FAST, **options: Any
) -> Any:
    return BUILDERS[builder](
        f"s3://{bucket}/d.zarr",
        endpoint=proxy.endpoint,
        access_key_id=ACCESS_KEY,
        secret_access_key=SECRET_KEY,
        retry=retry,
        **options,
    )


def _assert_no_secret(text: str) -> None:
    assert SECRET_KEY not in text
    assert ACCESS_KEY not in text


# -- transient failures: retried by one layer, then raised --------------------------------------
@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_a_store_declares_a_policy_only_when_its_backend_applies_it(
    builder: str, proxy: FaultProxy, data_bucket: str
) -> None:
    store = _via_proxy(builder, proxy, data_bucket)
    assert isinstance(store, RetriesItself) == RETRIES_ITSELF[builder]
    if RETRIES_ITSELF[builder]:
        assert store.insitu_retry_policy is FAST


@pytest.mark.parametrize("builder", sorted(BUILDERS))
@pytest.mark.parametrize("status", [500, 503])
def test_server_errors_are_retried_until_they_pass(
    builder: str, status: int, proxy: FaultProxy, data_bucket: str
) -> None:
    proxy.faults.append(Fault("d.zarr/c/0/0", f"status:{status}", times=2, method="GET"))
    buf, fetcher = _fetch(_via_proxy(builder, proxy, data_bucket), "c/0/0")
    assert buf is not None
    assert proxy.requests_to("d.zarr/c/0/0") == 3  # two failures, then the answer
    assert fetcher.retries == (0 if RETRIES_ITSELF[builder] else 2)


@pytest.mark.parametrize("builder", sorted(BUILDERS))
@pytest.mark.parametrize("action", ["status:503", "reset"])
def test_persistent_transient_errors_are_raised_after_exactly_the_policys_attempts(
    builder: str, action: str, proxy: FaultProxy, data_bucket: str
) -> None:
    proxy.faults.append(Fault("d.zarr/c/1/0", action))
    store = _via_proxy(builder, proxy, data_bucket)
    fetcher = ChunkFetcher(store, FAST)
    with pytest.raises(EXHAUSTED[builder]) as info:
        run(fetcher.get("c/1/0"))
    assert f"s3://{data_bucket}/d.zarr/c/1/0" in str(info.value)
    # The proxy counts a request before it answers it, so the count is final once we hold the error.
    sent = proxy.requests_to("d.zarr/c/1/0")
    if builder == "fsspec" and action == "reset":
        # aiohttp resends an idempotent request once when the server drops the connection
        # without answering (RFC 9112, 9.3.1), beneath any retry policy and with no public
        # switch; the attempts made above it are still exactly the policy's.
        assert FAST.attempts <= sent <= 2 * FAST.attempts
    else:
        assert sent == FAST.attempts
    assert fetcher.retries == (0 if RETRIES_ITSELF[builder] else FAST.retries)
    _assert_no_secret(str(info.value))


def test_slow_client_set_up_is_not_restarted_by_each_attempt(
    proxy: FaultProxy, data_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # s3fs builds its botocore client on first use (0.15 s idle, over 1.5 s measured under
    # load). The engine times each attempt, set-up included; here the set-up is made slower
    # than the timeout. The attempt that waits for it times out, but the set-up goes on (it is
    # not cancelled with the attempt, nor started again by the next), so every later attempt
    # reaches the server: without that, each attempt would restart it and time out in turn.
    import s3fs

    policy = RetryPolicy(retries=2, backoff_s=0.01, max_backoff_s=0.05, timeout_s=0.5, connect_timeout_s=0.5)
    build_client = s3fs.S3FileSystem.set_session
    set_ups = 0

    async def slow_set_up(fs: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal set_ups
        if fs._s3 is None:
            set_ups += 1
            await asyncio.sleep(policy.timeout_s * 1.2)  # a slow component, not a wait for a condition
        return await build_client(fs, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "set_session", slow_set_up)
    proxy.faults.append(Fault("d.zarr/c/1/1", "status:503"))
    store = _via_proxy("fsspec", proxy, data_bucket, policy)
    fetcher = ChunkFetcher(store, policy)
    with pytest.raises(TransientStoreError):
        run(fetcher.get("c/1/1"))
    assert set_ups == 1
    assert fetcher.retries == policy.retries
    # Each attempt either ran out of time waiting for the one set-up (the first at least) or
    # reached the server; once the set-up is done, every attempt does.
    sent = proxy.requests_to("d.zarr/c/1/1")
    assert fetcher.timeouts >= 1
    assert sent >= 1
    assert sent + fetcher.timeouts == policy.attempts


@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_a_request_that_hangs_times_out(builder: str, proxy: FaultProxy, data_bucket: str) -> None:
    proxy.faults.append(Fault("d.zarr/c/2/0", "delay:3"))
    once = RetryPolicy(retries=0, timeout_s=0.5, connect_timeout_s=0.5)
    started = time.monotonic()
    # obstore's own client timeout ends the request and reports it with its generic type.
    with pytest.raises(StoreTimeoutError if builder == "fsspec" else StoreError) as info:
        _get(_via_proxy(builder, proxy, data_bucket, once), "c/2/0")
    assert time.monotonic() - started < 2.5, "the per-request timeout, not the server, ended the wait"
    assert "c/2/0" in str(info.value)


@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_forbidden_fails_fast_without_retry(builder: str, proxy: FaultProxy, data_bucket: str) -> None:
    proxy.faults.append(Fault("d.zarr/c/3/0", "status:403"))
    with pytest.raises(StorePermissionError) as info:
        _get(_via_proxy(builder, proxy, data_bucket), "c/3/0")
    assert isinstance(info.value, PermissionError)
    assert f"s3://{data_bucket}/d.zarr/c/3/0" in str(info.value)
    assert proxy.requests_to("d.zarr/c/3/0") == 1, "a 403 is not retried"
    _assert_no_secret(str(info.value))


def test_a_misconfigured_client_is_not_retried(proxy: FaultProxy, data_bucket: str) -> None:
    # An http:// endpoint without allow_http: obstore cannot build the request at all.
    store = _via_proxy("obstore", proxy, data_bucket, allow_http=False)
    fetcher = ChunkFetcher(store, RetryPolicy(retries=3, backoff_s=0.01))
    with pytest.raises(StoreError) as info:
        run(fetcher.get("c/3/1"))
    assert not isinstance(info.value, (ConnectionError, TimeoutError)), "a misconfiguration is not transient"
    assert proxy.requests_to("d.zarr/c/3/1") == 0
    assert fetcher.retries == 0


@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_exactly_one_layer_retries(builder: str, proxy: FaultProxy, data_bucket: str) -> None:
    proxy.faults.append(Fault("d.zarr/c/5/0", "status:503"))
    store = _via_proxy(
        builder, proxy, data_bucket, RetryPolicy(retries=3, backoff_s=0.01, max_backoff_s=0.05)
    )
    fetcher = ChunkFetcher(store, RetryPolicy(retries=3, backoff_s=0.01))
    with pytest.raises(EXHAUSTED[builder]):
        run(fetcher.get("c/5/0"))
    assert proxy.requests_to("d.zarr/c/5/0") == 4, "one layer: retries=3 is four attempts, not sixteen"
    # obstore's client retried (the fetcher added none); the fsspec store made one attempt per
    # call and the fetcher retried it.
    assert fetcher.retries == (0 if RETRIES_ITSELF[builder] else 3)
    # Neither store counts these: fsspec keeps no count, and obstore (0.12 reports none) counts only
    # the retries of calls that timed out on every attempt.
    assert fetcher.store_retries in (None, 0)


@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_an_epoch_over_a_failing_chunk_makes_one_layer_of_attempts(
    builder: str, proxy: FaultProxy, data_bucket: str
) -> None:
    proxy.faults.append(Fault("d.zarr/c/4/0", "status:503", method="GET"))
    store = _via_proxy(
        builder, proxy, data_bucket, RetryPolicy(retries=3, backoff_s=0.01, max_backoff_s=0.05)
    )
    geoms = insitu.open_geometries(store)
    manifest = insitu.split_by_chunk(next(iter(geoms.values())), (1.0,))
    # A store that retries by itself refuses another policy from the dataset (it would not apply).
    engine_policy = None if RETRIES_ITSELF[builder] else RetryPolicy(retries=3, backoff_s=0.01)
    with (
        insitu.InSituDataset(store, manifest, geoms, batch_size=4, retry=engine_policy) as ds,
        pytest.raises(insitu.StoreUnavailableError, match="c/4/0"),
    ):
        for _ in ds.train:
            pass
    assert proxy.requests_to("d.zarr/c/4/0") == 4


def test_an_epoch_completes_when_the_store_recovers_within_its_attempts(
    proxy: FaultProxy, data_bucket: str
) -> None:
    proxy.faults.append(Fault("d.zarr/c/4/0", "status:503", times=3, method="GET"))
    store = _via_proxy(
        "obstore", proxy, data_bucket, RetryPolicy(retries=3, backoff_s=0.01, max_backoff_s=0.05)
    )
    geoms = insitu.open_geometries(store)
    (geom,) = geoms.values()
    manifest = insitu.split_by_chunk(geom, (1.0,))
    seen = []
    with insitu.InSituDataset(store, manifest, geoms, batch_size=4) as ds:
        for batch in ds.train:
            (values,) = batch.values()
            np.testing.assert_array_equal(
                values, np.arange(36, dtype="f4").reshape(12, 3)[batch.sample_indices]
            )
            seen.extend(batch.sample_indices.tolist())
    assert sorted(seen) == list(range(12))
    assert proxy.requests_to("d.zarr/c/4/0") == 4


# -- permanent errors and bad input ---------------------------------------------------------------
@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_wrong_bucket_names_the_bucket(builder: str, s3: S3Server) -> None:
    store = BUILDERS[builder]("s3://no-such-bucket/data.zarr", **s3.options())
    with pytest.raises(StoreNotFoundError, match="bucket 'no-such-bucket' does not exist") as info:
        insitu.open_geometries(store)
    assert "s3://no-such-bucket/data.zarr" in str(info.value)
    with pytest.raises(StoreNotFoundError, match="no-such-bucket"):
        _get(store, "zarr.json")


@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_missing_array_names_the_array(builder: str, s3: S3Server, data_bucket: str) -> None:
    store = insitu.open_store(f"s3://{data_bucket}", backend=builder, **s3.options())
    with pytest.raises(insitu.ConfigError, match=r"no Zarr array or group .*'not-here\.zarr'"):
        insitu.open_geometries(store, path="not-here.zarr")
    store = insitu.open_store(f"s3://{data_bucket}/d.zarr", backend=builder, **s3.options())
    assert _get(store, "c/99/0") is None, "a missing chunk is not an error"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("s3://", "nothing after 's3://'"),
        ("s3:///data.zarr", "no bucket or container"),
        ("s3://UPPER_case/data.zarr", "not a valid bucket name"),
        ("s3://ab/data.zarr", "not a valid bucket name"),
        ("://bucket/x", "malformed store URL"),
        ("icechunk+s3://bucket/repo?branch=a&tag=b", "at most one of"),
        ("icechunk+s3://bucket/repo?color=red", "may only set one of"),
    ],
)
def test_malformed_urls_say_what_is_wrong(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as info:
        insitu.open_store(url, anonymous=True)
    assert repr(url) in str(info.value), "the message quotes the URL"


def test_option_for_another_scheme_is_refused() -> None:
    with pytest.raises(ValueError, match=r"requester_pays= does not apply to gs:// URLs"):
        obstore_store("gs://bucket/data.zarr", requester_pays=True)
    with pytest.raises(ValueError, match=r"endpoint= does not apply to https:// URLs"):
        fsspec_store("https://example.com/data.zarr", endpoint="http://127.0.0.1:1")


def test_non_image_fits_hdu_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "obs.fits"
    write_fits(path)
    with pytest.raises(
        NotAnImageError, match=r"HDU 'TAB' \(index 2\) of file://.*obs\.fits is a binary table"
    ):
        virtual_store(str(path), hdus=["TAB"])


def test_fits_file_without_an_image_is_refused(tmp_path: Path) -> None:
    from astropy.io import fits

    col = fits.Column(name="flux", format="E", array=np.arange(4, dtype="float32"))
    fits.HDUList([fits.PrimaryHDU(), fits.BinTableHDU.from_columns([col], name="SPEC")]).writeto(
        tmp_path / "t.fits"
    )
    with pytest.raises(NotAnImageError, match=r"no image HDU with data .*'SPEC' \(binary table\)"):
        virtual_store(str(tmp_path / "t.fits"))


# -- credentials never printed ---------------------------------------------------------------------
@pytest.mark.parametrize("builder", sorted(BUILDERS))
def test_credentials_stay_out_of_reprs_and_messages(builder: str, s3: S3Server) -> None:
    store = BUILDERS[builder]("s3://no-such-bucket/x.zarr", **s3.options())
    for text in (repr(store), str(store)):
        _assert_no_secret(text)
    with pytest.raises(StoreNotFoundError) as info:
        insitu.open_geometries(store)
    _assert_no_secret(str(info.value))
    _assert_no_secret(repr(info.value))
    with pytest.raises(ValueError, match="no bucket") as bad:
        BUILDERS[builder]("s3:///x.zarr", **s3.options())
    _assert_no_secret(str(bad.value))


def test_icechunk_credentials_stay_out_of_messages(s3: S3Server) -> None:
    with pytest.raises(StoreNotFoundError) as info:
        icechunk_store(f"icechunk+s3://{s3.new_bucket('empty')}/nothing", **s3.options())
    assert "no Icechunk repository at icechunk+s3://" in str(info.value)
    _assert_no_secret(str(info.value))
