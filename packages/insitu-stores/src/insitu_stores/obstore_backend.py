"""obstore: one Rust client for S3 (and S3-compatible servers), GCS, Azure, HTTP and local files.

:func:`obstore_store` returns an :class:`ObstoreStore`, a ``zarr.storage.ObjectStore``
that also translates obstore's errors (see :mod:`insitu_stores.errors`), tells a
missing bucket apart from a missing key, keeps credentials out of its repr and
messages, and offers the engine raw byte fetches (:meth:`ObstoreStore.insitu_get`,
:meth:`ObstoreStore.insitu_get_ranges`) without zarr's buffer wrapping.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.storage import ObjectStore

from insitu_stores.errors import (
    Redactor,
    StoreError,
    StoreNotFoundError,
    StorePermissionError,
    StoreTimeoutError,
    TransientStoreError,
    first_line,
)
from insitu_stores.locations import Location, parse_location
from insitu_stores.retry import DEFAULT_RETRY, StoreRetry, call_with_retry
from insitu_stores.schemes import OBSTORE_SCHEMES

# What S3, Azure and GCS answer (in a 404 body) when the bucket or container itself is missing.
_BUCKET_MISSING = re.compile(
    r"NoSuchBucket|ContainerNotFound|The specified bucket does not exist", re.IGNORECASE
)
_STATUS = re.compile(r"status(?: code)?:?\s*(\d{3})")
_TRANSIENT_TEXT = re.compile(
    r"error sending request|connection (?:reset|refused|closed)|broken pipe|"
    r"incomplete message|error reading a body|dns error|HTTP error",
    re.IGNORECASE,
)
# obstore reports a timeout in its debug dump (kind: Timeout / TimedOut); "retry_timeout: 13s"
# appears in every message and must not count.
_TIMEOUT_TEXT = re.compile(r"TimedOut|kind: Timeout|timed out", re.IGNORECASE)


def obstore_store(
    url: str,
    *,
    read_only: bool = True,
    anonymous: bool = False,
    endpoint: str | None = None,
    region: str | None = None,
    requester_pays: bool = False,
    allow_http: bool | None = None,
    retry: StoreRetry | None = None,
    client_options: dict[str, Any] | None = None,
    **config: Any,
) -> ObstoreStore:
    """A zarr store over ``url`` (s3, gs, az, http(s), file, memory) through obstore.

    - ``anonymous=True``: unsigned requests (public buckets).
    - ``endpoint``: an S3-compatible server or Azure/GCS emulator; an
      ``http://`` endpoint turns on ``allow_http`` unless it is given.
    - ``region``, ``requester_pays`` (S3: the reader pays for the transfer).
    - Credentials are ordinary config keys, e.g. ``access_key_id`` /
      ``secret_access_key`` / ``session_token`` (S3), ``service_account_key``
      (GCS), ``account_name`` / ``account_key`` / ``sas_key`` (Azure); without
      them obstore reads the usual environment variables. They never appear
      in the store's repr or in its error messages.
    - ``retry``: attempts, backoff and per-request timeout (:class:`StoreRetry`).
    - ``client_options`` and any other ``config`` go to ``obstore.store.from_url``.

    Building the store sends no request; a wrong bucket, a 403 or an
    unreachable endpoint surface on the first read, as the errors in
    :mod:`insitu_stores.errors`. Raises ``ValueError`` for a malformed URL or
    an option that does not apply to the URL's scheme.
    """
    from obstore.store import from_url

    loc = parse_location(url)
    retry = retry or DEFAULT_RETRY
    config = dict(config)
    cloud = loc.service in ("s3", "gs", "az")
    _check_applies(loc, "anonymous", anonymous, cloud)
    _check_applies(loc, "endpoint", endpoint, cloud)
    _check_applies(loc, "region", region, loc.service == "s3")
    _check_applies(loc, "requester_pays", requester_pays, loc.service == "s3")
    if anonymous:
        config["skip_signature"] = True
    if endpoint:
        config["endpoint"] = endpoint
    if region:
        config["region"] = region
    if requester_pays:
        config["request_payer"] = True
    options: dict[str, Any] = {}
    if loc.service not in ("file", "memory"):
        options.update(retry.obstore_client_options())
        if allow_http is None:
            allow_http = loc.service == "http" or bool(endpoint and endpoint.startswith("http://"))
        if allow_http:
            options["allow_http"] = True
        options.update(client_options or {})
        config.setdefault("retry_config", retry.obstore_retry_config())
    elif client_options:
        raise ValueError(f"client_options do not apply to {loc.scheme}:// URLs ({url!r})")
    redact = Redactor.from_options({**config, "client_options": options})
    try:
        if options:
            config["client_options"] = options
        if loc.service == "file":
            # obstore's LocalStore wants the directory to exist; say which one is missing.
            _check_local_dir(loc, read_only)
        inner = from_url(url, **config)
    except (ValueError, TypeError, OSError) as exc:
        raise type(exc)(f"cannot open {url!r} with obstore: {redact(first_line(str(exc)))}") from None
    except Exception as exc:  # obstore's own config errors (unknown key...)
        raise ValueError(f"cannot open {url!r} with obstore: {redact(first_line(str(exc)))}") from None
    return ObstoreStore(
        inner, read_only=read_only, location=loc, endpoint=endpoint, retry=retry, redact=redact
    )


def _check_applies(loc: Location, name: str, value: Any, applies: bool) -> None:
    if value and not applies:
        raise ValueError(f"{name}= does not apply to {loc.scheme}:// URLs ({loc.url!r})")


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
        retry: StoreRetry = DEFAULT_RETRY,
        redact: Redactor | None = None,
    ) -> None:
        super().__init__(store, read_only=read_only)
        self.location = location or parse_location(f"memory:///{id(store):x}")
        self.endpoint = endpoint
        self.retry = retry
        self._redact = redact or Redactor()

    # -- identity and display (never credentials) ---------------------------
    @property
    def url(self) -> str:
        """The store's URL, with the endpoint when one was given."""
        if self.endpoint:
            return f"{self.location.url} (endpoint {self.endpoint})"
        return self.location.url

    def insitu_identity(self) -> str:
        """What the engine's persisted-cache fingerprint records for this store."""
        return f"obstore:{self.location.url}@{self.endpoint or 'default'}"

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"ObstoreStore({self.url!r}, read_only={self.read_only})"

    def with_read_only(self, read_only: bool = False) -> ObstoreStore:
        return ObstoreStore(
            self.store,
            read_only=read_only,
            location=self.location,
            endpoint=self.endpoint,
            retry=self.retry,
            redact=self._redact,
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
        raw = await self._guarded(key, lambda: self._fetch(key, byte_range))
        return None if raw is None else prototype.buffer.from_bytes(raw)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        import obstore as obs

        async def head() -> bool:
            try:
                await obs.head_async(self.store, key)
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
                    await obs.get_ranges_async(
                        self.store, key, starts=[r[0] for r in ranges], ends=[r[1] for r in ranges]
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
                resp = await obs.get_async(self.store, key)
                return await resp.bytes_async()
            if isinstance(byte_range, RangeByteRequest):
                return await obs.get_range_async(self.store, key, start=byte_range.start, end=byte_range.end)
            if isinstance(byte_range, OffsetByteRequest):
                resp = await obs.get_async(self.store, key, options={"range": {"offset": byte_range.offset}})
                return await resp.bytes_async()
            if isinstance(byte_range, SuffixByteRequest):
                try:
                    resp = await obs.get_async(
                        self.store, key, options={"range": {"suffix": byte_range.suffix}}
                    )
                    return await resp.bytes_async()
                except obs.exceptions.NotSupportedError:  # Azure has no suffix ranges
                    size = (await obs.head_async(self.store, key))["size"]
                    start = max(0, size - byte_range.suffix)
                    return await obs.get_range_async(self.store, key, start=start, end=size)
            raise TypeError(f"unexpected byte range {byte_range!r}")
        except FileNotFoundError as exc:
            self._raise_if_bucket_missing(exc)
            return None

    def _raise_if_bucket_missing(self, exc: BaseException) -> None:
        if _BUCKET_MISSING.search(str(exc)):
            loc = self.location
            where = f" at {self.endpoint}" if self.endpoint else ""
            raise StoreNotFoundError(
                f"bucket {loc.bucket!r} does not exist{where} (opening {loc.url})", url=self.url
            )

    async def _guarded(self, key: str, op: Callable[[], Awaitable[Any]]) -> Any:
        # obstore already retried inside Rust (attempts=0 here); the timeout is a backstop
        # for a request that hangs past the client's own timeouts.
        return await call_with_retry(
            op, retry=self._backstop, translate=self._translate, key=key, url=self.url, attempts=0
        )

    @property
    def _backstop(self) -> StoreRetry:
        r = self.retry
        if r.timeout_s is None:
            return r
        # Past every attempt obstore may make, so its own timeout always fires first.
        total = (r.retries + 1) * (r.timeout_s + r.connect_timeout_s) + r.retries * r.max_backoff_s
        return StoreRetry(retries=0, timeout_s=total + 1.0)

    def _translate(self, exc: BaseException, key: str | None) -> StoreError | None:
        where = self.location.join(key) if key else self.location.url
        if self.endpoint:
            where += f" (endpoint {self.endpoint})"
        return translate_obstore_error(exc, where, url=self.url, key=key, redact=self._redact)

    # -- listings ------------------------------------------------------------
    def list(self) -> AsyncGenerator[str, None]:
        return self._guard_listing(super().list())

    def list_prefix(self, prefix: str) -> AsyncGenerator[str, None]:
        return self._guard_listing(super().list_prefix(prefix))

    def list_dir(self, prefix: str) -> AsyncGenerator[str, None]:
        return self._guard_listing(super().list_dir(prefix))

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
    exc: BaseException, where: str, *, url: str, key: str | None, redact: Redactor
) -> StoreError | None:
    """The store error for an obstore exception, or ``None`` if it is not a request failure.

    ``where`` (the object's URL) leads the message; ``redact`` scrubs secrets from it.
    """
    if isinstance(exc, StoreError):
        return exc
    try:
        from obstore import exceptions as oe
    except ImportError:  # pragma: no cover - obstore is a dependency
        return None
    text = redact(first_line(str(exc)))
    if isinstance(exc, (oe.PermissionDeniedError, oe.UnauthenticatedError)):
        kind = "permission denied" if isinstance(exc, oe.PermissionDeniedError) else "not authenticated"
        return StorePermissionError(f"{kind} reading {where}: {text}", url=url, key=key)
    if isinstance(exc, PermissionError):
        return StorePermissionError(f"permission denied reading {where}: {text}", url=url, key=key)
    if not isinstance(exc, (oe.BaseError, ConnectionError, OSError)):
        return None
    status = _STATUS.search(str(exc))
    code = int(status.group(1)) if status else None
    if code in (401, 403):
        return StorePermissionError(f"permission denied ({code}) reading {where}: {text}", url=url, key=key)
    if code is not None and (code >= 500 or code == 429):
        return TransientStoreError(f"server error ({code}) reading {where}: {text}", url=url, key=key)
    if _TIMEOUT_TEXT.search(str(exc)):
        return StoreTimeoutError(f"timed out reading {where}: {text}", url=url, key=key)
    if isinstance(exc, ConnectionError) or _TRANSIENT_TEXT.search(str(exc)):
        return TransientStoreError(f"connection failed reading {where}: {text}", url=url, key=key)
    return StoreError(f"request failed reading {where}: {text}", url=url, key=key)


__all__ = ["OBSTORE_SCHEMES", "ObstoreStore", "obstore_store", "translate_obstore_error"]
