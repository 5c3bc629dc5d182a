"""Parsing and checking store URLs: scheme, bucket (or container, or host) and prefix.

Checked before any request so a typo fails at once with the URL in the
message, instead of as a confusing 404 or DNS error later. A URL is shown
(in messages, reprs and store identities) only as :attr:`Location.safe_url`,
with its credentials replaced by ``***``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from insitu.plugin_api import redact_url

#: Schemes naming the same service, folded to one spelling.
SCHEME_ALIASES = {
    "s3a": "s3",
    "gcs": "gs",
    "azure": "az",
    "abfs": "az",
    "abfss": "az",
    "adl": "az",
}
CLOUD_SCHEMES = ("s3", "gs", "az")
_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")


@dataclass(frozen=True, repr=False)
class Location:
    """Where a store lives: ``service`` is the folded scheme ("s3", "gs", "az", "http", "file"...).

    ``url`` is the URL as given, credentials included, for the backend that
    fetches from it; anything shown to a person or written down uses
    :attr:`safe_url`.
    """

    url: str
    scheme: str
    service: str
    bucket: str  # bucket, container or host (without user:password@); "" for file and memory
    prefix: str  # path inside the bucket (or the local path), no leading or trailing "/"

    @property
    def safe_url(self) -> str:
        """The URL with its credentials (password, signature or token) replaced by ``***``."""
        return redact_url(self.url)

    @property
    def root(self) -> str:
        """``scheme://bucket`` as given (with any user:password@): what a backend client is built on."""
        return f"{self.scheme}://{urlsplit(self.url).netloc}"

    def join(self, key: str) -> str:
        """The shown URL of ``key`` inside this location (credentials hidden)."""
        return f"{self.safe_url.rstrip('/')}/{key}"

    def __repr__(self) -> str:
        return f"Location({self.safe_url!r})"


def parse_location(url: str) -> Location:
    """Split and check a store URL; raises ``ValueError`` naming the URL (credentials hidden) and the problem."""
    shown = redact_url(url)
    match = _SCHEME.match(url)
    if match is None:
        raise ValueError(f"malformed store URL {shown!r}: expected scheme://location")
    scheme = match.group(1).lower()
    service = SCHEME_ALIASES.get(scheme, scheme)
    parts = urlsplit(url)
    if service == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"malformed file URL {shown!r}: use file:///absolute/path")
        return Location(url, scheme, service, "", parts.path.rstrip("/"))
    if service == "memory":
        return Location(url, scheme, service, "", url[match.end() :].strip("/"))
    bucket = parts.netloc
    if service == "az" and "@" in bucket:  # abfs://container@account.dfs.core.windows.net/path
        bucket = bucket.split("@", 1)[0]
    elif "@" in bucket:  # user:password@host
        if service in ("s3", "gs"):
            raise ValueError(
                f"malformed store URL {shown!r}: {scheme}:// URLs carry no credentials; pass them as "
                "options (access_key_id= / secret_access_key=, service_account_key=...)"
            )
        bucket = bucket.rpartition("@")[2]
    if not bucket:
        what = "host" if service in ("http", "https") else "bucket or container"
        raise ValueError(f"malformed store URL {shown!r}: no {what} after '{scheme}://'")
    if service == "s3" and not _S3_BUCKET.match(bucket):
        raise ValueError(
            f"malformed S3 URL {shown!r}: {bucket!r} is not a valid bucket name "
            "(3-63 characters: lowercase letters, digits, '.' and '-')"
        )
    if parts.query or parts.fragment:
        # Shown redacted: a presigned query (?X-Amz-Signature=..., ?sig=...) is a credential.
        raise ValueError(f"malformed store URL {shown!r}: unexpected '?' or '#' part")
    return Location(url, scheme, service, bucket, parts.path.strip("/"))


__all__ = ["CLOUD_SCHEMES", "SCHEME_ALIASES", "Location", "parse_location"]
