"""fsspec: for filesystems obstore cannot reach (GCS over gRPC, custom or legacy filesystems).

Async fsspec filesystems (s3fs, gcsfs, adlfs, HTTP) bind their client session to
the event loop that first used them. A zarr store is used from several loops:
zarr's own (opening metadata), the insitu engine's, a test's. So
:class:`FsspecLoopStore` keeps one filesystem instance per running loop, each
created inside that loop, instead of sharing one across loops (which fails or
hangs once the first loop is busy or gone). Synchronous filesystems (local
files) are wrapped by zarr and shared.

The store makes one attempt per call and leaves retrying to insitu's engine,
the single owner of retries (``insitu.store.fetch.ChunkFetcher``, under the
dataset's ``RetryPolicy``): fsspec filesystems offer no retry setting that can
follow a policy (s3fs and botocore take an attempt count but fix their own
backoff, gcsfs likewise, HTTP has none), so their own retries are turned down
to one attempt, and the store declares no retry policy of its own. Each
attempt is bounded by the store's ``retry.timeout_s`` (botocore also gets the
connect and read timeouts). Errors are classified by type: the exception's
class (botocore's, aiohttp's, fsspec's, the builtin ``OSError`` family), an
HTTP status the backend carries as data (botocore's ``response``, aiohttp's
``status``) or an ``errno``, never its message. A transient one leaves the
store as a ``ConnectionError`` or ``TimeoutError``, which the engine retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import importlib
import importlib.util
import inspect
import os
import re
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.storage import FsspecStore

from insitu.plugin_api import ConfigError, RetryPolicy, redact_url
from insitu_stores.cloud import GCLOUD_ADC, credentials_hint, env_secrets
from insitu_stores.error_codes import code_hint, service_error_code, with_code
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
from insitu_stores.schemes import FSSPEC_SCHEMES

#: Schemes fsspec serves here; obstore is the default for those both serve.

_BUCKET_MISSING = re.compile(
    r"NoSuchBucket|ContainerNotFound|specified bucket does not exist|specified container does not exist",
    re.IGNORECASE,
)
# errno values backends set for a busy or unreachable service (s3fs: 503 SlowDown -> EBUSY,
# InternalError -> EREMOTEIO).
_TRANSIENT_ERRNOS = frozenset(
    {
        errno.EBUSY,
        errno.EAGAIN,
        getattr(errno, "EREMOTEIO", errno.EIO),
        errno.ECONNRESET,
        errno.ECONNREFUSED,
        errno.ECONNABORTED,
        errno.EPIPE,
        errno.ENETUNREACH,
        errno.EHOSTUNREACH,
    }
)


def fsspec_store(
    url: str,
    *,
    read_only: bool = True,
    anonymous: bool = False,
    endpoint: str | None = None,
    region: str | None = None,
    requester_pays: bool = False,
    allow_http: bool | None = None,
    retry: RetryPolicy | None = None,
    storage_options: Mapping[str, Any] | None = None,
    **fs_options: Any,
) -> FsspecLoopStore:
    """A zarr store over ``url`` through fsspec (s3fs, gcsfs, adlfs, HTTP, local files...).

    The options shared with :func:`~insitu_stores.obstore_store` map to each
    filesystem's own spelling: ``anonymous`` (s3fs/adlfs ``anon=True``, gcsfs
    ``token="anon"``), ``endpoint`` (``endpoint_url``), ``region``,
    ``requester_pays``, and for S3 ``access_key_id`` / ``secret_access_key``
    / ``session_token`` (s3fs ``key`` / ``secret`` / ``token``). Other
    keywords (``fs_options``) go to the filesystem unchanged, and so does
    ``storage_options={...}`` (the fsspec / xarray spelling), key for key. An
    option set twice (the same key in ``storage_options`` and as a keyword,
    or a shared option and its fsspec spelling: ``anonymous=`` and ``anon``,
    ``endpoint=`` and ``endpoint_url``, ``region=`` and
    ``client_kwargs.region_name``, ``access_key_id=`` and ``key``...) raises
    :class:`~insitu.errors.ConfigError` naming both. Without credentials
    the filesystem reads its usual environment (botocore: ``AWS_*`` variables
    and files, ``AWS_ENDPOINT_URL`` included); nothing here replaces it.

    ``retry`` (``insitu.RetryPolicy``) sets the time each attempt may take
    (``timeout_s``; botocore's connect and read timeouts). The store makes one
    attempt per call (s3fs's, gcsfs's and botocore's own retries are turned
    down to one) and declares no retry policy: insitu's engine retries its
    transient errors (``ConnectionError``, ``TimeoutError``) under the
    dataset's ``retry=``, as the one layer that retries.

    ``allow_http`` is accepted for parity with obstore and not needed: fsspec
    filesystems follow the endpoint's scheme. ``read_only=False`` opens the
    store writable; read-only (the default), a missing local directory is a
    ``FileNotFoundError``.

    Raises ``ImportError`` naming the package when the filesystem for the
    URL's scheme is not installed, ``ValueError`` for a malformed URL.
    """
    if importlib.util.find_spec("fsspec") is None:
        raise ImportError("fsspec_store needs fsspec: pip install 'insitu-stores[fsspec]'")
    loc = parse_location(url)
    retry = retry or DEFAULT_RETRY
    given = _merge_storage_options(_fsspec_names(loc, fs_options), storage_options)
    options = _map_options(loc, anonymous, endpoint, region, requester_pays, retry, given)
    endpoint = endpoint or _configured_endpoint(loc, options)
    redact = Redactor.from_options(options, urls=(url, endpoint), extra=env_secrets(os.environ))
    try:
        template = FsspecStore.from_url(url, storage_options=options, read_only=read_only)
    except ImportError as exc:
        package = {"s3": "s3", "gs": "gcs", "az": "azure", "http": "http", "https": "http"}.get(loc.service)
        hint = f": pip install 'insitu-stores[{package}]'" if package else ""
        raise ImportError(
            f"fsspec cannot open {loc.safe_url!r}: {redact(first_line(str(exc)))}{hint}"
        ) from None
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"cannot open {loc.safe_url!r} with fsspec: {redact(first_line(str(exc)))}") from None
    if loc.service == "file" and read_only and not os.path.isdir(loc.prefix or "/"):
        raise FileNotFoundError(errno.ENOENT, "no Zarr store at this path", loc.prefix)
    return FsspecLoopStore(template, url=url, options=options, endpoint=endpoint, retry=retry, redact=redact)


def _configured_endpoint(loc: Location, options: Mapping[str, Any]) -> str | None:
    """The endpoint the filesystem will use when ``endpoint=`` was not given: its own option, or
    (S3) the variables botocore reads. For the store's name and identity only."""
    found = options.get("endpoint_url")
    client_kwargs = options.get("client_kwargs")
    if not found and isinstance(client_kwargs, Mapping):
        found = client_kwargs.get("endpoint_url")
    if not found and loc.service == "s3":
        found = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return str(found) if found else None


# The shared keywords that renamed to an s3fs option, for the messages about setting one twice.
_S3_RENAMES = {"access_key_id": "key", "secret_access_key": "secret", "session_token": "token"}


def _fsspec_names(loc: Location, fs_options: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """Keyword options by their fsspec name: ``{fsspec name: (name as shown, value)}``."""
    out: dict[str, tuple[str, Any]] = {}
    for name, value in fs_options.items():
        theirs = _S3_RENAMES.get(name, name) if loc.service == "s3" else name
        if theirs in out:
            raise ConfigError(f"{out[theirs][0]} and {name}= set the same option ({theirs}); give it once")
        out[theirs] = (f"{name}=", value)
    return out


def _merge_storage_options(
    keywords: dict[str, tuple[str, Any]], storage_options: Mapping[str, Any] | None
) -> dict[str, tuple[str, Any]]:
    """Keyword options and ``storage_options`` in one dict, refusing a key given both ways."""
    merged = dict(keywords)
    if storage_options is None:
        return merged
    if not isinstance(storage_options, Mapping):
        raise ConfigError(f"storage_options must be a dict of options, got {type(storage_options).__name__}")
    for name, value in storage_options.items():
        shown = f"storage_options[{name!r}]"
        if name in merged:
            raise ConfigError(f"{shown} and {merged[name][0]} set the same option; give it once")
        merged[name] = (shown, value)
    return merged


def _map_options(
    loc: Location,
    anonymous: bool,
    endpoint: str | None,
    region: str | None,
    requester_pays: bool,
    retry: RetryPolicy,
    given: dict[str, tuple[str, Any]],
) -> dict[str, Any]:
    """The filesystem's options: ``given`` (``{fsspec name: (name as shown, value)}``) and the
    shared keywords in its spelling. Raises :class:`ConfigError` when a shared keyword sets an
    option ``given`` already holds."""
    opts = {name: value for name, (_, value) in given.items()}
    if isinstance(opts.get("client_kwargs"), Mapping):
        opts["client_kwargs"] = dict(opts["client_kwargs"])  # filled in below; never the caller's dict

    def set_once(keyword: str, name: str, value: Any, nested: str | None = None) -> None:
        if nested is None:
            if name in opts:
                raise ConfigError(f"{given[name][0]} and {keyword}= set the same option; give it once")
            opts[name] = value
            return
        inner = opts.setdefault(name, {})
        if not isinstance(inner, dict):
            raise ConfigError(f"{given[name][0]} must be a dict, got {type(inner).__name__}")
        if nested in inner:
            raise ConfigError(
                f"{given[name][0]}[{nested!r}] and {keyword}= set the same option; give it once"
            )
        inner[nested] = value

    service = loc.service
    for name, value, applies in (
        ("anonymous", anonymous, service in ("s3", "gs", "az")),
        ("endpoint", endpoint, service in ("s3", "gs", "az")),
        ("region", region, service == "s3"),
        ("requester_pays", requester_pays, service in ("s3", "gs")),
    ):
        if value and not applies:
            raise ValueError(f"{name}= does not apply to {loc.scheme}:// URLs ({loc.safe_url!r})")
    if service == "s3":
        if anonymous:
            set_once("anonymous", "anon", True)
        if endpoint:
            client_kwargs = opts.get("client_kwargs")
            if isinstance(client_kwargs, dict) and "endpoint_url" in client_kwargs:
                raise ConfigError(
                    f"{given['client_kwargs'][0]}['endpoint_url'] and endpoint= set the same option; "
                    "give it once"
                )
            set_once("endpoint", "endpoint_url", endpoint)
        if region:
            set_once("region", "client_kwargs", region, nested="region_name")
        if requester_pays:
            set_once("requester_pays", "requester_pays", True)
        # s3fs reads a whole object with several concurrent range GETs when max_concurrency > 1,
        # and asks for its size first (a HEAD) to decide: two round trips per chunk for the
        # whole-chunk reads the engine makes. One GET each.
        opts.setdefault("max_concurrency", 1)
        # One retry layer (insitu's engine): botocore would otherwise retry beneath it (s3fs's
        # own count is a class attribute, set per instance in FsspecLoopStore._single_attempt).
        # Its connect and read timeouts are the backend's own, per request.
        config = dict(opts.get("config_kwargs") or {})
        config.setdefault("retries", {"total_max_attempts": 1})
        config.setdefault("connect_timeout", retry.connect_timeout_s)
        if retry.timeout_s is not None:
            config.setdefault("read_timeout", retry.timeout_s)
        opts["config_kwargs"] = config
    elif service == "gs":
        if anonymous:
            set_once("anonymous", "token", "anon")
        if endpoint:
            set_once("endpoint", "endpoint_url", endpoint)
        if requester_pays:
            set_once("requester_pays", "requester_pays", True)
    elif service == "http":
        _http_timeouts(opts, given, retry)
    elif service == "file":
        opts.setdefault("auto_mkdir", True)  # zarr writes "a/zarr.json" before any "a/" exists
    elif service == "az":
        if anonymous:
            set_once("anonymous", "anon", True)
        if endpoint:
            set_once("endpoint", "account_host", endpoint)
    return opts


def _http_timeouts(opts: dict[str, Any], given: dict[str, tuple[str, Any]], retry: RetryPolicy) -> None:
    """aiohttp's connect and read timeouts from the policy (its own default is 5 minutes for the
    whole request), unless ``client_kwargs`` sets a ``timeout`` of its own."""
    if importlib.util.find_spec("aiohttp") is None:
        return  # fsspec's HTTP filesystem names the missing package itself
    import aiohttp

    client_kwargs = opts.setdefault("client_kwargs", {})
    if not isinstance(client_kwargs, dict):
        raise ConfigError(f"{given['client_kwargs'][0]} must be a dict, got {type(client_kwargs).__name__}")
    client_kwargs.setdefault(
        "timeout",
        aiohttp.ClientTimeout(total=None, sock_connect=retry.connect_timeout_s, sock_read=retry.timeout_s),
    )


class FsspecLoopStore(FsspecStore):
    """``zarr.storage.FsspecStore`` with one filesystem per event loop and translated errors."""

    def __init__(
        self,
        template: FsspecStore,
        *,
        url: str,
        options: dict[str, Any],
        endpoint: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        redact: Redactor | None = None,
    ) -> None:
        self.location = parse_location(url)
        self._template_fs = self._single_attempt(template.fs)
        self._per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )
        super().__init__(
            fs=template.fs,
            path=template.path,
            read_only=template.read_only,
            allowed_exceptions=template.allowed_exceptions,
        )
        self._source_url = url  # as given, credentials included: what each filesystem is built from
        self.url = self.location.safe_url
        self.endpoint = endpoint
        self.retry = retry
        self._options = options
        self._anonymous, self._credentials = _credentials_given(self.location.service, options)
        self._redact = redact or Redactor()
        # Only async filesystems hold a loop-bound session; zarr's wrapper of a sync one does not.
        self._loop_bound = bool(getattr(template.fs, "async_impl", False)) and not _is_sync_wrapper(
            template.fs
        )
        # Async filesystems made with asynchronous=True never close their client session
        # themselves; close each one when this store goes away (or on close()).
        self._finalizer = weakref.finalize(self, _close_sessions, self._per_loop)

    def close(self) -> None:
        """Close the client session of every per-loop filesystem."""
        self._finalizer()
        super().close()

    # zarr's FsspecStore reads ``self.fs`` everywhere: hand each loop its own instance.
    @property
    def fs(self) -> Any:
        """The filesystem for the running event loop: async filesystems get one instance per loop (their
        sessions are bound to it), others share the template."""
        if not getattr(self, "_loop_bound", False):
            return self._template_fs
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return self._template_fs
        fs = self._per_loop.get(loop)
        if fs is None:
            fs = self._new_fs(loop)
            self._per_loop[loop] = fs
        return fs

    @fs.setter
    def fs(self, value: Any) -> None:
        self._template_fs = value

    def _new_fs(self, loop: asyncio.AbstractEventLoop) -> Any:
        from fsspec import url_to_fs

        fs, _ = url_to_fs(
            self._source_url, asynchronous=True, loop=loop, skip_instance_cache=True, **self._options
        )
        return self._single_attempt(fs)

    @staticmethod
    def _single_attempt(fs: Any) -> Any:
        # s3fs and gcsfs retry some errors themselves (``retries`` attempts, a class attribute);
        # insitu's engine owns retrying, so each of their calls is one attempt.
        if isinstance(getattr(fs, "retries", None), int):
            fs.retries = 1
        return fs

    def insitu_identity(self) -> str:
        """The location without its credentials (see :meth:`ObstoreStore.insitu_identity`)."""
        endpoint = redact_url(self.endpoint) if self.endpoint else "default"
        return f"fsspec:{self.url}@{endpoint}"

    def __str__(self) -> str:
        return self.url if not self.endpoint else f"{self.url} (endpoint {redact_url(self.endpoint)})"

    def __repr__(self) -> str:
        return f"FsspecLoopStore({str(self)!r}, read_only={self.read_only})"

    def with_read_only(self, read_only: bool = False) -> FsspecLoopStore:
        """A copy of this store over the same filesystem and path, read-only or not."""
        clone = FsspecStore(
            fs=self._template_fs,
            path=self.path,
            read_only=read_only,
            allowed_exceptions=self.allowed_exceptions,
        )
        return FsspecLoopStore(
            clone,
            url=self._source_url,
            options=self._options,
            endpoint=self.endpoint,
            retry=self.retry,
            redact=self._redact,
        )

    # -- reads ---------------------------------------------------------------
    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """The object at ``key`` (or the requested range); ``None`` when it is missing. One attempt,
        bounded by the retry policy's timeout; failures raise insitu's store errors, secrets redacted."""
        if not self._is_open:
            await self._open()
        raw = await self._guarded(key, lambda: self._cat(key, byte_range))
        return None if raw is None else prototype.buffer.from_bytes(raw)

    async def _cat(self, key: str, byte_range: ByteRequest | None) -> bytes | None:
        path = f"{self.path.rstrip('/')}/{key}" if self.path else key
        fs = self.fs
        try:
            if byte_range is None:
                return await fs._cat_file(path)
            if isinstance(byte_range, RangeByteRequest):
                return await fs._cat_file(path, start=byte_range.start, end=byte_range.end)
            if isinstance(byte_range, OffsetByteRequest):
                return await fs._cat_file(path, start=byte_range.offset, end=None)
            if isinstance(byte_range, SuffixByteRequest):
                return await fs._cat_file(path, start=-byte_range.suffix, end=None)
            raise TypeError(f"unexpected byte range {byte_range!r}")
        except self.allowed_exceptions as exc:
            self._raise_if_bucket_missing(exc)
            return None

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        """Several reads, concurrently, each through :meth:`get`."""
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        """Whether ``key`` exists; failures raise insitu's store errors."""
        path = f"{self.path.rstrip('/')}/{key}" if self.path else key
        return bool(await self._guarded(key, lambda: self.fs._exists(path)))

    async def insitu_get(
        self, key: str, byte_range: tuple[int, int] | None = None, suffix: int | None = None
    ) -> Any:
        """Raw bytes of ``key`` (or a range); ``None`` if absent. See :meth:`ObstoreStore.insitu_get`."""
        request: ByteRequest | None = None
        if byte_range is not None:
            request = RangeByteRequest(byte_range[0], byte_range[1])
        elif suffix is not None:
            request = SuffixByteRequest(suffix)
        return await self._guarded(key, lambda: self._cat(key, request))

    def _raise_if_bucket_missing(self, exc: BaseException) -> None:
        # botocore names the error as data (s3fs raises from it); other backends only in text.
        code = service_error_code(exc)
        missing = code in ("NoSuchBucket", "ContainerNotFound") or _BUCKET_MISSING.search(str(exc))
        if self.location.bucket and missing:
            where = f" at {redact_url(self.endpoint)}" if self.endpoint else ""
            message = f"bucket {self.location.bucket!r} does not exist{where} (opening {self.url})"
            raise StoreNotFoundError(
                with_code(code, message), url=self.url
            ) from None  # the backend's message may quote the request URL

    async def _guarded(self, key: str | None, op: Callable[[], Any]) -> Any:
        # One attempt, bounded by the policy's timeout; insitu's engine retries what is transient.
        # The client's set-up is not part of the attempt's time (see _client_ready).
        failed: StoreError | None = None
        try:
            await self._client_ready()
        except Exception as exc:
            failed = self._translate(exc, key)
            if failed is None:
                raise
        if failed is not None:
            raise failed  # outside the handler: the backend's exception is not its context
        return await call_once(
            op, deadline_s=self.retry.timeout_s, translate=self._translate, key=key, url=self.url
        )

    async def _client_ready(self) -> None:
        """Build this loop's client once, even when the attempt waiting for it is cut short.

        s3fs creates its botocore client on first use, parsing botocore's
        service models: 0.15 s on an idle machine, over 1.5 s on a busy one.
        The set-up runs as its own task, shielded: an attempt that times out
        while waiting for it (the engine's ``timeout_s`` is per attempt) does
        not cancel it, so the next attempt finds it done, or nearly, instead of
        starting it again and timing out the same way.
        """
        fs = self.fs
        set_session = getattr(fs, "set_session", None)
        if not inspect.iscoroutinefunction(set_session):
            return
        task = getattr(fs, "_insitu_client_setup", None)
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            # A set-up that failed is started again by the next attempt.
            task = asyncio.ensure_future(set_session())
            fs._insitu_client_setup = task
        if not task.done():
            await asyncio.shield(task)

    def _translate(self, exc: BaseException, key: str | None) -> StoreError | None:
        where = self.location.join(key) if key else self.url
        if self.endpoint:
            where += f" (endpoint {redact_url(self.endpoint)})"
        return translate_fsspec_error(
            exc,
            where,
            url=self.url,
            key=key,
            redact=self._redact,
            service=self.location.service,
            anonymous=self._anonymous,
            credentials=self._credentials,
        )

    # -- listings ------------------------------------------------------------
    def list(self) -> AsyncIterator[str]:
        """Every key; a missing bucket or a failure raises insitu's store errors."""
        return self._guard_listing(super().list())

    def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        """The keys under ``prefix``; a missing bucket or a failure raises insitu's store errors."""
        return self._guard_listing(super().list_prefix(prefix))

    def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """The entries directly under ``prefix``; a missing bucket or a failure raises insitu's store errors."""
        return self._guard_listing(super().list_dir(prefix))

    async def _guard_listing(self, listing: AsyncIterator[str]) -> AsyncIterator[str]:
        try:
            async for key in listing:
                yield key
        except Exception as exc:
            if isinstance(exc, FileNotFoundError):
                self._raise_if_bucket_missing(exc)
            err = self._translate(exc, None)
            if err is None or isinstance(exc, FileNotFoundError):
                raise
            raise err from None


# Options and variables that give each filesystem credentials (for the wording of a hint only).
_CREDENTIAL_OPTIONS = {
    "gs": ("token",),
    "az": ("account_key", "sas_token", "connection_string", "credential", "client_secret"),
}
_CREDENTIAL_ENV = {
    "gs": ("GOOGLE_APPLICATION_CREDENTIALS",),
    "az": (
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_CLIENT_SECRET",
    ),
}


def _credentials_given(service: str, options: Mapping[str, Any]) -> tuple[bool, bool]:
    """``(anonymous, credentials)``: whether requests are unsigned on purpose, and whether the
    filesystem has credentials to sign with. botocore raises its own error when it finds none, so
    an S3 request that was refused had some; gcsfs and adlfs fall back to unsigned requests."""
    anonymous = options.get("anon") is True or (service == "gs" and options.get("token") == "anon")
    if anonymous or service == "s3":
        return anonymous, not anonymous
    found = any(options.get(name) not in (None, "anon") for name in _CREDENTIAL_OPTIONS.get(service, ()))
    found = found or any(os.environ.get(name) for name in _CREDENTIAL_ENV.get(service, ()))
    if service == "gs" and not found:
        found = GCLOUD_ADC.expanduser().is_file()
    return False, found


def _close_sessions(per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any]) -> None:
    for loop, fs in list(per_loop.items()):
        # s3fs keeps its client context in _s3creator, gcsfs and HTTP their aiohttp session in
        # _session; each class's close_session(loop, session) closes it from another thread
        # while the loop runs, or drops its connections when the loop is gone.
        closer = getattr(type(fs), "close_session", None)
        session = getattr(fs, "_s3creator", None) or getattr(fs, "_session", None)
        if closer is None or session is None:
            continue
        # At exit the loop or the session may already be half gone; closing is best effort.
        with contextlib.suppress(Exception):
            if not loop.is_running() and not loop.is_closed():
                exit_ = getattr(session, "__aexit__", None)
                loop.run_until_complete(exit_(None, None, None) if exit_ else session.close())
            else:
                closer(loop, session)
    per_loop.clear()


def _is_sync_wrapper(fs: Any) -> bool:
    return type(fs).__name__ == "AsyncFileSystemWrapper"


def translate_fsspec_error(
    exc: BaseException,
    where: str,
    *,
    url: str,
    key: str | None,
    redact: Redactor,
    service: str = "",
    anonymous: bool = False,
    credentials: bool = True,
) -> StoreError | None:
    """The store error for an fsspec/s3fs/aiohttp/botocore exception, or ``None``.

    Classified by the exception's type (:func:`_backend_types`), an HTTP status
    or error code it carries as data, or its ``errno``; never by its message:

    - permission (permanent): ``PermissionError``, 401/403, botocore's
      credential errors (no credentials: a hint says what to set or pass for
      ``service``; ``anonymous`` and ``credentials`` choose its wording);
    - configuration (permanent): botocore's region, endpoint, profile and
      parameter errors, aiohttp's invalid URL and TLS certificate errors;
    - timeout (transient): ``TimeoutError`` (aiohttp's and fsspec's are),
      botocore's read and connect timeouts, ``ETIMEDOUT``, 408;
    - transient: ``ConnectionError``, botocore's and aiohttp's connection and
      payload errors, ``http.client.IncompleteRead``, 5xx, 429, errnos for a
      busy or unreachable service;
    - anything else from the backend: a plain :class:`StoreError`.

    The service's error code (botocore's ``response["Error"]["Code"]``:
    ``InvalidAccessKeyId``, ``SignatureDoesNotMatch``...) leads the message
    and, for S3, picks the hint.
    """
    if isinstance(exc, StoreError):
        return exc
    text = redact(first_line(str(exc)) or type(exc).__name__)
    kinds = _backend_types()
    status = http_status(exc)
    code = exc.errno if isinstance(exc, OSError) else None
    service_code = service_error_code(exc)  # botocore's, as data: leads every message below

    def say(message: str) -> str:
        return with_code(service_code, message)

    if isinstance(exc, kinds.no_credentials):  # botocore's: S3
        hint = credentials_hint(service or "s3", found=False)
        return StorePermissionError(say(f"cannot read {where}: {hint} ({text})"), url=url, key=key)
    if isinstance(exc, (PermissionError, *kinds.credentials)) or status in (401, 403):
        hint = (credentials and not anonymous and code_hint(service_code, service)) or credentials_hint(
            service, anonymous=anonymous, found=credentials
        )
        message = f"{hint} ({text})" if hint else text
        return StorePermissionError(say(f"permission denied reading {where}: {message}"), url=url, key=key)
    if isinstance(exc, kinds.configuration):
        return StoreConfigurationError(say(f"cannot read {where}: {text}"), url=url, key=key)
    if isinstance(exc, (TimeoutError, *kinds.timeouts)) or code == errno.ETIMEDOUT or status == 408:
        return StoreTimeoutError(say(f"timed out reading {where}: {text}"), url=url, key=key)
    if (
        isinstance(exc, (ConnectionError, *kinds.transient))
        or code in _TRANSIENT_ERRNOS
        or (status is not None and (status >= 500 or status == 429))
    ):
        return TransientStoreError(
            say(f"connection or server error reading {where}: {text}"), url=url, key=key
        )
    if isinstance(exc, (OSError, *kinds.other)):
        hint = code_hint(service_code, service)
        message = f"{hint} ({text})" if hint else text
        return StoreError(say(f"request failed reading {where}: {message}"), url=url, key=key)
    return None


@dataclass(frozen=True)
class _BackendTypes:
    """Exception types of the optional backends, by kind (empty tuples for those not installed)."""

    no_credentials: tuple[type[BaseException], ...] = ()
    credentials: tuple[type[BaseException], ...] = ()
    configuration: tuple[type[BaseException], ...] = ()
    timeouts: tuple[type[BaseException], ...] = ()
    transient: tuple[type[BaseException], ...] = ()
    other: tuple[type[BaseException], ...] = ()


def _types(module: str, *names: str) -> tuple[type[BaseException], ...]:
    """The named exception classes of ``module``, if it is installed (and has them)."""
    if importlib.util.find_spec(module.split(".")[0]) is None:
        return ()
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return ()
    found = (getattr(mod, name, None) for name in names)
    return tuple(t for t in found if isinstance(t, type) and issubclass(t, BaseException))


@functools.cache
def _backend_types() -> _BackendTypes:
    import http.client

    return _BackendTypes(
        no_credentials=_types("botocore.exceptions", "NoCredentialsError"),
        credentials=_types(
            "botocore.exceptions",
            "PartialCredentialsError",
            "CredentialRetrievalError",
            "NoAuthTokenError",
            "TokenRetrievalError",
            "UnauthorizedSSOTokenError",
            "SSOTokenLoadError",
        ),
        configuration=(
            *_types(
                "botocore.exceptions",
                "NoRegionError",
                "InvalidRegionError",
                "UnknownEndpointError",
                "EndpointResolutionError",
                "InvalidEndpointConfigurationError",
                "ProfileNotFound",
                "ParamValidationError",
                "InvalidIMDSEndpointError",
            ),
            # Before aiohttp's connection errors: a certificate error is one of them by type.
            *_types("aiohttp", "InvalidURL", "NonHttpUrlClientError", "ClientSSLError"),
        ),
        timeouts=_types("botocore.exceptions", "ReadTimeoutError", "ConnectTimeoutError"),
        transient=(
            # botocore.exceptions.ConnectionError is not the builtin one.
            *_types(
                "botocore.exceptions",
                "ConnectionError",
                "HTTPClientError",
                "IncompleteReadError",
            ),
            *_types("botocore.parsers", "ResponseParserError"),
            *_types("aiohttp", "ClientConnectionError", "ClientPayloadError"),
            http.client.IncompleteRead,
        ),
        other=_types("botocore.exceptions", "ClientError", "BotoCoreError"),
    )


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an exception (or one it was raised from) carries as data, if any.

    botocore keeps it in ``response["ResponseMetadata"]["HTTPStatusCode"]``
    (s3fs raises its own ``OSError`` from that); aiohttp and gcsfs as
    ``status`` / ``code``.
    """
    seen: BaseException | None = exc
    for _ in range(4):  # the exception and a few causes: enough for s3fs's wrapping
        if seen is None:
            return None
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(status, int):
                return status
        for attr in ("status", "code"):
            value = getattr(seen, attr, None)
            if isinstance(value, int) and 100 <= value <= 599:
                return value
        seen = seen.__cause__ or seen.__context__
    return None


__all__ = ["FSSPEC_SCHEMES", "FsspecLoopStore", "fsspec_store", "translate_fsspec_error"]
