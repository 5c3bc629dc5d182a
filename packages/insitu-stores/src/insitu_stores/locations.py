"""Parsing and checking store URLs: scheme, bucket (or container, or host) and prefix.

Checked before any request so a typo fails at once with the URL in the
message, instead of as a confusing 404 or DNS error later.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

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


@dataclass(frozen=True)
class Location:
    """Where a store lives: ``service`` is the folded scheme ("s3", "gs", "az", "http", "file"...)."""

    url: str
    scheme: str
    service: str
    bucket: str  # bucket, container or host; "" for file and memory
    prefix: str  # path inside the bucket (or the local path), no leading or trailing "/"

    def join(self, key: str) -> str:
        """The URL of ``key`` inside this location."""
        return f"{self.url.rstrip('/')}/{key}"


def parse_location(url: str) -> Location:
    """Split and check a store URL; raises ``ValueError`` naming the URL and the problem."""
    match = _SCHEME.match(url)
    if match is None:
        raise ValueError(f"malformed store URL {url!r}: expected scheme://location")
    scheme = match.group(1).lower()
    service = SCHEME_ALIASES.get(scheme, scheme)
    parts = urlsplit(url)
    if service == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"malformed file URL {url!r}: use file:///absolute/path")
        return Location(url, scheme, service, "", parts.path.rstrip("/"))
    if service == "memory":
        return Location(url, scheme, service, "", url[match.end() :].strip("/"))
    bucket = parts.netloc
    if service == "az" and "@" in bucket:  # abfs://container@account.dfs.core.windows.net/path
        bucket = bucket.split("@", 1)[0]
    if not bucket:
        what = "host" if service in ("http", "https") else "bucket or container"
        raise ValueError(f"malformed store URL {url!r}: no {what} after '{scheme}://'")
    if service == "s3" and not _S3_BUCKET.match(bucket):
        raise ValueError(
            f"malformed S3 URL {url!r}: {bucket!r} is not a valid bucket name "
            "(3-63 characters: lowercase letters, digits, '.' and '-')"
        )
    if parts.query or parts.fragment:
        raise ValueError(f"malformed store URL {url!r}: unexpected '?' or '#' part")
    return Location(url, scheme, service, bucket, parts.path.strip("/"))


__all__ = ["CLOUD_SCHEMES", "SCHEME_ALIASES", "Location", "parse_location"]
