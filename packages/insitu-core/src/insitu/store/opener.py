"""``open_store``: turn a path, a URL or a zarr Store into a zarr Store.

Plain paths and ``file://`` URLs open as ``zarr.storage.LocalStore``;
``memory://name`` opens a process-wide named ``zarr.storage.MemoryStore``.
Every other scheme is served by a store plugin (see ``insitu.plugins.registry``), and
both built-ins are registered through the same plugin path as third parties.

A URL may carry credentials (``https://user:password@host/x.zarr``, a
presigned ``?X-Amz-Signature=...``, an Azure ``?sig=...``). :func:`redact_url`
and :func:`redact_urls` replace them with ``***`` wherever a URL is shown, and
:func:`open_store` applies them to every message it raises, a plugin
builder's included.
"""

from __future__ import annotations

import errno
import inspect
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, unquote_plus

from insitu.errors import ConfigError
from insitu.plugins.registry import PluginNotFoundError, get_registry

if TYPE_CHECKING:
    # zarr is imported where a store is opened, not with this module: the built-in plugin
    # registers the builders below, and `insitu --help` loads the plugins without opening a store.
    from zarr.abc.buffer import Buffer
    from zarr.abc.store import Store
    from zarr.storage import LocalStore, MemoryStore

#: Accepted ``mode`` values (zarr's names). Only "r" is read-only; no mode deletes
#: data: overwriting belongs to ``zarr.open_group(store, mode="w")``.
MODES = ("r", "r+", "a", "w", "w-")

#: Where to get a store for the usual cloud schemes when no plugin serves them.
SCHEME_PACKAGES: dict[str, str] = {
    "s3": "insitu-stores[s3]",
    "s3a": "insitu-stores[s3]",
    "gs": "insitu-stores[gcs]",
    "gcs": "insitu-stores[gcs]",
    "az": "insitu-stores[azure]",
    "abfs": "insitu-stores[azure]",
    "abfss": "insitu-stores[azure]",
    "azure": "insitu-stores[azure]",
    "http": "insitu-stores[http]",
    "https": "insitu-stores[http]",
    "icechunk": "insitu-stores[icechunk]",
    "icechunk+file": "insitu-stores[icechunk]",
    "icechunk+s3": "insitu-stores[icechunk]",
    "icechunk+gs": "insitu-stores[icechunk]",
    "icechunk+gcs": "insitu-stores[icechunk]",
    "icechunk+az": "insitu-stores[icechunk]",
    "arraylake": "insitu-stores[arraylake]",
}

#: Scheme prefix of insitu.testing's fault-injection stores (drills, never suggested to users).
FAULTS_PREFIX = "faults+"

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*)://")

#: What stands in for a credential in a shown URL.
REDACTED = "***"
# The user-info part ("user:password@") of a URL: up to the last "@" before the path, query or
# fragment, so an unencoded "@" in a password is covered too.
# Any scheme, even a malformed one: the URL in a "malformed store URL" message is hidden too.
_USERINFO = re.compile(r"^([^:/?#]*://)([^/?#]*)@")
# name=value pairs of a query (or of a fragment: OAuth puts access_token there).
_PARAM = re.compile(r"([?&;#])([^=&;#]+)=([^&;#]*)")
# Parameter names that carry a credential: presigned S3 and GCS URLs (X-Amz-Signature,
# X-Amz-Credential, X-Amz-Security-Token, X-Goog-Signature), Azure SAS (sig), API tokens and
# keys. Matching part of a name errs towards hiding a harmless value, never towards showing one.
_SECRET_PARAM = re.compile(r"sig|token|secret|passw|credential|key|auth", re.IGNORECASE)
# A URL inside free text (an error message): it ends at whitespace or a quote.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s'\"<>`]+")
# Below this length a credential is only hidden where it sits inside a URL: replacing a very
# short string everywhere in a message would garble the message without protecting anything.
_MIN_SECRET_LEN = 4


class UnknownSchemeError(PluginNotFoundError, ValueError):
    """No installed plugin serves a URL's scheme; the message says what to install."""


def split_url(url: str) -> tuple[str, str]:
    """``(scheme, rest)`` of a store URL; the scheme is "" for a plain path.

    Raises ``ValueError`` naming the URL when it is empty, has a malformed
    scheme (``"://x"``, ``"3d://x"``) or nothing after ``scheme://``.
    """
    match = _SCHEME.match(url)
    if match is None:
        if not url or "://" in url:
            raise ValueError(f"malformed store URL {redact_url(url)!r}: expected a path or scheme://location")
        return "", url
    rest = url[match.end() :]
    if not rest:
        raise ValueError(f"malformed store URL {url!r}: nothing after '{match.group(1)}://'")
    return match.group(1).lower(), rest


def open_store(
    url_or_store: str | os.PathLike[str] | Store,
    *,
    backend: str | None = None,
    mode: str = "r",
    **options: Any,
) -> Store:
    """Open the zarr Store at a path or URL; a ``Store`` instance passes through unchanged.

    ``backend`` picks a registered store builder by name (``"obstore"``,
    ``"fsspec"``...) instead of dispatching on the URL scheme. ``mode`` "r"
    (the default) opens read-only and requires the store to exist; the other
    modes in :data:`MODES` open it writable, creating a missing local
    directory or memory store, and never delete anything. The builder is
    called as ``builder(url, read_only=mode == "r", **options)``.

    ``storage_options={...}`` (the fsspec / xarray spelling) goes to builders
    that declare a ``storage_options`` parameter: insitu-stores' fsspec
    builder passes it to the filesystem unchanged, its obstore builder (the
    default for ``s3://``, ``gs://``, ``az://``...) translates each key to
    obstore's configuration or refuses it (see ``insitu_stores.obstore_store``).
    ``None`` or an empty mapping is the same as leaving it out; a non-empty
    one for a builder without that parameter (local paths, ``memory://``,
    Icechunk) is a :class:`~insitu.errors.ConfigError` naming the builder.

    Raises ``FileNotFoundError`` naming a missing local path or memory store,
    ``ValueError`` for a malformed URL, and :class:`UnknownSchemeError` (a
    ``ValueError`` and ``KeyError``) naming the scheme and the package to
    install when no plugin serves it.
    """
    from zarr.abc.store import Store

    if isinstance(url_or_store, Store):
        if backend is not None:
            raise ValueError("backend= selects how a URL is opened; it cannot apply to a Store instance")
        return url_or_store
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
    if hasattr(url_or_store, "data_vars"):  # an xarray Dataset: it has its own entry point
        raise TypeError(
            f"expected a path, URL or zarr Store; got an xarray {type(url_or_store).__name__}: "
            "use insitu.from_xarray(ds) for a Dataset opened from Zarr"
        )
    url = os.fspath(url_or_store)
    if not isinstance(url, str):
        raise TypeError(f"expected a path, URL or zarr Store; got {type(url_or_store).__name__}")
    scheme, _ = split_url(url)
    registry = get_registry()
    if backend is not None:
        builder = registry.lookup("stores", backend)
    else:
        try:
            builder = registry.store_for_scheme(scheme).obj
        except PluginNotFoundError as exc:
            raise _unknown_scheme(scheme, exc.known) from None
    if "storage_options" in options:
        _route_storage_options(builder, options)
    try:
        store = builder(url, read_only=mode == "r", **options)
    except Exception as exc:
        # A builder (a third party's too) may quote the URL it was given; never its credentials.
        hide_url_credentials(exc, url)
        raise
    if not isinstance(store, Store):
        raise TypeError(
            f"store builder for {redact_url(url)!r} returned {type(store).__name__}, not a zarr Store"
        )
    return store


def _route_storage_options(builder: Any, options: dict[str, Any]) -> None:
    """Check ``options["storage_options"]`` and keep it only for a builder that declares it.

    An empty one is dropped (there is nothing in it to lose); a non-empty one
    for a builder without a ``storage_options`` parameter is refused rather
    than handed to a ``**kwargs`` that would read it as one option of that name.
    """
    given = options.pop("storage_options")
    if given is None:
        return
    if not isinstance(given, Mapping):
        raise ConfigError(f"storage_options must be a dict of options, got {type(given).__name__}")
    if not given:
        return
    bad = [k for k in given if not isinstance(k, str)]
    if bad:
        raise ConfigError(f"storage_options keys must be strings, got {bad[0]!r}")
    target = getattr(builder, "insitu_target", builder)  # a lazily imported builder's function
    try:
        param = inspect.signature(target).parameters.get("storage_options")
    except (TypeError, ValueError):  # no signature to read (a builtin, a C callable): let it decide
        param = None
    else:
        if param is None or param.kind not in (param.KEYWORD_ONLY, param.POSITIONAL_OR_KEYWORD):
            name = getattr(target, "__qualname__", None) or type(target).__name__
            raise ConfigError(
                f"storage_options is not understood by the store builder {name}; "
                f"pass its options as keywords (given: {', '.join(sorted(given))})"
            )
    options["storage_options"] = dict(given)


def _unknown_scheme(scheme: str, registered: tuple[str, ...]) -> UnknownSchemeError:
    """The error for a scheme no plugin serves, kept to what a user can act on.

    Fault-injection schemes (``faults+s3``) are drills for tests, not places a
    user means to read from: they are neither listed nor suggested, and the
    install hint names only packages that are missing.
    """
    # "" is plain paths, not a scheme to type.
    known = [s for s in registered if s and not s.startswith(FAULTS_PREFIX)]
    package = SCHEME_PACKAGES.get(scheme.removeprefix(FAULTS_PREFIX))
    if package:
        hint = f"; install it with: pip install '{package}'"
    else:  # one install line for every missing extra: short, and it covers what the user meant
        extras = sorted(
            {
                pkg.partition("[")[2].rstrip("]")
                for name, pkg in SCHEME_PACKAGES.items()
                if name not in registered
            }
        )
        hint = f"; cloud schemes come with: pip install 'insitu-stores[{','.join(extras)}]'" if extras else ""
    return UnknownSchemeError("URL schemes", scheme, known, hint)


def local_store(url: str, *, read_only: bool = True) -> LocalStore:
    """Store builder for plain paths and ``file://`` URLs (``file://rel/dir`` is relative)."""
    scheme, rest = split_url(url)
    if scheme not in ("", "file"):
        raise ValueError(f"not a local path or file:// URL: {redact_url(url)!r}")
    if scheme == "file":
        if rest.startswith("localhost/"):
            rest = rest[len("localhost") :]
        rest = unquote(rest)
    path = Path(rest).expanduser()
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "a local Zarr store must be a directory", str(path))
    if read_only and not path.exists():
        raise FileNotFoundError(errno.ENOENT, "no Zarr store at this path", str(path))
    from zarr.storage import LocalStore

    return LocalStore(path, read_only=read_only)


# Named in-memory stores live as long as the process, so a test can write to
# "memory://x" and open it again by URL. Each open wraps the same dict.
_memory: dict[str, dict[str, Buffer]] = {}
_memory_lock = threading.Lock()


def memory_store(url: str, *, read_only: bool = True) -> MemoryStore:
    """Store builder for ``memory://name``: one shared ``MemoryStore`` content per name."""
    scheme, name = split_url(url)
    if scheme != "memory":
        raise ValueError(f"not a memory:// URL: {redact_url(url)!r}")
    with _memory_lock:
        if name not in _memory:
            if read_only:
                raise FileNotFoundError(errno.ENOENT, "no in-memory store with this name", redact_url(url))
            _memory[name] = {}
        content = _memory[name]
    from zarr.storage import MemoryStore

    return MemoryStore(content, read_only=read_only)


# -- credentials in URLs ---------------------------------------------------------------------------
def redact_url(url: str) -> str:
    """``url`` with its credentials replaced by ``***``; the rest stays as written.

    Hidden: the password of ``user:password@`` (or the whole user part when
    there is no password: a lone user name is often a token, as in
    ``https://TOKEN@host``) and the value of every query or fragment
    parameter whose name says it is a credential (``X-Amz-Signature``,
    ``X-Amz-Credential``, ``sig``, ``token``, ``key``...). Stable: the same URL
    always gives the same text, so it can name a location in a cache identity.
    """
    match = _USERINFO.match(url)
    if match is not None:
        user, has_password, _ = match.group(2).partition(":")
        shown = f"{user}:{REDACTED}" if has_password else REDACTED
        url = f"{match.group(1)}{shown}@{url[match.end() :]}"
    start = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=-1)
    if start < 0:
        return url
    return url[:start] + _PARAM.sub(_redact_param, url[start:])


def redact_urls(text: str) -> str:
    """``text`` (an error message, a repr) with every URL in it passed through :func:`redact_url`."""
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)


def url_secrets(url: str) -> tuple[str, ...]:
    """The credentials ``url`` carries, as written and percent-decoded, longest first.

    For hiding them where a backend shows one outside the URL (an HTTP
    client's ``BasicAuth(login=..., password=...)``). Values shorter than four
    characters are left out: :func:`redact_urls` still hides them inside URLs.
    """
    found: set[str] = set()
    match = _USERINFO.match(url)
    if match is not None:
        user, has_password, password = match.group(2).partition(":")
        found.add(password if has_password else user)
    start = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=-1)
    if start >= 0:
        found.update(m.group(3) for m in _PARAM.finditer(url[start:]) if _SECRET_PARAM.search(m.group(2)))
    found |= {unquote_plus(s) for s in found}
    return tuple(sorted((s for s in found if len(s) >= _MIN_SECRET_LEN), key=len, reverse=True))


def redact_text(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` with URL credentials hidden (:func:`redact_urls`) and each of ``secrets`` replaced."""
    text = redact_urls(text)
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


def hide_url_credentials(exc: BaseException, url: str) -> None:
    """Rewrite ``exc`` in place so that neither its message nor its chain shows ``url``'s credentials.

    The exception keeps its type (callers catch ``FileNotFoundError``,
    ``PermissionError``...); its string arguments (and an ``OSError``'s file
    names) are redacted, and causes that quote a credential are cut off.
    """
    secrets = url_secrets(url)

    def clean(text: str) -> str:
        return redact_text(text, secrets)

    exc.args = tuple(clean(a) if isinstance(a, str) else a for a in exc.args)
    if isinstance(exc, OSError):
        if isinstance(exc.filename, str):
            exc.filename = clean(exc.filename)
        if isinstance(exc.filename2, str):
            exc.filename2 = clean(exc.filename2)
    if any(_shows_secret(e, clean) for e in _chain(exc)):
        exc.__cause__ = None
        exc.__context__ = None
        exc.__suppress_context__ = True


def _redact_param(match: re.Match[str]) -> str:
    sep, name, _ = match.groups()
    return match.group(0) if not _SECRET_PARAM.search(name) else f"{sep}{name}={REDACTED}"


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc.__cause__ or exc.__context__
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _shows_secret(exc: BaseException, clean: Any) -> bool:
    text = f"{exc!s} {exc!r}"
    return clean(text) != text


__all__ = [
    "MODES",
    "REDACTED",
    "SCHEME_PACKAGES",
    "UnknownSchemeError",
    "hide_url_credentials",
    "local_store",
    "memory_store",
    "open_store",
    "redact_text",
    "redact_url",
    "redact_urls",
    "split_url",
    "url_secrets",
]
