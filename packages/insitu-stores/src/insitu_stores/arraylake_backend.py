"""Arraylake: a hosted catalogue of Icechunk repositories, reached through the arraylake client.

``arraylake_store("org/repo", branch="main")`` asks the client for the
repository (an ``icechunk.Repository``) and opens it with
:func:`~insitu_stores.icechunk_store`, so snapshots, virtual chunk
authorisation and cache identity behave exactly as for Icechunk.

The client call may need the network (token refresh, repository lookup). It
runs on a daemon thread under ``timeout_s``: a missing login fails at once
with the client's own message, an unreachable service fails after the
timeout, and neither can hang a training job.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from typing import Any

from insitu.plugin_api import RetryPolicy, redact_url
from insitu_stores.errors import Redactor, StoreError, StorePermissionError, StoreTimeoutError, first_line
from insitu_stores.icechunk_backend import IcechunkReadStore, icechunk_store
from insitu_stores.schemes import ARRAYLAKE_SCHEMES

_REPO_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_NOT_LOGGED_IN = re.compile(r"not logged in|auth|token|credential|unauthori[sz]ed|401|403", re.IGNORECASE)


def arraylake_store(
    repo: str,
    *,
    read_only: bool = True,
    branch: str | None = None,
    tag: str | None = None,
    snapshot: str | None = None,
    client: Any = None,
    token: str | None = None,
    service_uri: str | None = None,
    virtual_chunks: Mapping[str, Any] | None = None,
    timeout_s: float = 30.0,
    retry: RetryPolicy | None = None,
) -> IcechunkReadStore:
    """Open Arraylake repository ``repo`` ("org/name" or ``arraylake://org/name``) read-only.

    ``client`` is an ``arraylake.Client`` (or any object with the same
    ``get_repo(name)`` method); by default one is made from ``token`` /
    ``service_uri`` or the login that ``arraylake auth login`` stored.
    ``branch`` / ``tag`` / ``snapshot``, ``virtual_chunks``, ``read_only`` and
    ``retry`` are as for :func:`~insitu_stores.icechunk_store`. ``virtual_chunks`` entries are
    Icechunk credentials for the repository's virtual chunk containers.

    Raises :class:`~insitu_stores.errors.StorePermissionError` when not logged
    in or refused, :class:`~insitu_stores.errors.StoreTimeoutError` when the
    service does not answer within ``timeout_s``, ``ImportError`` naming the
    package when arraylake is not installed, ``ValueError`` for a malformed
    repository name.
    """
    name, query_refs = _repo_name(repo)
    redact = Redactor.from_options({"token": token}, urls=(repo, service_uri))
    shown = redact_url(repo)
    refs: dict[str, str | None] = {"branch": branch, "tag": tag, "snapshot": snapshot}
    for key, value in query_refs.items():
        if refs.get(key) not in (None, value):
            raise ValueError(f"{key}={refs[key]!r} conflicts with ?{key}={value} in {shown!r}")
        refs[key] = value
    if client is None:
        client = _default_client(token, service_uri)
    ice_repo = _call_with_deadline(lambda: client.get_repo(name), name, timeout_s, redact)
    store = icechunk_store(
        ice_repo,
        read_only=read_only,
        branch=refs["branch"],
        tag=refs["tag"],
        snapshot=refs["snapshot"],
        virtual_chunks=virtual_chunks,
        retry=retry,
    )
    store.url = f"arraylake://{name}"
    return store


def _repo_name(repo: str) -> tuple[str, dict[str, str]]:
    name = repo
    refs: dict[str, str] = {}
    for scheme in ARRAYLAKE_SCHEMES:
        if name.lower().startswith(f"{scheme}://"):
            name = name.split("://", 1)[1]
            break
    if "?" in name:
        from urllib.parse import parse_qs

        name, query = name.split("?", 1)
        parsed = parse_qs(query)
        if set(parsed) - {"branch", "tag", "snapshot"} or any(len(v) != 1 for v in parsed.values()):
            raise ValueError(
                f"malformed Arraylake URL {redact_url(repo)!r}: the query may set branch, tag or snapshot"
            )
        refs = {k: v[0] for k, v in parsed.items()}
    name = name.strip("/")
    if not _REPO_NAME.match(name):
        raise ValueError(
            f"malformed Arraylake repository {redact_url(repo)!r}: expected 'org/repo' or arraylake://org/repo"
        )
    return name, refs


def _default_client(token: str | None, service_uri: str | None) -> Any:
    try:
        from arraylake import Client
    except ImportError:
        raise ImportError(
            "arraylake_store needs the arraylake client: pip install 'insitu-stores[arraylake]'"
        ) from None
    kwargs: dict[str, Any] = {}
    if token is not None:
        kwargs["token"] = token
    if service_uri is not None:
        kwargs["service_uri"] = service_uri
    return Client(**kwargs)


def _call_with_deadline(call: Any, name: str, timeout_s: float, redact: Redactor) -> Any:
    """``call()`` on a daemon thread; a hung network call cannot block the caller (or its exit)."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name=f"arraylake-open-{name}", daemon=True).start()
    if not done.wait(timeout_s):
        raise StoreTimeoutError(
            f"Arraylake did not answer within {timeout_s} s opening {name!r}; check the network "
            f"and service URI ({redact_url(os.environ.get('ARRAYLAKE_SERVICE_URI', 'default service'))})",
            url=f"arraylake://{name}",
        )
    if "error" in box:
        exc = box["error"]
        text = redact(first_line(str(exc)) or type(exc).__name__)
        if isinstance(exc, StoreError):
            raise exc
        if type(exc).__name__ == "AuthException" or _NOT_LOGGED_IN.search(text):
            raise StorePermissionError(
                f"cannot open Arraylake repository {name!r}: {text} (log in with `arraylake auth login`, "
                "or pass token= / client=)",
                url=f"arraylake://{name}",
            ) from None
        raise StoreError(
            f"cannot open Arraylake repository {name!r}: {text}", url=f"arraylake://{name}"
        ) from None
    return box["value"]


__all__ = ["ARRAYLAKE_SCHEMES", "arraylake_store"]
