"""``open_store(url, storage_options={...})``: the fsspec / xarray spelling, on both backends.

obstore (the default for s3://, gs://, az://) translates each fsspec key to
the obstore option of the same meaning and refuses the rest; fsspec gets the
dict unchanged. An option given twice (in storage_options and as a keyword)
is refused by both.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from s3_servers import ACCESS_KEY, SECRET_KEY, S3Server, run

import insitu
from insitu_stores import FsspecLoopStore, ObstoreStore, StorePermissionError


def _write(s3: S3Server, bucket: str) -> np.ndarray:
    values = np.random.default_rng(7).normal(size=(12, 5)).astype("float32")
    arr = zarr.create_array(
        s3.zarr_store(bucket, "data.zarr"), name="t", shape=values.shape, chunks=(4, 5), dtype="f4"
    )
    arr[...] = values
    return values


def _read(store: Any) -> np.ndarray:
    return np.asarray(zarr.open_array(store, path="t", mode="r")[...])


def _s3_options(s3: S3Server) -> dict[str, Any]:
    """What an xarray user writes for an S3-compatible server."""
    return {
        "key": ACCESS_KEY,
        "secret": SECRET_KEY,
        "client_kwargs": {"endpoint_url": s3.endpoint, "region_name": "us-east-1"},
    }


def _config(store: ObstoreStore) -> dict[str, Any]:
    """The obstore store's configuration as obstore reports it (values as strings)."""
    return {k: str(v).lower() if isinstance(v, bool) else v for k, v in store.store.config.items()}


# -- reading through the moto S3 server ------------------------------------------------------------
def test_obstore_reads_with_fsspec_style_storage_options(s3: S3Server, bucket: str) -> None:
    values = _write(s3, bucket)
    options = _s3_options(s3)
    before = copy.deepcopy(options)
    store = insitu.open_store(f"s3://{bucket}/data.zarr", storage_options=options)
    assert isinstance(store, ObstoreStore)  # s3:// defaults to obstore
    np.testing.assert_array_equal(_read(store), values)
    config = _config(store)
    assert config["access_key_id"] == ACCESS_KEY
    assert config["secret_access_key"] == SECRET_KEY
    assert config["endpoint"] == s3.endpoint
    assert config["region"] == "us-east-1"
    assert store.store.client_options["allow_http"] in (True, "true")  # an http:// endpoint
    assert options == before, "the caller's dict is not changed"
    assert SECRET_KEY not in repr(store)
    assert SECRET_KEY not in str(store)


def test_top_level_endpoint_url_and_region_read_the_same(s3: S3Server, bucket: str) -> None:
    values = _write(s3, bucket)
    options = {"key": ACCESS_KEY, "secret": SECRET_KEY, "endpoint_url": s3.endpoint, "region": "us-east-1"}
    store = insitu.open_store(f"s3://{bucket}/data.zarr", storage_options=options)
    np.testing.assert_array_equal(_read(store), values)


def test_the_same_storage_options_read_the_same_values_through_fsspec(s3: S3Server, bucket: str) -> None:
    values = _write(s3, bucket)
    store = insitu.open_store(f"s3://{bucket}/data.zarr", backend="fsspec", storage_options=_s3_options(s3))
    assert isinstance(store, FsspecLoopStore)
    np.testing.assert_array_equal(_read(store), values)


def test_anon_reads_a_public_bucket_unsigned(s3: S3Server, bucket: str) -> None:
    values = _write(s3, bucket)
    url = f"s3://{bucket}/data.zarr"
    options = {"anon": True, "endpoint_url": s3.endpoint}
    store = insitu.open_store(url, storage_options=options)
    assert _config(store)["skip_signature"] == "true"
    assert "access_key_id" not in _config(store)
    with pytest.raises(StorePermissionError, match=url):  # unsigned: refused until the bucket is public
        _read(store)
    s3.make_public(bucket)
    np.testing.assert_array_equal(_read(insitu.open_store(url, storage_options=options)), values)


# -- the obstore mapping, key by key (building a store sends no request) --------------------------
# A service account obstore accepts without a private key (the kind a GCS emulator takes).
SA_DICT = {
    "type": "service_account",
    "gcs_base_url": "http://127.0.0.1:4443",
    "disable_oauth": True,
    "client_email": "",
    "private_key": "",
    "private_key_id": "",
}


def _service_account(tmp_path: Path) -> Path:
    path = tmp_path / "sa.json"
    path.write_text(json.dumps(SA_DICT))
    return path


@pytest.mark.parametrize(
    ("url", "storage_options", "expected"),
    [
        (
            "s3://bkt/x.zarr",
            {"key": "AKIAEXAMPLE", "secret": "s3cret-value", "token": "session-tok"},
            {
                "access_key_id": "AKIAEXAMPLE",
                "secret_access_key": "s3cret-value",
                "session_token": "session-tok",
            },
        ),
        (
            "s3://bkt/x.zarr",
            {
                "client_kwargs": {
                    "aws_access_key_id": "AKIAEXAMPLE",
                    "aws_secret_access_key": "s3cret-value",
                    "aws_session_token": "session-tok",
                }
            },
            {
                "access_key_id": "AKIAEXAMPLE",
                "secret_access_key": "s3cret-value",
                "session_token": "session-tok",
            },
        ),
        ("s3://bkt/x.zarr", {"anon": True}, {"skip_signature": "true"}),
        ("s3://bkt/x.zarr", {"region": "eu-west-1"}, {"region": "eu-west-1"}),
        ("s3://bkt/x.zarr", {"client_kwargs": {"region_name": "eu-west-1"}}, {"region": "eu-west-1"}),
        (
            "s3://bkt/x.zarr",
            {"endpoint_url": "https://s3.example.org"},
            {"endpoint": "https://s3.example.org"},
        ),
        ("s3://bkt/x.zarr", {"requester_pays": True}, {"request_payer": "true"}),
        ("gs://bkt/x.zarr", {"token": "anon"}, {"skip_signature": "true"}),
        ("gs://bkt/x.zarr", {"anon": True}, {"skip_signature": "true"}),
        ("gs://bkt/x.zarr", {"token": SA_DICT}, {"service_account_key": json.dumps(SA_DICT)}),
        (
            "gs://bkt/x.zarr",
            {"endpoint_url": "https://gcs.example.org"},
            {"base_url": "https://gcs.example.org"},
        ),
        (
            "az://cont/x.zarr",
            {"account_name": "acct", "account_key": "a2V5LXZhbHVl", "anon": False},
            {"account_name": "acct", "account_key": "a2V5LXZhbHVl"},
        ),
        (
            "az://cont/x.zarr",
            {"account_name": "acct", "sas_token": "sv=2024&sig=abcd"},
            {"sas_key": "sv=2024&sig=abcd"},
        ),
        ("az://cont/x.zarr", {"account_name": "acct", "anon": True}, {"skip_signature": "true"}),
        (
            "az://cont/x.zarr",
            {"account_name": "acct", "client_id": "cid", "client_secret": "csecret", "tenant_id": "tid"},
            {"client_id": "cid", "client_secret": "csecret", "tenant_id": "tid"},
        ),
    ],
)
def test_each_fsspec_key_becomes_the_obstore_option_of_the_same_meaning(
    url: str, storage_options: dict[str, Any], expected: dict[str, str]
) -> None:
    store = insitu.open_store(url, storage_options=storage_options)
    assert isinstance(store, ObstoreStore)
    config = _config(store)
    assert {k: config.get(k) for k in expected} == expected
    if storage_options.get("anon") is False:
        assert "skip_signature" not in config


def test_gcs_token_path_becomes_the_service_account_file(tmp_path: Path) -> None:
    path = _service_account(tmp_path)
    store = insitu.open_store("gs://bkt/x.zarr", storage_options={"token": str(path)})
    assert _config(store)["service_account"] == str(path)


def test_an_http_endpoint_turns_on_allow_http(tmp_path: Path) -> None:
    for url, options in [
        ("s3://bkt/x.zarr", {"endpoint_url": "http://127.0.0.1:9000"}),
        ("gs://bkt/x.zarr", {"endpoint_url": "http://127.0.0.1:4443", "token": "anon"}),
    ]:
        store = insitu.open_store(url, storage_options=options)
        assert store.store.client_options["allow_http"] in (True, "true"), url
    https = insitu.open_store("s3://bkt/x.zarr", storage_options={"endpoint_url": "https://s3.example.org"})
    assert "allow_http" not in https.store.client_options


def test_none_values_mean_the_default() -> None:
    store = insitu.open_store("s3://bkt/x.zarr", storage_options={"key": None, "secret": None, "anon": None})
    config = _config(store)
    assert "access_key_id" not in config
    assert "skip_signature" not in config


@pytest.mark.parametrize("empty", [None, {}])
def test_no_storage_options_is_the_same_as_none(empty: Any) -> None:
    assert isinstance(insitu.open_store("s3://bkt/x.zarr", storage_options=empty), ObstoreStore)


# -- refusals --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "storage_options", "named", "understood"),
    [
        ("s3://bkt/x.zarr", {"profile": "dev"}, "'profile'", "endpoint_url"),
        (
            "s3://bkt/x.zarr",
            {"client_kwargs": {"verify": False}},
            "['client_kwargs']['verify']",
            "region_name",
        ),
        ("s3://bkt/x.zarr", {"account_name": "acct"}, "'account_name'", "requester_pays"),  # an Azure key
        ("gs://bkt/x.zarr", {"project": "p"}, "'project'", "token"),
        ("gs://bkt/x.zarr", {"requester_pays": True}, "'requester_pays'", "token"),  # obstore's GCS has none
        ("gs://bkt/x.zarr", {"client_kwargs": {}}, "'client_kwargs'", "endpoint_url"),
        ("az://cont/x.zarr", {"connection_string": "x"}, "'connection_string'", "sas_token"),
        ("https://host/x.zarr", {"headers": {}}, "'headers'", "none"),
    ],
)
def test_a_key_obstore_has_no_equivalent_for_is_refused_by_name(
    url: str, storage_options: dict[str, Any], named: str, understood: str
) -> None:
    with pytest.raises(insitu.ConfigError) as info:
        insitu.open_store(url, storage_options=storage_options)
    message = str(info.value)
    assert named in message
    assert "understood" in message
    assert understood in message
    assert "backend='fsspec'" in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("url", "storage_options", "named", "wanted"),
    [
        ("s3://bkt/x.zarr", {"anon": "true"}, "'anon'", "a bool"),
        ("s3://bkt/x.zarr", {"key": 12345678}, "'key'", "a str"),
        ("s3://bkt/x.zarr", {"client_kwargs": "us-east-1"}, "'client_kwargs'", "a dict"),
        ("s3://bkt/x.zarr", {"client_kwargs": {"region_name": 1}}, "['region_name']", "a str"),
        ("gs://bkt/x.zarr", {"token": 42}, "'token'", "a str or a dict"),
        ("az://cont/x.zarr", {"account_key": b"bytes-key-value"}, "'account_key'", "a str"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused(
    url: str, storage_options: dict[str, Any], named: str, wanted: str
) -> None:
    with pytest.raises(insitu.ConfigError) as info:
        insitu.open_store(url, storage_options=storage_options)
    assert named in str(info.value)
    assert wanted in str(info.value)
    assert "bytes-key-value" not in str(info.value), "a value is never shown: it may be a credential"


def test_gcsfs_only_token_methods_are_refused() -> None:
    for token in ("cache", "browser"):
        with pytest.raises(insitu.ConfigError, match=f"'{token}'"):
            insitu.open_store("gs://bkt/x.zarr", storage_options={"token": token})
    with pytest.raises(insitu.ConfigError, match="service_account"):
        insitu.open_store("gs://bkt/x.zarr", storage_options={"token": {"type": "authorized_user"}})


@pytest.mark.parametrize(
    ("url", "storage_options", "keywords", "names"),
    [
        ("s3://bkt/x.zarr", {"anon": True}, {"anonymous": True}, ("'anon'", "anonymous=")),
        ("s3://bkt/x.zarr", {"key": ACCESS_KEY}, {"access_key_id": ACCESS_KEY}, ("'key'", "access_key_id=")),
        (
            "s3://bkt/x.zarr",
            {"secret": SECRET_KEY},
            {"aws_secret_access_key": "x"},
            ("'secret'", "aws_secret"),
        ),
        (
            "s3://bkt/x.zarr",
            {"endpoint_url": "http://h:1"},
            {"endpoint": "http://h:1"},
            ("'endpoint_url'", "endpoint="),
        ),
        (
            "s3://bkt/x.zarr",
            {"client_kwargs": {"region_name": "us-east-1"}},
            {"region": "us-east-1"},
            ("['region_name']", "region="),
        ),
        (
            "s3://bkt/x.zarr",
            {"requester_pays": True},
            {"requester_pays": True},
            ("'requester_pays'", "requester_pays="),
        ),
        (
            "gs://bkt/x.zarr",
            {"token": "/tmp/sa.json"},
            {"service_account_path": "/tmp/sa.json"},
            ("'token'", "service_account_path="),
        ),
        (
            "az://cont/x.zarr",
            {"sas_token": "sv=1"},
            {"account_name": "a", "sas_key": "sv=1"},
            ("'sas_token'", "sas_key="),
        ),
    ],
)
def test_obstore_refuses_an_option_given_both_ways_naming_it(
    url: str, storage_options: dict[str, Any], keywords: dict[str, Any], names: tuple[str, str]
) -> None:
    with pytest.raises(insitu.ConfigError) as info:
        insitu.open_store(url, storage_options=storage_options, **keywords)
    for name in names:
        assert name in str(info.value)
    assert SECRET_KEY not in str(info.value)
    assert ACCESS_KEY not in str(info.value)


def test_the_same_option_twice_inside_storage_options_is_refused() -> None:
    options = {"endpoint_url": "http://a:1", "client_kwargs": {"endpoint_url": "http://b:1"}}
    with pytest.raises(insitu.ConfigError, match=r"'endpoint_url'.*\['endpoint_url'\]"):
        insitu.open_store("s3://bkt/x.zarr", storage_options=options)
    with pytest.raises(insitu.ConfigError, match=r"'key'.*\['aws_access_key_id'\]"):
        insitu.open_store(
            "s3://bkt/x.zarr", storage_options={"key": "a", "client_kwargs": {"aws_access_key_id": "b"}}
        )


def test_storage_options_must_be_a_mapping() -> None:
    for backend in ("obstore", "fsspec"):
        with pytest.raises(insitu.ConfigError, match="storage_options must be a dict"):
            insitu.open_store("s3://bkt/x.zarr", backend=backend, storage_options=[("anon", True)])


# -- fsspec: the dict passes through unchanged -----------------------------------------------------
def test_fsspec_filesystem_gets_the_storage_options_unchanged(s3: S3Server) -> None:
    options = {
        **_s3_options(s3),
        "default_block_size": 1234567,  # any s3fs option, not only those obstore knows
        "config_kwargs": {"max_pool_connections": 7},
    }
    before = copy.deepcopy(options)
    store = insitu.open_store("s3://bkt/x.zarr", backend="fsspec", storage_options=options)
    assert options == before, "the caller's dict is not changed"

    async def loop_fs_options() -> dict[str, Any]:
        return dict(store.fs.storage_options)  # the filesystem this loop's reads go through

    for got in (dict(store.fs.storage_options), run(loop_fs_options())):
        for name in ("key", "secret", "client_kwargs", "default_block_size"):
            assert got[name] == options[name], name
        assert got["config_kwargs"]["max_pool_connections"] == 7
    assert store.fs.key == ACCESS_KEY
    assert store.fs.default_block_size == 1234567


def test_fsspec_keeps_keys_obstore_would_refuse() -> None:
    store = insitu.open_store("s3://bkt/x.zarr", backend="fsspec", storage_options={"profile": "dev"})
    assert store.fs.storage_options["profile"] == "dev"


@pytest.mark.parametrize(
    ("storage_options", "keywords", "names"),
    [
        ({"anon": True}, {"anonymous": True}, ("'anon'", "anonymous=")),
        ({"key": "a"}, {"access_key_id": "a"}, ("'key'", "access_key_id=")),
        ({"endpoint_url": "http://h:1"}, {"endpoint": "http://h:1"}, ("'endpoint_url'", "endpoint=")),
        (
            {"client_kwargs": {"endpoint_url": "http://h:1"}},
            {"endpoint": "http://h:1"},
            ("'endpoint_url'", "endpoint="),
        ),
        ({"client_kwargs": {"region_name": "x"}}, {"region": "x"}, ("'region_name'", "region=")),
        ({"requester_pays": True}, {"requester_pays": True}, ("'requester_pays'", "requester_pays=")),
        ({"max_concurrency": 2}, {"max_concurrency": 4}, ("'max_concurrency'", "max_concurrency=")),
    ],
)
def test_fsspec_refuses_an_option_given_both_ways(
    storage_options: dict[str, Any], keywords: dict[str, Any], names: tuple[str, str]
) -> None:
    with pytest.raises(insitu.ConfigError) as info:
        insitu.open_store("s3://bkt/x.zarr", backend="fsspec", storage_options=storage_options, **keywords)
    for name in names:
        assert name in str(info.value)


def test_builders_without_storage_options_refuse_a_non_empty_one(tmp_path: Path) -> None:
    with pytest.raises(insitu.ConfigError, match="icechunk_store"):
        insitu.open_store(f"icechunk://{tmp_path}/repo", storage_options={"anon": True})
