"""obstore: one Rust client for S3 (and S3-compatible servers), GCS, Azure, HTTP and local files.

:func:`obstore_store` returns an :class:`ObstoreStore`, a ``zarr.storage.ObjectStore``
that also translates obstore's errors (see :mod:`insitu_stores.errors`), tells a
missing bucket apart from a missing key, keeps credentials out of its repr and
messages, and offers the engine raw byte fetches (:meth:`ObstoreStore.insitu_get`,
:meth:`ObstoreStore.insitu_get_ranges`) without zarr's buffer wrapping.

Configuration: obstore reads ``AWS_*``, ``GOOGLE_*`` and ``AZURE_*`` variables
itself, but the ``client_options`` it is given replace the client options it
read from them (``AWS_ALLOW_HTTP``, ``AWS_PROXY_URL``...). The builder reads
those the way obstore does (:func:`insitu_stores.cloud.env_client_options`)
and merges, key by key: the environment's, then insitu's (the policy's
timeouts; ``allow_http`` when given or implied by an ``http://``
``endpoint=``), then the caller's ``client_options``.

Retries happen in obstore's Rust client, configured from insitu's
``RetryPolicy`` (attempts, backoff, request and connect timeouts): it knows
HTTP statuses, ``Retry-After`` and which requests are safe to repeat. The
store declares that policy (``insitu_retry_policy``), so insitu's engine does
not retry on top.

Errors are classified by obstore's exception types: permission and
authentication (permanent, with a hint about credentials), configuration,
invalid path and unsupported operation (permanent). obstore 0.12 has one type
(``GenericError``) for every other failure it gave up on, 5xx, reset,
timeout and a client that could not be built alike, with no status or kind as
data. Two of those are told apart by the store's own configuration, not the
message: an ``http://`` endpoint without ``allow_http`` (a misconfiguration:
every request fails before it is sent) and a failed request to the instance
metadata service when no credentials were configured (no credentials). The
rest become a plain :class:`~insitu_stores.errors.StoreError` carrying
obstore's reason, which nothing retries again (obstore already did).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from datetime import timedelta
from typing import Any

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.storage import ObjectStore

from insitu.plugin_api import ConfigError, RetryPolicy, native_call, redact_url
from insitu_stores.cloud import (
    CloudSetup,
    allow_http_hint,
    config_name,
    credentials_hint,
    env_client_options,
    env_secrets,
    obstore_setup,
)
from insitu_stores.error_codes import code_hint, service_error_code, with_code, without_error_body
from insitu_stores.errors import (
    Redactor,
    StoreConfigurationError,
    StoreError,
    StoreNotFoundError,
    StorePermissionError,
    StoreTimeoutError,
    TransientStoreError,
    first_line,
)
from insitu_stores.locations import Location, parse_location
from insitu_stores.retry import DEFAULT_RETRY, call_once
from insitu_stores.schemes import OBSTORE_SCHEMES

# What S3, Azure and GCS answer (in a 404 body) when the bucket or container itself is missing.
_BUCKET_MISSING = re.compile(
    r"NoSuchBucket|ContainerNotFound|The specified bucket does not exist", re.IGNORECASE
)


def obstore_store(
    url: str,
    *,
    read_only: bool = True,
    anonymous: bool = False,
    endpoint: str | None = None,
    region: str | None = None,
    requester_pays: bool = False,
    allow_http: bool | None = None,
    retry: RetryPolicy | None = None,
    client_options: dict[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    **config: Any,
) -> ObstoreStore:
    """A zarr store over ``url`` (s3, gs, az, http(s), file, memory) through obstore.

    - ``read_only`` (the default): a local path must exist (else
      ``FileNotFoundError``); ``read_only=False`` opens the store writable and
      creates a missing local directory.
    - ``anonymous=True``: unsigned requests (public buckets).
    - ``endpoint``: an S3-compatible server or Azure/GCS emulator; an
      ``http://`` endpoint turns on ``allow_http`` unless it is given.
    - ``region``, ``requester_pays`` (S3: the reader pays for the transfer).
    - Credentials are ordinary config keys, e.g. ``access_key_id`` /
      ``secret_access_key`` / ``session_token`` (S3), ``service_account_key``
      (GCS), ``account_name`` / ``account_key`` / ``sas_key`` (Azure); without
      them obstore reads the usual environment variables. They never appear
      in the store's repr or in its error messages, and neither do the
      credentials of a ``https://user:password@host/...`` URL or those in the
      environment. When none is found, or they are refused, the error says
      what to set or pass.
    - The environment configures what the options leave unset, as obstore
      reads it (``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP``, ``AWS_REGION``...):
      the client options insitu passes are merged on top of those obstore
      reads from the environment, key by key, instead of replacing them.
    - ``retry``: attempts, backoff, request and connect timeouts
      (``insitu.RetryPolicy``), applied by obstore's client; the store is the
      only layer that retries its requests.
    - ``client_options`` and any other ``config`` go to ``obstore.store.from_url``.
    - ``storage_options``: the fsspec spelling (s3fs, gcsfs, adlfs keys), as
      xarray takes it. Each key becomes the obstore option of the same
      meaning (:data:`STORAGE_OPTIONS`):

      ====================================  =================================================
      storage_options                       obstore
      ====================================  =================================================
      ``anon`` (s3, gs, az)                 ``skip_signature`` (as ``anonymous=``)
      ``key`` / ``secret`` / ``token`` (s3) ``access_key_id`` / ``secret_access_key`` /
                                            ``session_token``
      ``client_kwargs.aws_access_key_id``,  the same three
      ``..aws_secret_access_key``,
      ``..aws_session_token`` (s3)
      ``endpoint_url``, or                  ``endpoint`` (as ``endpoint=``; GCS: ``base_url``);
      ``client_kwargs.endpoint_url`` (s3)   ``http://`` also sets ``client_options.allow_http``
      ``region``,                           ``region``
      ``client_kwargs.region_name`` (s3)
      ``requester_pays`` (s3)               ``request_payer``
      ``token`` (gs)                        ``"anon"``: ``skip_signature``; a path:
                                            ``service_account``; a service-account dict:
                                            ``service_account_key``; ``"google_default"``:
                                            obstore's default (Application Default Credentials)
      ``account_name``, ``account_key``,    the same names
      ``client_id``, ``client_secret``,
      ``tenant_id`` (az)
      ``sas_token`` (az)                    ``sas_key``
      ====================================  =================================================

      A value of ``None`` means the backend's default, as in fsspec. Any
      other key, or a key for another service (``requester_pays`` on
      ``gs://``), or a value of the wrong type raises
      :class:`~insitu.errors.ConfigError` (a ``ValueError``) naming the key
      and listing the keys understood for the URL's scheme; nothing is
      dropped. An option given both in ``storage_options`` and as a keyword
      (``anon`` and ``anonymous=``, ``key`` and ``access_key_id=``) is an
      error naming both. ``open_store(url, backend="fsspec",
      storage_options=...)`` passes fsspec options unchanged instead.

    Building the store sends no request; a wrong bucket, a 403 or an
    unreachable endpoint surface on the first read, as the errors in
    :mod:`insitu_stores.errors`. Raises ``ValueError`` for a malformed URL or
    an option that does not apply to the URL's scheme.
    """
    from obstore.store import from_url

    loc = parse_location(url)
    retry = retry or DEFAULT_RETRY
    config = dict(config)
    if storage_options is not None:
        anonymous, endpoint, region, requester_pays = _apply_storage_options(
            loc,
            storage_options,
            config,
            anonymous=anonymous,
            endpoint=endpoint,
            region=region,
            requester_pays=requester_pays,
        )
    cloud = loc.service in ("s3", "gs", "az")
    _check_applies(loc, "anonymous", anonymous, cloud)
    _check_applies(loc, "endpoint", endpoint, cloud)
    _check_applies(loc, "region", region, loc.service == "s3")
    _check_applies(loc, "requester_pays", requester_pays, loc.service == "s3")
    if anonymous:
        config["skip_signature"] = True
    if endpoint:
        # obstore's GCS client calls its endpoint base_url (and has no "endpoint" key).
        config["base_url" if loc.service == "gs" else "endpoint"] = endpoint
    if region:
        config["region"] = region
    if requester_pays:
        config["request_payer"] = True
    options: dict[str, Any] = {}
    if loc.service not in ("file", "memory"):
        # obstore replaces the client options it read from the environment (AWS_ALLOW_HTTP...)
        # with any it is given: start from those, then insitu's, then the caller's, key by key.
        options.update(env_client_options(loc.service, os.environ))
        options.update(client_timeouts(retry))
        if allow_http is not None:
            options["allow_http"] = allow_http
        elif loc.service == "http" or bool(endpoint and endpoint.startswith("http://")):
            options["allow_http"] = True
        options.update(client_options or {})
        config.setdefault("retry_config", retry_config(retry))
    elif client_options:
        raise ValueError(f"client_options do not apply to {loc.scheme}:// URLs ({loc.safe_url!r})")
    setup = obstore_setup(loc.service, config, options, environ=os.environ)
    target = _basic_auth_header(url, options) if loc.service in ("http", "https") else url
    redact = Redactor.from_options(
        {**config, "client_options": options}, urls=(url, setup.endpoint), extra=env_secrets(os.environ)
    )
    try:
        if options:
            config["client_options"] = options
        if loc.service == "file":
            # obstore's LocalStore wants the directory to exist; say which one is missing.
            _check_local_dir(loc, read_only)
        inner = from_url(target, **config)
    except (ValueError, TypeError, OSError) as exc:
        raise type(exc)(
            f"cannot open {loc.safe_url!r} with obstore: {redact(first_line(str(exc)))}"
        ) from None
    except Exception as exc:  # obstore's own config errors (unknown key...)
        raise ValueError(
            f"cannot open {loc.safe_url!r} with obstore: {redact(first_line(str(exc)))}"
        ) from None
    return ObstoreStore(
        inner,
        read_only=read_only,
        location=loc,
        endpoint=setup.endpoint,
        retry=retry,
        redact=redact,
        setup=setup,
    )


# -- storage_options (the fsspec spelling) ---------------------------------------------------------
_GCS_TOKEN = "<gcsfs token>"  # a target decided by the token's value, see _gcs_token

#: fsspec ``storage_options`` keys obstore understands, per service ("s3", "gs", "az"): the
#: :func:`obstore_store` keyword (``anonymous``, ``endpoint``, ``region``, ``requester_pays``) or
#: obstore configuration key each becomes, and the value types fsspec takes for it. A key under
#: ``client_kwargs`` is written ``client_kwargs.<name>``.
STORAGE_OPTIONS: dict[str, dict[str, tuple[str, tuple[type, ...]]]] = {
    "s3": {
        "anon": ("anonymous", (bool,)),
        "key": ("access_key_id", (str,)),
        "secret": ("secret_access_key", (str,)),
        "token": ("session_token", (str,)),
        "endpoint_url": ("endpoint", (str,)),
        "region": ("region", (str,)),
        "requester_pays": ("requester_pays", (bool,)),
        "client_kwargs.endpoint_url": ("endpoint", (str,)),
        "client_kwargs.region_name": ("region", (str,)),
        "client_kwargs.aws_access_key_id": ("access_key_id", (str,)),
        "client_kwargs.aws_secret_access_key": ("secret_access_key", (str,)),
        "client_kwargs.aws_session_token": ("session_token", (str,)),
    },
    "gs": {
        "anon": ("anonymous", (bool,)),
        "token": (_GCS_TOKEN, (str, dict)),
        "endpoint_url": ("endpoint", (str,)),
    },
    "az": {
        "anon": ("anonymous", (bool,)),
        "account_name": ("account_name", (str,)),
        "account_key": ("account_key", (str,)),
        "sas_token": ("sas_key", (str,)),
        "client_id": ("client_id", (str,)),
        "client_secret": ("client_secret", (str,)),
        "tenant_id": ("tenant_id", (str,)),
    },
}
_KEYWORD_TARGETS = ("anonymous", "endpoint", "region", "requester_pays")
# gcsfs token methods that need gcsfs's own machinery (its credential cache, a browser flow,
# the metadata server by name): obstore has no equivalent to ask for.
_GCSFS_METHODS = ("cache", "browser", "cloud")


def _apply_storage_options(
    loc: Location,
    storage_options: Mapping[str, Any],
    config: dict[str, Any],
    *,
    anonymous: bool,
    endpoint: str | None,
    region: str | None,
    requester_pays: bool,
) -> tuple[bool, str | None, str | None, bool]:
    """Fold ``storage_options`` into ``config`` (in place) and the four shared keywords (returned).

    Raises :class:`ConfigError` for an option the keywords or ``config`` already set.
    """
    keywords: dict[str, Any] = {
        "anonymous": anonymous,
        "endpoint": endpoint,
        "region": region,
        "requester_pays": requester_pays,
    }
    for target, (source, value) in storage_options_to_obstore(loc, storage_options).items():
        if target in keywords:
            if keywords[target] not in (None, False):
                raise _conflict(source, f"{target}=")
            keywords[target] = value
            continue
        clash = next((k for k in config if config_name(k) == config_name(target)), None)
        if clash is not None:
            raise _conflict(source, f"{clash}=")
        config[target] = value
    return keywords["anonymous"], keywords["endpoint"], keywords["region"], keywords["requester_pays"]


def storage_options_to_obstore(
    loc: Location, storage_options: Mapping[str, Any]
) -> dict[str, tuple[str, Any]]:
    """``{obstore_store keyword or obstore config key: (storage_options key as shown, value)}``.

    See :data:`STORAGE_OPTIONS`. ``None`` values are left out (fsspec's
    "use the default"). Raises :class:`ConfigError` naming a key obstore has
    no equivalent for (with the keys it understands for ``loc``'s service),
    a value of the wrong type, or two keys that set the same option.
    """
    if not isinstance(storage_options, Mapping):
        raise ConfigError(f"storage_options must be a dict of options, got {type(storage_options).__name__}")
    rules = STORAGE_OPTIONS.get(loc.service, {})
    # (name in STORAGE_OPTIONS, name as messages show it, value)
    flat: list[tuple[str, str, Any]] = []
    for name, value in storage_options.items():
        shown = f"storage_options[{name!r}]"
        if name == "client_kwargs" and any(r.startswith("client_kwargs.") for r in rules):
            if value is None:
                continue
            if not isinstance(value, Mapping):
                raise ConfigError(f"{shown} must be a dict, got {type(value).__name__}")
            flat.extend((f"client_kwargs.{k}", f"{shown}[{k!r}]", v) for k, v in value.items())
        else:
            flat.append((str(name), shown, value))
    out: dict[str, tuple[str, Any]] = {}
    for name, shown, value in flat:
        rule = rules.get(name)
        if rule is None:
            raise _unknown_option(loc, shown, rules)
        target, kinds = rule
        if value is None:
            continue
        if not isinstance(value, kinds):
            wanted = " or ".join("a dict" if k is dict else f"a {k.__name__}" for k in kinds)
            # Only the type is shown: the value may be a credential.
            raise ConfigError(f"{shown} must be {wanted}, got {type(value).__name__}")
        if target == _GCS_TOKEN:
            found = _gcs_token(value)
            if found is None:
                continue
            target, value = found
        if target in out:
            raise ConfigError(
                f"{out[target][0]} and {shown} set the same option (obstore {target}); give it once"
            )
        out[target] = (shown, value)
    return out


def _gcs_token(token: Any) -> tuple[str, Any] | None:
    """The obstore option for a gcsfs ``token``; ``None`` for obstore's default credentials."""
    if isinstance(token, dict):
        if token.get("type") != "service_account":
            raise ConfigError(
                "storage_options['token'] as a dict must be service-account JSON "
                '("type": "service_account"), the only credential dict obstore takes '
                "(service_account_key); got another kind"
            )
        return "service_account_key", json.dumps(token)
    if token == "anon":
        return "anonymous", True
    if token == "google_default":
        return None  # obstore's default chain is Application Default Credentials too
    if token in _GCSFS_METHODS:
        raise ConfigError(
            f"storage_options['token'] = {token!r} is a gcsfs login method obstore has no equivalent "
            "for; pass a service-account JSON path or dict, 'anon', 'google_default', or open with "
            "backend='fsspec'"
        )
    return "service_account", token  # gcsfs reads any other string as a service-account JSON file


def _unknown_option(loc: Location, shown: str, rules: Mapping[str, Any]) -> ConfigError:
    understood = ", ".join(sorted(rules)) or "none"
    return ConfigError(
        f"{shown} has no obstore equivalent for {loc.scheme}:// URLs "
        f"(storage_options understood there: {understood}); pass obstore options as keywords, "
        "or open with backend='fsspec' to hand storage_options to fsspec unchanged"
    )


def _conflict(shown: str, keyword: str) -> ConfigError:
    return ConfigError(f"{shown} and {keyword} set the same option; give it once")


def retry_config(policy: RetryPolicy) -> dict[str, Any]:
    """obstore's ``retry_config`` for ``policy``: the same attempts and backoff, per request."""
    longest = policy.longest_call_s()
    return {
        "max_retries": policy.retries,
        "backoff": {
            "init_backoff": timedelta(seconds=policy.backoff_s),
            "max_backoff": timedelta(seconds=max(policy.max_backoff_s, policy.backoff_s)),
            "base": 2.0,
        },
        # retry_timeout bounds the whole retry sequence; leave room for every attempt.
        "retry_timeout": timedelta(seconds=longest if longest is not None else 300.0 * policy.attempts),
    }


def client_timeouts(policy: RetryPolicy) -> dict[str, Any]:
    """obstore ``client_options`` for ``policy``: per-request and connect timeouts."""
    options: dict[str, Any] = {"connect_timeout": timedelta(seconds=policy.connect_timeout_s)}
    if policy.timeout_s is not None:
        options["timeout"] = timedelta(seconds=policy.timeout_s)
    return options


def _basic_auth_header(url: str, options: dict[str, Any]) -> str:
    """``url`` without its ``user:password@``, which becomes an ``Authorization: Basic`` header.

    obstore's HTTP client ignores credentials in the URL and sends the request
    unauthenticated; fsspec's (aiohttp) sends them as Basic authentication, so
    both backends now do. An ``Authorization`` header given in
    ``client_options["default_headers"]`` wins.
    """
    import base64
    from urllib.parse import unquote, urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode()
    headers = dict(options.get("default_headers") or {})
    if not any(name.lower() == "authorization" for name in headers):
        headers["Authorization"] = f"Basic {token}"
    options["default_headers"] = headers
    return urlunsplit(parts._replace(netloc=host))


def _check_applies(loc: Location, name: str, value: Any, applies: bool) -> None:
    if value and not applies:
        raise ValueError(f"{name}= does not apply to {loc.scheme}:// URLs ({loc.safe_url!r})")


def _check_local_dir(loc: Location, read_only: bool) -> None:
    import errno
    from pathlib import Path

    path = Path(loc.prefix or "/")
    if read_only and not path.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no Zarr store at this path", str(path))
    if not read_only:
        path.mkdir(parents=True, exist_ok=True)


class ObstoreStore(ObjectStore):
    """``zarr.storage.ObjectStore`` with translated errors, a safe repr and raw fetches."""

    def __init__(
        self,
        store: Any,
        *,
        read_only: bool = False,
        location: Location | None = None,
        endpoint: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        redact: Redactor | None = None,
        setup: CloudSetup | None = None,
    ) -> None:
        super().__init__(store, read_only=read_only)
        self.location = location or parse_location(f"memory:///{id(store):x}")
        self.endpoint = endpoint
        self.retry = retry
        self._redact = redact or Redactor()
        self._setup = setup
        self._retries = 0
        self._timeouts = 0

    # -- identity and display (never credentials) ---------------------------
    @property
    def url(self) -> str:
        """The store's URL, with the endpoint when one was given; credentials hidden."""
        if self.endpoint:
            return f"{self.location.safe_url} (endpoint {redact_url(self.endpoint)})"
        return self.location.safe_url

    def insitu_identity(self) -> str:
        """What the engine's persisted-cache fingerprint records for this store.

        The location without its credentials: a rotated password or a
        re-signed URL is the same data, and a fingerprint must not hold a
        secret (a hash of a short password can be guessed back).
        """
        endpoint = redact_url(self.endpoint) if self.endpoint else "default"
        return f"obstore:{self.location.safe_url}@{endpoint}"

    @property
    def insitu_retry_policy(self) -> RetryPolicy:
        """The policy obstore's client applies to every request of this store."""
        return self.retry

    @property
    def cloud_setup(self) -> CloudSetup | None:
        """What the client was configured with, options and environment together (``None`` for a
        store wrapped directly)."""
        return self._setup

    async def insitu_object_version(self, key: str) -> str | None:
        """The object's ETag (or version id, or size and modification time); ``None`` if absent.

        One HEAD request on object storage; on local files obstore's ETag is
        made from the file's inode, size and modification time.
        """
        import obstore as obs

        async def head() -> str | None:
            try:
                meta = await native_call(obs.head_async(self.store, key))
            except FileNotFoundError as exc:
                self._raise_if_bucket_missing(exc)
                return None
            return _version_of(meta)

        return await self._guarded(key, head)

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"ObstoreStore({self.url!r}, read_only={self.read_only})"

    def with_read_only(self, read_only: bool = False) -> ObstoreStore:
        """A copy of this store over the same obstore client and options, read-only or not."""
        return ObstoreStore(
            self.store,
            read_only=read_only,
            location=self.location,
            endpoint=self.endpoint,
            retry=self.retry,
            redact=self._redact,
            setup=self._setup,
        )

    def __eq__(self, value: object) -> bool:
        return (
            isinstance(value, ObstoreStore)
            and value.location == self.location
            and value.endpoint == self.endpoint
            and value.read_only == self.read_only
        )

    __hash__ = None  # type: ignore[assignment]  # mutable-looking equality, as zarr's stores

    # -- reads ---------------------------------------------------------------
    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """The object at ``key`` (or the requested range); ``None`` when it is missing. obstore retries
        under the store's policy; failures raise insitu's store errors, secrets redacted."""
        raw = await self._guarded(key, lambda: self._fetch(key, byte_range))
        return None if raw is None else prototype.buffer.from_bytes(raw)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        """Several reads, concurrently, each through :meth:`get`."""
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        """Whether ``key`` exists (one HEAD request); failures raise insitu's store errors."""
        import obstore as obs

        async def head() -> bool:
            try:
                await native_call(obs.head_async(self.store, key))
            except FileNotFoundError:
                return False
            return True

        return bool(await self._guarded(key, head))

    async def insitu_get(
        self, key: str, byte_range: tuple[int, int] | None = None, suffix: int | None = None
    ) -> Any:
        """Raw bytes (a buffer-protocol object) of ``key`` or a range of it; ``None`` if absent.

        The engine's fast path: one obstore call, no zarr Buffer in between.
        """
        request: ByteRequest | None = None
        if byte_range is not None:
            request = RangeByteRequest(byte_range[0], byte_range[1])
        elif suffix is not None:
            request = SuffixByteRequest(suffix)
        return await self._guarded(key, lambda: self._fetch(key, request))

    async def insitu_get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[Any] | None:
        """Several ``[start, end)`` ranges of one object in one call (obstore merges close ones).

        For sharded arrays: the inner chunks a batch needs from one shard.
        ``None`` when the object does not exist.
        """
        import obstore as obs

        async def op() -> list[Any] | None:
            try:
                return list(
                    await native_call(
                        obs.get_ranges_async(
                            self.store, key, starts=[r[0] for r in ranges], ends=[r[1] for r in ranges]
                        )
                    )
                )
            except FileNotFoundError as exc:
                self._raise_if_bucket_missing(exc)
                return None

        return await self._guarded(key, op)

    async def _fetch(self, key: str, byte_range: ByteRequest | None) -> Any:
        import obstore as obs

        try:
            if byte_range is None:
                resp = await native_call(obs.get_async(self.store, key))
                return await native_call(resp.bytes_async())
            if isinstance(byte_range, RangeByteRequest):
                return await native_call(
                    obs.get_range_async(self.store, key, start=byte_range.start, end=byte_range.end)
                )
            if isinstance(byte_range, OffsetByteRequest):
                resp = await native_call(
                    obs.get_async(self.store, key, options={"range": {"offset": byte_range.offset}})
                )
                return await native_call(resp.bytes_async())
            if isinstance(byte_range, SuffixByteRequest):
                try:
                    resp = await native_call(
                        obs.get_async(self.store, key, options={"range": {"suffix": byte_range.suffix}})
                    )
                    return await native_call(resp.bytes_async())
                except obs.exceptions.NotSupportedError:  # Azure has no suffix ranges
                    size = (await native_call(obs.head_async(self.store, key)))["size"]
                    start = max(0, size - byte_range.suffix)
                    return await native_call(obs.get_range_async(self.store, key, start=start, end=size))
            raise TypeError(f"unexpected byte range {byte_range!r}")
        except FileNotFoundError as exc:
            self._raise_if_bucket_missing(exc)
            return None

    def _raise_if_bucket_missing(self, exc: BaseException) -> None:
        if _BUCKET_MISSING.search(str(exc)):
            loc = self.location
            where = f" at {redact_url(self.endpoint)}" if self.endpoint else ""
            message = f"bucket {loc.bucket!r} does not exist{where} (opening {loc.safe_url})"
            raise StoreNotFoundError(
                with_code(service_error_code(exc), message), url=self.url
            ) from None  # the backend's message may quote the request URL

    async def _guarded(self, key: str, op: Callable[[], Awaitable[Any]]) -> Any:
        # obstore retries inside Rust; the deadline is only a backstop for a request that hangs
        # past the client's own timeouts, so it lies beyond every attempt obstore may make.
        longest = self.retry.longest_call_s()
        deadline = None if longest is None else longest + 1.0
        started = time.monotonic()
        try:
            return await call_once(op, deadline_s=deadline, translate=self._translate, key=key, url=self.url)
        except StoreTimeoutError:
            self._count_timed_out_call()
            raise
        except StoreError as exc:
            if type(exc) is not StoreError or not self._every_attempt_timed_out(time.monotonic() - started):
                raise
            self._count_timed_out_call()
            raise StoreTimeoutError(
                f"timed out reading {self.location.join(key)}: no answer within {self.retry.timeout_s:g} s "
                f"per attempt, {self.retry.attempts} attempts (obstore: {exc})",
                url=self.url,
                key=key,
            ) from None

    def _every_attempt_timed_out(self, elapsed_s: float) -> bool:
        """obstore 0.12 reports a timeout with its generic type, without a kind or status; a failed
        call that lasted as long as every attempt's time limit together can only have timed out
        on each attempt (a refused or failing request answers well within its limit)."""
        limit = self.retry.timeout_s
        return limit is not None and elapsed_s >= self.retry.attempts * limit

    def _count_timed_out_call(self) -> None:
        self._timeouts += self.retry.attempts
        self._retries += self.retry.retries

    @property
    def insitu_retries(self) -> int:
        """Retries obstore made that this store knows of: those of calls that timed out on every
        attempt (obstore 0.12 reports no count for the others)."""
        return self._retries

    @property
    def insitu_timeouts(self) -> int:
        """Requests that ran past the policy's ``timeout_s`` (each attempt of a timed-out call)."""
        return self._timeouts

    def _translate(self, exc: BaseException, key: str | None) -> StoreError | None:
        where = self.location.join(key) if key else self.location.safe_url
        if self.endpoint:
            where += f" (endpoint {redact_url(self.endpoint)})"
        return translate_obstore_error(
            exc, where, url=self.url, key=key, redact=self._redact, setup=self._setup
        )

    # -- writes --------------------------------------------------------------
    # zarr's own methods, with each request awaited through native_call (see insitu.store.native_calls).
    async def set(self, key: str, value: Buffer) -> None:
        """Write ``value`` at ``key``."""
        import obstore as obs

        self._check_writable()
        await native_call(obs.put_async(self.store, key, value.as_buffer_like()))

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        """Write ``value`` at ``key`` unless an object is there already."""
        import obstore as obs

        self._check_writable()
        with contextlib.suppress(obs.exceptions.AlreadyExistsError):
            await native_call(obs.put_async(self.store, key, value.as_buffer_like(), mode="create"))

    async def delete(self, key: str) -> None:
        """Delete ``key``; a missing key is not an error (local files and S3 alike)."""
        import obstore as obs

        self._check_writable()
        with contextlib.suppress(FileNotFoundError):
            await native_call(obs.delete_async(self.store, key))

    # -- listings ------------------------------------------------------------
    def list(self) -> AsyncGenerator[str, None]:
        """Every key; a missing bucket or a failure raises insitu's store errors."""
        return self._guard_listing(self._paths(None))

    def list_prefix(self, prefix: str) -> AsyncGenerator[str, None]:
        """The keys under ``prefix``; a missing bucket or a failure raises insitu's store errors."""
        return self._guard_listing(self._paths(prefix))

    def list_dir(self, prefix: str) -> AsyncGenerator[str, None]:
        """The entries directly under ``prefix``; a missing bucket or a failure raises insitu's store errors."""
        return self._guard_listing(self._entries(prefix))

    async def _paths(self, prefix: str | None) -> AsyncGenerator[str, None]:
        import obstore as obs

        stream = obs.list(self.store, prefix=prefix)
        while True:
            try:
                page = await native_call(stream.__anext__())
            except StopAsyncIteration:
                return
            for meta in page:
                yield meta["path"]

    async def _entries(self, prefix: str) -> AsyncGenerator[str, None]:
        import obstore as obs

        listing = await native_call(obs.list_with_delimiter_async(self.store, prefix=prefix))
        base = prefix.rstrip("/")
        paths = [*listing["common_prefixes"], *(meta["path"] for meta in listing["objects"])]
        for path in paths:
            relative = path[len(base) + 1 :] if base and path.startswith(base + "/") else path
            if relative and path != base:
                yield relative

    async def _guard_listing(self, listing: AsyncIterator[str]) -> AsyncGenerator[str, None]:
        try:
            async for key in listing:
                yield key
        except FileNotFoundError as exc:
            self._raise_if_bucket_missing(exc)
            return
        except Exception as exc:
            err = self._translate(exc, None)
            if err is None:
                raise
            raise err from None


def translate_obstore_error(
    exc: BaseException,
    where: str,
    *,
    url: str,
    key: str | None,
    redact: Redactor,
    setup: CloudSetup | None = None,
) -> StoreError | None:
    """The store error for an obstore exception, or ``None`` if it is not a request failure.

    ``where`` (the object's URL) leads the message; ``redact`` scrubs secrets
    from it. ``setup`` (what the store was configured with) lets two
    misconfigurations that obstore 0.12 reports only with its generic type be
    recognised from the configuration rather than the message: a plain
    ``http://`` endpoint without ``allow_http`` (every request fails before it
    is sent) and no credentials at all (obstore asked the instance metadata
    service, an address the configuration names, and got none). Both are
    permanent. Permission and credential errors carry a hint saying what to
    set, per cloud; never a value. The service's error code
    (``SignatureDoesNotMatch``...), when its response carried one, leads the
    message and picks the hint.
    """
    if isinstance(exc, StoreError):
        return exc
    from obstore import exceptions as oe

    # obstore keeps the service's error code only in the XML body it quotes, past the first line.
    code = service_error_code(exc)
    text = redact(without_error_body(first_line(str(exc))))
    service = setup.service if setup is not None else ""
    if isinstance(exc, (oe.PermissionDeniedError, oe.UnauthenticatedError, PermissionError)):
        kind = "not authenticated" if isinstance(exc, oe.UnauthenticatedError) else "permission denied"
        anonymous = bool(setup and setup.anonymous)
        hint = (not anonymous and code_hint(code, service)) or credentials_hint(service, anonymous=anonymous)
        return StorePermissionError(
            with_code(code, f"{kind} reading {where}: {_hinted(text, hint)}"), url=url, key=key
        )
    if isinstance(exc, _configuration_errors(oe)):
        return StoreConfigurationError(with_code(code, f"cannot read {where}: {text}"), url=url, key=key)
    if isinstance(exc, oe.GenericError) and setup is not None:
        if setup.plain_http_refused:
            return StoreConfigurationError(
                f"cannot read {where}: {allow_http_hint(service)} (obstore: {text})", url=url, key=key
            )
        if not setup.anonymous and setup.names_credential_service(str(exc)):
            hint = (
                "could not get credentials from the source the configuration names"
                if setup.credentials
                else credentials_hint(service, found=False)
            )
            return StorePermissionError(
                f"cannot read {where}: {hint} (obstore asked the credentials service: {text})",
                url=url,
                key=key,
            )
    if isinstance(exc, TimeoutError):
        return StoreTimeoutError(f"timed out reading {where}: {text}", url=url, key=key)
    if isinstance(exc, ConnectionError):
        return TransientStoreError(f"connection failed reading {where}: {text}", url=url, key=key)
    if isinstance(exc, (oe.BaseError, OSError)):
        # GenericError and the rest: obstore already retried what it could under the store's
        # policy, and 0.12 gives no finer type or status; its reason is in the text.
        hint = code_hint(code, service)
        return StoreError(
            with_code(code, f"request failed reading {where}: {_hinted(text, hint)}"), url=url, key=key
        )
    return None


def _hinted(text: str, hint: str) -> str:
    return f"{hint} (obstore: {text})" if hint else text


def _configuration_errors(oe: Any) -> tuple[type[BaseException], ...]:
    """obstore's types for a request that no retry can fix: the store or the path is wrong."""
    return (oe.UnknownConfigurationKeyError, oe.InvalidPathError, oe.NotSupportedError)


def _version_of(meta: Any) -> str:
    """An object's version from obstore's ``ObjectMeta``: ETag, else version id, else size and mtime."""
    tag = meta.get("e_tag") or meta.get("version")
    return str(tag) if tag else f"{meta['size']}-{meta['last_modified'].isoformat()}"


__all__ = [
    "OBSTORE_SCHEMES",
    "STORAGE_OPTIONS",
    "ObstoreStore",
    "obstore_store",
    "storage_options_to_obstore",
    "translate_obstore_error",
]
