"""Icechunk: a transactional repository of Zarr v3 data, opened read-only at one snapshot.

URL forms (``open_store`` dispatches them here)::

    icechunk:///abs/path/repo            a repository on local disk
    icechunk+file:///abs/path/repo       the same
    icechunk+s3://bucket/prefix          on S3 or an S3-compatible server (endpoint=...)
    icechunk+gs://bucket/prefix          on GCS
    icechunk+az://container/prefix       on Azure (account=...)

The version is chosen with ``branch=``, ``tag=`` or ``snapshot=`` (keywords,
or ``?branch=dev`` / ``?tag=v1`` / ``?snapshot=ID`` after the URL); the default
is branch ``main``. The store is pinned to the snapshot it resolved at open,
and its :meth:`IcechunkReadStore.insitu_identity` names that snapshot, so
insitu's persisted chunk cache refuses to serve data cached from another one.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any
from urllib.parse import parse_qs, urlsplit

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, Store

from insitu.plugin_api import RetryPolicy, native_call, redact_url
from insitu_stores.errors import (
    Redactor,
    StoreError,
    StoreNotFoundError,
    StorePermissionError,
    StoreTimeoutError,
    TransientStoreError,
    first_line,
)
from insitu_stores.locations import parse_location
from insitu_stores.retry import DEFAULT_RETRY, call_once
from insitu_stores.schemes import ICECHUNK_SCHEMES

_REFS = ("branch", "tag", "snapshot")

_UNAUTHORISED = re.compile(r"resolves to the url prefix (\S+?),? to be able", re.IGNORECASE)
_NO_CONTAINER = re.compile(r"no virtual chunk container|cannot find a virtual chunk container", re.IGNORECASE)
_INVALID_KEY = re.compile(r"invalid zarr key|key not found|node not found", re.IGNORECASE)
_TRANSIENT_TEXT = re.compile(
    r"\b(?:500|502|503|504|429)\b|SlowDown|ServiceUnavailable|dispatch failure|"
    r"connection (?:reset|refused|closed)|error sending request|io error",
    re.IGNORECASE,
)
_BAD_PREFIX = re.compile(r"bad key prefix", re.IGNORECASE)
_TIMEOUT_TEXT = re.compile(r"timed out|timeout", re.IGNORECASE)
_PERMISSION_TEXT = re.compile(r"\b(?:401|403)\b|AccessDenied|Forbidden|InvalidAccessKeyId", re.IGNORECASE)


def icechunk_store(
    url_or_repo: Any,
    *,
    read_only: bool = True,
    branch: str | None = None,
    tag: str | None = None,
    snapshot: str | None = None,
    virtual_chunks: Mapping[str, Any] | None = None,
    anonymous: bool = False,
    endpoint: str | None = None,
    region: str | None = None,
    allow_http: bool | None = None,
    retry: RetryPolicy | None = None,
    **storage_options: Any,
) -> IcechunkReadStore:
    """Open an Icechunk repository read-only at a branch, tag or snapshot id.

    ``url_or_repo`` is an ``icechunk://`` URL (see the module docstring), a
    plain local path, or an ``icechunk.Repository`` / ``icechunk.Storage``
    you built yourself. At most one of ``branch`` / ``tag`` / ``snapshot``;
    the default is branch ``main``. ``read_only`` must stay ``True`` (a
    ``ValueError`` otherwise): write through ``repo.writable_session(branch)``.

    ``virtual_chunks`` authorises the repository's virtual chunk containers:
    ``{url_prefix: credentials}``, where credentials are an Icechunk
    credentials object, ``None`` (local files, or the reader's environment)
    or, for S3, a dict with ``access_key_id`` / ``secret_access_key`` /
    ``session_token`` or ``anonymous=True``. A virtual chunk under a prefix
    that was not authorised is an error naming the prefix.

    For object storage: ``anonymous``, ``endpoint`` (S3-compatible servers;
    an ``http://`` endpoint sets ``allow_http`` and path-style addressing),
    ``region`` and the backend's credentials (S3: ``access_key_id``,
    ``secret_access_key``, ``session_token``; GCS: ``service_account_file``...;
    Azure: ``account``, ``access_key``, ``sas_token``) as ``storage_options``.
    ``retry`` (``insitu.RetryPolicy``) becomes Icechunk's own storage retry
    settings (attempts and backoff): Icechunk is the one layer that retries,
    and insitu's engine does not retry on top.

    Raises :class:`~insitu_stores.errors.StoreNotFoundError` when the
    repository, branch, tag or snapshot does not exist, ``ValueError`` for a
    malformed URL or conflicting options.
    """
    import icechunk

    if not read_only:
        raise ValueError(
            "icechunk_store opens repositories read-only; write through "
            "repo.writable_session(branch).store and commit"
        )
    retry = retry or DEFAULT_RETRY
    redact = Redactor.from_options(
        {
            **storage_options,
            "virtual_chunks": {p: v for p, v in (virtual_chunks or {}).items() if isinstance(v, dict)},
        },
        urls=(url_or_repo if isinstance(url_or_repo, str) else None, endpoint),
    )
    if isinstance(url_or_repo, str):
        url, query_refs = _split_refs(url_or_repo)
    else:
        url, query_refs = f"<{type(url_or_repo).__name__}>", {}
    shown = redact_url(url)  # what messages, the repr and the identity name
    refs = _one_ref(url_or_repo, query_refs, branch=branch, tag=tag, snapshot=snapshot)
    config = _retry_config(icechunk, retry)
    credentials = _authorisations(icechunk, virtual_chunks, redact)
    if isinstance(url_or_repo, icechunk.Repository):
        repo = url_or_repo
        if credentials:
            repo = repo.reopen(config=config, authorize_virtual_chunk_access=credentials)
    else:
        storage = (
            url_or_repo
            if isinstance(url_or_repo, icechunk.Storage)
            else _storage(icechunk, url, anonymous, endpoint, region, allow_http, storage_options)
        )
        try:
            repo = icechunk.Repository.open(
                storage, config=config, authorize_virtual_chunk_access=credentials
            )
        except Exception as exc:
            raise _open_error(exc, shown, redact) from None
    try:
        session = repo.readonly_session(
            branch=refs.get("branch"), tag=refs.get("tag"), snapshot_id=refs.get("snapshot")
        )
    except Exception as exc:
        raise _ref_error(exc, repo, shown, refs, redact) from None
    return IcechunkReadStore(
        session.store, url=shown, snapshot_id=session.snapshot_id, ref=refs, retry=retry, redact=redact
    )


def _split_refs(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    if not parts.query:
        return url, {}
    query = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(query) - set(_REFS))
    if unknown or any(len(v) != 1 or not v[0] for v in query.values()):
        # Shown redacted: an unexpected parameter may be a credential (?token=...).
        raise ValueError(
            f"malformed Icechunk URL {redact_url(url)!r}: the query may only set one of "
            f"{', '.join(_REFS)} (e.g. ?branch=main); got {redact_url('?' + parts.query)[1:]!r}"
        )
    return url.split("?", 1)[0], {k: v[0] for k, v in query.items()}


def _one_ref(target: Any, query: dict[str, str], **given: str | None) -> dict[str, str]:
    if isinstance(target, str):
        target = redact_url(target)
    refs = {k: v for k, v in given.items() if v is not None}
    for k, v in query.items():
        if k in refs and refs[k] != v:
            raise ValueError(f"{k}={refs[k]!r} conflicts with ?{k}={v} in {target!r}")
        refs[k] = v
    if len(refs) > 1:
        raise ValueError(f"pass at most one of branch=, tag=, snapshot= for {target!r}; got {sorted(refs)}")
    return refs or {"branch": "main"}


def _retry_config(icechunk: Any, retry: RetryPolicy) -> Any:
    # Icechunk retries inside its Rust client; max_tries counts the first attempt.
    settings = icechunk.StorageRetriesSettings(
        max_tries=retry.retries + 1,
        initial_backoff_ms=int(retry.backoff_s * 1000),
        max_backoff_ms=int(max(retry.max_backoff_s, retry.backoff_s) * 1000),
    )
    return icechunk.RepositoryConfig(storage=icechunk.StorageSettings(retries=settings))


def _authorisations(
    icechunk: Any, given: Mapping[str, Any] | None, redact: Redactor
) -> dict[str, Any] | None:
    if not given:
        return None
    out: dict[str, Any] = {}
    for prefix, creds in given.items():
        if not isinstance(prefix, str) or "://" not in prefix:
            raise ValueError(
                f"virtual_chunks keys are URL prefixes such as 's3://bucket/data/'; got {prefix!r}"
            )
        if isinstance(creds, dict):
            creds = _s3_credentials(icechunk, prefix, creds)
        elif creds is None and prefix.startswith("file://"):
            # Icechunk 2 wants an explicit sentinel for local files (None is deprecated there).
            creds = getattr(getattr(icechunk, "credentials", None), "LocalFileSystemAccess", None)
        out[prefix] = creds
    return icechunk.containers_credentials(out)


def _s3_credentials(icechunk: Any, prefix: str, creds: dict[str, Any]) -> Any:
    if creds.get("anonymous"):
        return icechunk.s3_anonymous_credentials()
    if "access_key_id" in creds and "secret_access_key" in creds:
        return icechunk.s3_static_credentials(
            access_key_id=creds["access_key_id"],
            secret_access_key=creds["secret_access_key"],
            session_token=creds.get("session_token"),
        )
    raise ValueError(
        f"virtual_chunks[{prefix!r}]: a dict must hold anonymous=True or access_key_id and secret_access_key"
    )


def _storage(
    icechunk: Any,
    url: str,
    anonymous: bool,
    endpoint: str | None,
    region: str | None,
    allow_http: bool | None,
    options: dict[str, Any],
) -> Any:
    shown = redact_url(url)
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    inner = url
    if scheme.startswith("icechunk"):
        backend = scheme.partition("+")[2] or "file"
        inner = f"{backend}://{url.split('://', 1)[1]}"
        if backend == "file" and not inner.startswith("file:///"):
            raise ValueError(f"malformed Icechunk URL {shown!r}: use icechunk:///absolute/path")
    elif not scheme:
        from pathlib import Path

        inner = Path(url).expanduser().resolve().as_uri()
    loc = parse_location(inner)
    local = loc.service == "file"
    for name, value in (("anonymous", anonymous), ("endpoint", endpoint), ("region", region)):
        if value and local:
            raise ValueError(f"{name}= does not apply to a local Icechunk repository ({shown!r})")
    if local:
        return icechunk.local_filesystem_storage(loc.prefix)
    if loc.service == "s3":
        if allow_http is None:
            allow_http = bool(endpoint and endpoint.startswith("http://"))
        return icechunk.s3_storage(
            bucket=loc.bucket,
            prefix=loc.prefix or None,
            region=region,
            endpoint_url=endpoint,
            allow_http=allow_http,
            anonymous=anonymous or None,
            # S3-compatible servers on an IP address or localhost need path-style URLs.
            force_path_style=bool(endpoint),
            **options,
        )
    if loc.service == "gs":
        return icechunk.gcs_storage(
            bucket=loc.bucket, prefix=loc.prefix or None, anonymous=anonymous or None, **options
        )
    if loc.service == "az":
        if "account" not in options:
            raise ValueError(f"an Azure Icechunk repository needs account=<storage account> ({shown!r})")
        return icechunk.azure_storage(container=loc.bucket, prefix=loc.prefix, **options)
    raise ValueError(
        f"Icechunk repositories live on local disk, s3, gs or az; not {loc.scheme}:// ({shown!r})"
    )


def _open_error(exc: Exception, url: str, redact: Redactor) -> Exception:
    text = redact(first_line(str(exc)))
    if type(exc).__name__ == "RepositoryNotFoundError" or "repository doesn't exist" in text:
        return StoreNotFoundError(f"no Icechunk repository at {url}: {text}", url=url)
    translated = translate_icechunk_error(exc, url, url=url, key=None, redact=redact)
    if translated is not None:
        return translated
    return StoreError(f"cannot open the Icechunk repository at {url}: {text}", url=url)


def _ref_error(exc: Exception, repo: Any, url: str, refs: dict[str, str], redact: Redactor) -> Exception:
    ((kind, name),) = refs.items()
    text = redact(first_line(str(exc)))
    if "not found" not in text.lower():
        return translate_icechunk_error(exc, url, url=url, key=None, redact=redact) or StoreError(
            text, url=url
        )
    known = ""
    if kind in ("branch", "tag"):
        try:
            names = repo.list_branches() if kind == "branch" else repo.list_tags()
            plural = "branches" if kind == "branch" else "tags"
            known = f" (its {plural}: {', '.join(sorted(names)) or 'none'})"
        except Exception:  # the listing is a courtesy; the error stands without it
            known = ""
    return StoreNotFoundError(f"Icechunk repository {url} has no {kind} {name!r}{known}", url=url)


class IcechunkReadStore(Store):
    """A read-only view of one Icechunk snapshot, with translated errors and a snapshot identity."""

    supports_writes = False
    supports_deletes = False
    supports_partial_writes = False
    supports_listing = True

    def __init__(
        self,
        store: Store,
        *,
        url: str,
        snapshot_id: str,
        ref: Mapping[str, str] | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        redact: Redactor | None = None,
    ) -> None:
        super().__init__(read_only=True)
        self.store = store
        self.url = url
        self.snapshot_id = str(snapshot_id)
        self.ref = dict(ref or {})
        self.retry = retry
        self._redact = redact or Redactor()

    def insitu_identity(self) -> str:
        """The repository and the snapshot id: a new commit is different data to a cache."""
        return f"icechunk:{self.url}@snapshot:{self.snapshot_id}"

    @property
    def insitu_retry_policy(self) -> RetryPolicy:
        """The policy Icechunk's storage client applies (attempts and backoff)."""
        return self.retry

    def __str__(self) -> str:
        return f"{self.url}@{self.snapshot_id}"

    def __repr__(self) -> str:
        ref = ", ".join(f"{k}={v!r}" for k, v in self.ref.items())
        return f"IcechunkReadStore({self.url!r}, {ref}, snapshot={self.snapshot_id!r})"

    def __eq__(self, value: object) -> bool:
        return isinstance(value, IcechunkReadStore) and (value.url, value.snapshot_id) == (
            self.url,
            self.snapshot_id,
        )

    __hash__ = None  # type: ignore[assignment]

    @property
    def supports_consolidated_metadata(self) -> bool:
        # Icechunk keeps its own metadata index; zarr must not look for consolidated metadata.
        """What the wrapped Icechunk store says (Icechunk keeps its own metadata index)."""
        return bool(getattr(self.store, "supports_consolidated_metadata", False))

    def with_read_only(self, read_only: bool = False) -> IcechunkReadStore:
        """This store itself for ``read_only=True``; a ValueError otherwise (write through a writable
        session)."""
        if not read_only:
            raise ValueError("an IcechunkReadStore is read-only; write through a writable session")
        return self

    # -- reads ---------------------------------------------------------------
    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """The object at ``key`` in the snapshot (or the requested range); ``None`` when it is missing or
        not a key a Zarr v3 hierarchy can hold. Icechunk retries; failures raise insitu's store errors."""

        async def op() -> Buffer | None:
            try:
                return await native_call(self.store.get(key, prototype, byte_range))
            except Exception as exc:
                if _INVALID_KEY.search(str(exc)) and not _UNAUTHORISED.search(str(exc)):
                    return None  # not a key a Zarr v3 hierarchy can hold: missing
                raise

        return await self._guarded(key, op)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        """Several reads, concurrently, each through :meth:`get`."""
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        """Whether ``key`` exists in the snapshot (False for a key no Zarr v3 hierarchy can hold)."""

        async def op() -> bool:
            try:
                return bool(await native_call(self.store.exists(key)))
            except Exception as exc:
                if _INVALID_KEY.search(str(exc)):
                    return False
                raise

        return bool(await self._guarded(key, op))

    async def _guarded(self, key: str | None, op: Callable[[], Any]) -> Any:
        # Icechunk retries inside its client (max_tries from the same policy): translate only.
        # The deadline is a backstop past every attempt it may make.
        longest = self.retry.longest_call_s()
        deadline = None if longest is None else longest + 1.0
        return await call_once(op, deadline_s=deadline, translate=self._translate, key=key, url=self.url)

    def _translate(self, exc: BaseException, key: str | None) -> StoreError | None:
        where = f"{self.url}@{self.snapshot_id}" + (f" key {key!r}" if key else "")
        return translate_icechunk_error(exc, where, url=self.url, key=key, redact=self._redact)

    # -- writes are refused --------------------------------------------------
    async def set(self, key: str, value: Buffer) -> None:
        """Refused: the store is read-only."""
        self._check_writable()

    async def delete(self, key: str) -> None:
        """Refused: the store is read-only."""
        self._check_writable()

    # -- listings ------------------------------------------------------------
    def list(self) -> AsyncIterator[str]:
        """Every key of the snapshot; failures raise insitu's store errors."""
        return self._guard_listing(lambda: self.store.list())

    def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        """The snapshot's keys under ``prefix``, which need not name a group or array (Icechunk's own
        listing requires one)."""
        return self._guard_listing(lambda: self.store.list_prefix(prefix), prefix)

    def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """The entries directly under ``prefix``; failures raise insitu's store errors."""
        return self._guard_listing(lambda: self.store.list_dir(prefix))

    async def _guard_listing(
        self, listing: Callable[[], AsyncIterator[str]], prefix: str | None = None
    ) -> AsyncIterator[str]:
        yielded = False
        try:
            async for key in listing():
                yielded = True
                yield key
        except Exception as exc:
            if prefix is not None and not yielded and _BAD_PREFIX.search(str(exc)):
                # Icechunk lists only prefixes that name a group or array; any other prefix
                # (absent, or part of a name) is answered from the full listing.
                async for key in self._guard_listing(lambda: self.store.list()):
                    if key.startswith(prefix):
                        yield key
                return
            err = self._translate(exc, None)
            if err is None:
                raise
            raise err from None


def translate_icechunk_error(
    exc: BaseException, where: str, *, url: str, key: str | None, redact: Redactor
) -> StoreError | None:
    """The store error for an Icechunk exception (or ``None`` when it is not one)."""
    if isinstance(exc, StoreError):
        return exc
    raw = str(exc)
    text = redact(first_line(raw) or type(exc).__name__)
    unauthorised = _UNAUTHORISED.search(raw)
    if unauthorised:
        prefix = unauthorised.group(1)
        return StorePermissionError(
            f"{where}: the repository holds virtual chunks under {prefix!r}, which were not "
            f"authorised; pass icechunk_store(..., virtual_chunks={{{prefix!r}: credentials}}) "
            "(None for local files or credentials from the environment)",
            url=url,
            key=key,
        )
    if _NO_CONTAINER.search(raw):
        return StorePermissionError(
            f"{where}: a virtual chunk points outside every virtual chunk container of the "
            f"repository: {text}",
            url=url,
            key=key,
        )
    if type(exc).__module__.split(".")[0] != "icechunk" and not isinstance(exc, (OSError, ValueError)):
        return None
    if _PERMISSION_TEXT.search(raw):
        return StorePermissionError(f"permission denied reading {where}: {text}", url=url, key=key)
    if _TIMEOUT_TEXT.search(raw):
        return StoreTimeoutError(f"timed out reading {where}: {text}", url=url, key=key)
    if _TRANSIENT_TEXT.search(raw):
        return TransientStoreError(f"storage error reading {where}: {text}", url=url, key=key)
    return StoreError(f"reading {where} failed: {text}", url=url, key=key)


__all__ = ["ICECHUNK_SCHEMES", "IcechunkReadStore", "icechunk_store", "translate_icechunk_error"]
