"""Store errors: what a store raises once its own retries are spent, or at once when retrying cannot help.

Every backend (obstore, fsspec, Icechunk) raises its own exception types; the
stores in this package translate them, by type, into these, so callers see
one model:

- :class:`TransientStoreError` (a ``ConnectionError``) and
  :class:`StoreTimeoutError` (a ``TimeoutError``): 5xx, throttling, reset or
  refused connections, per-request timeouts, when the backend's exception
  says so by its type (or a status code it carries as data). Retried by one
  layer: insitu's engine for a store that makes one attempt per call
  (fsspec), or the store's backend before it raises (a store that declares
  its ``RetryPolicy``, which the engine then does not retry again).
- :class:`StorePermissionError` (a ``PermissionError``): 401/403, missing or
  unusable credentials; raised at once, never retried, with a hint saying
  what to set or pass (never a value).
- :class:`StoreConfigurationError` (also a ``ValueError``): the request can
  never succeed as configured (an unknown option, an invalid path or URL, a
  plain ``http://`` endpoint without ``allow_http``, a region or endpoint the
  backend cannot use, an operation the service does not support); never
  retried.
- :class:`StoreNotFoundError`: the bucket, container, repository or version
  itself does not exist. A missing *key* is not an
  error: ``Store.get`` returns ``None`` for it, as zarr expects.
- :class:`StoreError`: any other failed request, e.g. everything obstore
  reports with its one generic exception type after its own retries.

Messages name the URL (and key) and never contain credentials: each store
knows its secret option values, the credentials in its URLs
(``user:password@``, a presigned ``?X-Amz-Signature=``) and those its backend
reads from the environment, and scrubs them from any text it raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from insitu.plugin_api import redact_text, url_secrets

#: Option names whose values are secrets, for every backend this package drives.
SECRET_OPTIONS = frozenset(
    {
        "access_key_id",
        "secret_access_key",
        "session_token",
        "token",
        "key",
        "secret",
        "password",
        "account_key",
        "sas_key",
        "sas_token",
        "client_secret",
        "bearer_token",
        "service_account_key",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "authorization",  # an HTTP header in client_options["default_headers"]
    }
)

# Icechunk's report decorations ("  x msg", "  |", "  `-> cause") in front of a message line.
_DECORATION = re.compile(r"^[\s|`>-]*(?:x\s+)?")


class StoreError(OSError):
    """A store request failed; ``url`` and ``key`` say where."""

    def __init__(self, message: str, *, url: str = "", key: str | None = None) -> None:
        super().__init__(message)
        self.url = url
        self.key = key

    def __str__(self) -> str:  # OSError would format (errno, strerror) when given two args
        return str(self.args[0]) if self.args else ""


class TransientStoreError(StoreError, ConnectionError):
    """A failure that may succeed on retry (5xx, throttling, connection reset or refused)."""


class StoreTimeoutError(StoreError, TimeoutError):
    """A request did not complete within the per-request timeout (``limit_s``, when known)."""

    limit_s: float | None = None


class StorePermissionError(StoreError, PermissionError):
    """The credentials were refused (401) or lack permission (403)."""


class StoreConfigurationError(StoreError, ValueError):
    """The request cannot succeed as configured (unknown option, invalid path, unsupported operation)."""


class StoreNotFoundError(StoreError):
    """The bucket, container, repository or version does not exist (a missing key is not this).

    Deliberately not a ``FileNotFoundError``: zarr reads that as "no metadata
    here, try the next format" and would report an empty store instead.
    """


class Redactor:
    """Removes known secret values, and the credentials of any URL, from text (error messages, reprs)."""

    def __init__(self, secrets: Iterable[object] = ()) -> None:
        # Longest first, so a secret that contains another is removed whole.
        found = {str(s) for s in secrets if isinstance(s, str) and len(s) >= 4}
        self.secrets = tuple(sorted(found, key=len, reverse=True))

    @classmethod
    def from_options(
        cls, options: dict[str, object], urls: Iterable[str | None] = (), extra: Iterable[object] = ()
    ) -> Redactor:
        """Collect the values of secret-named options (nested dicts included), the credentials
        that ``urls`` carry (the store's URL, an endpoint), which a backend may quote on their own,
        and ``extra`` secrets (credentials the backend reads from the environment)."""
        secrets = [*_secret_values(options), *extra]
        for url in urls:
            if url:
                secrets.extend(url_secrets(url))
        return cls(secrets)

    def __call__(self, text: str) -> str:
        """``text`` with URL credentials hidden and every known secret replaced."""
        return redact_text(text, self.secrets)


def _secret_values(options: object) -> list[object]:
    values: list[object] = []
    if isinstance(options, dict):
        for name, value in options.items():
            if isinstance(value, dict):
                values += _secret_values(value)
            elif str(name).lower() in SECRET_OPTIONS:
                values.append(value)
    return values


def first_line(text: str, limit: int = 300) -> str:
    """The first non-empty line of a backend's message, cut to ``limit`` characters.

    obstore and Icechunk append multi-line debug dumps; the first line carries
    the method, URL and status.
    """
    for raw in text.splitlines():
        line = _DECORATION.sub("", raw).strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


__all__ = [
    "SECRET_OPTIONS",
    "Redactor",
    "StoreConfigurationError",
    "StoreError",
    "StoreNotFoundError",
    "StorePermissionError",
    "StoreTimeoutError",
    "TransientStoreError",
    "first_line",
]
