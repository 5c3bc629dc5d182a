"""An S3 error names the service's error code first (InvalidAccessKeyId, SignatureDoesNotMatch,
AccessDenied, NoSuchBucket), with the hint for that code, even where the backend cuts the body."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import zarr
from s3_servers import AuthenticatingS3Server

import insitu
from insitu_stores import StoreError, StoreNotFoundError, StorePermissionError
from insitu_stores.errors import Redactor
from insitu_stores.fsspec_backend import translate_fsspec_error
from insitu_stores.obstore_backend import translate_obstore_error

BACKENDS = ("obstore", "fsspec")
WRONG_KEY_ID = "AKIAWRONGWRONGWRONG1"
WRONG_SECRET = "wrong-secret-do-not-print-0123456789abcd"


@pytest.fixture(scope="module")
def auth_s3() -> Iterator[AuthenticatingS3Server]:
    server = AuthenticatingS3Server()
    try:
        yield server
    finally:
        server.stop()


def _credentials(server: AuthenticatingS3Server, case: str) -> tuple[str, str, str]:
    """(key, secret, bucket) for each way a reader gets it wrong."""
    return {
        "InvalidAccessKeyId": (WRONG_KEY_ID, WRONG_SECRET, server.bucket),
        "SignatureDoesNotMatch": (server.key, WRONG_SECRET, server.bucket),
        "AccessDenied": (server.denied_key, server.denied_secret, server.bucket),
        "NoSuchBucket": (server.key, server.secret, "no-such-bucket-here"),
    }[case]


# What each code's hint must say: the setting to check.
HINTS = {
    "InvalidAccessKeyId": "check AWS_ACCESS_KEY_ID",
    "SignatureDoesNotMatch": "check AWS_SECRET_ACCESS_KEY",
    "AccessDenied": "lack permission",
    "NoSuchBucket": "does not exist",
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("code", sorted(HINTS))
def test_s3_error_leads_with_its_code_and_fitting_hint(
    backend: str, code: str, auth_s3: AuthenticatingS3Server
) -> None:
    key, secret, bucket = _credentials(auth_s3, code)
    store = insitu.open_store(
        f"s3://{bucket}",
        backend=backend,
        endpoint=auth_s3.endpoint,
        region="us-east-1",
        storage_options={"key": key, "secret": secret},
    )
    expected = StoreNotFoundError if code == "NoSuchBucket" else StorePermissionError
    with pytest.raises(expected) as info:
        zarr.open_group(store, mode="r")
    message = str(info.value)
    assert message.startswith(f"{code}: "), message
    assert HINTS[code] in message
    assert bucket in message
    assert secret not in message
    assert "<?xml" not in message, "the code leads the message; the XML body it came in is not shown"


def test_cli_shows_the_code_in_one_line(auth_s3: AuthenticatingS3Server) -> None:
    options = {"key": auth_s3.key, "secret": WRONG_SECRET, "endpoint_url": auth_s3.endpoint}
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_REGION"] = "us-east-1"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "insitu",
            "inspect",
            f"s3://{auth_s3.bucket}",
            "--storage-options",
            json.dumps(options),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("insitu: error: SignatureDoesNotMatch: "), lines[0]
    assert "check AWS_SECRET_ACCESS_KEY" in lines[0]
    assert WRONG_SECRET not in proc.stderr


# -- at the classification functions: codes the loopback server cannot produce, and cut bodies ----
def _obstore_error(kind: str, text: str) -> BaseException:
    from obstore import exceptions as oe

    return getattr(oe, kind)(text)


# obstore 0.12's message: a first line ending where the XML body starts, the body on the next.
OBSTORE_403 = (
    "The operation lacked the necessary privileges to complete for path d.zarr/zarr.json: Error "
    "performing GET https://s3.amazonaws.com/b/d.zarr/zarr.json in 20ms - Server returned non-2xx "
    'status code: 403 Forbidden: <?xml version="1.0" encoding="UTF-8"?>\n'
    "<Error><Code>{code}</Code><Message>{padding}</Message></Error>\n\nDebug source: ..."
)


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        ("ExpiredToken", "AWS_SESSION_TOKEN"),
        ("InvalidToken", "AWS_SESSION_TOKEN"),
        ("RequestTimeTooSkewed", "clock"),
        ("AccessDenied", "s3:GetObject"),
        ("SomeFutureCode", "check them"),  # no specific hint: the generic one, still led by the code
    ],
)
def test_obstore_permission_error_code_survives_a_long_body(code: str, hint: str) -> None:
    exc = _obstore_error("PermissionDeniedError", OBSTORE_403.format(code=code, padding="x" * 5000))
    err = translate_obstore_error(
        exc,
        "s3://b/d.zarr/zarr.json",
        url="s3://b/d.zarr",
        key="zarr.json",
        redact=Redactor(),
        setup=_setup(),
    )
    assert isinstance(err, StorePermissionError)
    assert str(err).startswith(f"{code}: permission denied reading s3://b/d.zarr/zarr.json"), str(err)
    assert hint in str(err)
    assert "x" * 50 not in str(err)


def test_obstore_generic_error_names_the_region_mismatch() -> None:
    text = OBSTORE_403.replace("403 Forbidden", "301 Moved Permanently").format(
        code="PermanentRedirect", padding=""
    )
    err = translate_obstore_error(
        _obstore_error("GenericError", text),
        "s3://b/k",
        url="s3://b",
        key="k",
        redact=Redactor(),
        setup=_setup(),
    )
    assert isinstance(err, StoreError)
    assert str(err).startswith("PermanentRedirect: request failed reading s3://b/k")
    assert "set region" in str(err)


def test_fsspec_uses_botocores_structured_code() -> None:
    from botocore.exceptions import ClientError

    response: dict[str, Any] = {
        "Error": {"Code": "InvalidAccessKeyId", "Message": "cut"},
        "ResponseMetadata": {"HTTPStatusCode": 403},
    }
    cause = ClientError(response, "GetObject")
    try:
        raise PermissionError("Forbidden") from cause  # s3fs's translation keeps botocore's as the cause
    except PermissionError as exc:
        err = translate_fsspec_error(exc, "s3://b/k", url="s3://b", key="k", redact=Redactor(), service="s3")
    assert isinstance(err, StorePermissionError)
    assert str(err).startswith("InvalidAccessKeyId: permission denied reading s3://b/k"), str(err)
    assert "check AWS_ACCESS_KEY_ID" in str(err)


def test_a_bodyless_403_keeps_the_generic_hint() -> None:
    from botocore.exceptions import ClientError

    # A HEAD request's 403 has no body: botocore's "code" is the bare status, not a service code.
    cause = ClientError({"Error": {"Code": "403", "Message": "Forbidden"}}, "HeadObject")
    try:
        raise PermissionError("Forbidden") from cause
    except PermissionError as exc:
        err = translate_fsspec_error(exc, "s3://b/k", url="s3://b", key="k", redact=Redactor(), service="s3")
    assert str(err).startswith("permission denied reading s3://b/k"), str(err)
    assert "check them" in str(err)


def _setup() -> Any:
    from insitu_stores.cloud import CloudSetup

    return CloudSetup(service="s3", credentials=True)
