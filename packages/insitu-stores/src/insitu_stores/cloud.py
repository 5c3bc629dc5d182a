"""Cloud configuration the store builders share: the environment, where credentials come from, hints.

**The environment.** obstore reads ``AWS_*`` (S3), ``GOOGLE_*`` (GCS) and
``AZURE_*`` (Azure) variables itself, configuration keys and HTTP client
options alike (``AWS_ENDPOINT_URL``, ``AWS_ALLOW_HTTP``, ``AWS_TIMEOUT``...).
But a ``client_options`` argument *replaces* the client options it read from
the environment instead of adding to them, and insitu always passes some (the
``RetryPolicy``'s timeouts). :func:`env_client_options` reads the client
options from the environment the way obstore does (prefix, then an option
name, case-insensitive), so that the builder can merge insitu's options on
top of them, key by key. fsspec's filesystems (botocore, gcsfs, adlfs) read
their environment themselves and are given nothing that replaces it.

**Credentials.** :class:`CloudSetup` records, for one obstore store, whether
any credential source was configured (options or environment), and the
addresses obstore asks for credentials when none was (the instance metadata
service): obstore 0.12 reports a failure there with its one generic exception
type, which the store recognises by that address, a value of its own
configuration. :func:`credentials_hint` says what to do, per cloud, without
quoting any value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

#: The environment-variable prefix each obstore client reads (object_store's ``from_env``).
ENV_PREFIX = {"s3": "AWS_", "gs": "GOOGLE_", "az": "AZURE_"}

#: HTTP client options obstore (object_store) reads from ``<PREFIX><OPTION>`` variables, e.g.
#: ``AWS_ALLOW_HTTP``, ``GOOGLE_TIMEOUT``, ``AZURE_PROXY_URL``. (``root_certificate`` and
#: ``default_headers`` are client options obstore takes only as arguments.)
ENV_CLIENT_OPTIONS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "http1_only",
        "http2_keep_alive_interval",
        "http2_keep_alive_timeout",
        "http2_keep_alive_while_idle",
        "http2_max_frame_size",
        "http2_only",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_ca_certificate",
        "proxy_excludes",
        "proxy_url",
        "randomize_addresses",
        "read_timeout",
        "timeout",
        "user_agent",
    }
)

#: Environment variables whose values are secrets: scrubbed from messages like secret options.
SECRET_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_TOKEN",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "GOOGLE_BEARER_TOKEN",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_MASTER_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_TOKEN",
    "AZURE_STORAGE_CLIENT_SECRET",
    "AZURE_CLIENT_SECRET",
    "AZURE_STORAGE_CONNECTION_STRING",
)

# Credential sources obstore uses before falling back to the instance metadata service, as
# configuration keys (prefix stripped, aliases folded, see obstore_backend._config_name) and as
# environment variables. skip_signature (anonymous) is recorded separately.
_CREDENTIAL_KEYS = {
    "s3": frozenset(
        {
            "access_key_id",
            "secret_access_key",
            "session_token",
            "token",
            "credential_provider",
            "web_identity_token_file",
            "container_credentials_relative_uri",
            "container_credentials_full_uri",
        }
    ),
    "gs": frozenset(
        {
            "service_account",
            "service_account_key",
            "application_credentials",
            "bearer_token",
            "credential_provider",
        }
    ),
    "az": frozenset(
        {
            "account_key",
            "access_key",
            "master_key",
            "sas_key",
            "token",
            "bearer_token",
            "client_secret",
            "federated_token_file",
            "use_azure_cli",
            "use_emulator",
            "credential_provider",
        }
    ),
}
_CREDENTIAL_ENV = {
    "s3": (
        "AWS_ACCESS_KEY_ID",
        "AWS_SESSION_TOKEN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ),
    "gs": (
        "GOOGLE_SERVICE_ACCOUNT",
        "GOOGLE_SERVICE_ACCOUNT_PATH",
        "GOOGLE_SERVICE_ACCOUNT_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GOOGLE_BEARER_TOKEN",
    ),
    "az": (
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_ACCESS_KEY",
        "AZURE_STORAGE_MASTER_KEY",
        "AZURE_STORAGE_SAS_KEY",
        "AZURE_STORAGE_SAS_TOKEN",
        "AZURE_STORAGE_TOKEN",
        "AZURE_STORAGE_CLIENT_SECRET",
        "AZURE_CLIENT_SECRET",
        "AZURE_FEDERATED_TOKEN_FILE",
        "AZURE_USE_AZURE_CLI",
        "AZURE_STORAGE_USE_EMULATOR",
    ),
}
# gcloud's application default credentials, which obstore's GCS client reads when nothing else
# is configured.
GCLOUD_ADC = Path("~/.config/gcloud/application_default_credentials.json")

# Where obstore asks for credentials when none is configured: the instance metadata service
# (and, on AWS, the container credentials address). Overridable for S3 and Azure.
_DEFAULT_CREDENTIAL_HOSTS = {
    "s3": ("169.254.169.254", "169.254.170.2"),
    "gs": ("metadata.google.internal", "169.254.169.254"),
    "az": ("169.254.169.254",),
}
_METADATA_ENDPOINT = {
    "s3": ("metadata_endpoint", "AWS_METADATA_ENDPOINT"),
    "az": ("msi_endpoint", "AZURE_MSI_ENDPOINT"),
}

# Where the endpoint comes from when no option gives one: environment variables, first found wins.
_ENDPOINT_ENV = {
    "s3": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
    "gs": ("GOOGLE_BASE_URL",),
    "az": ("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT"),
}
_ENDPOINT_KEYS = {"s3": ("endpoint_url_s3", "endpoint"), "gs": ("base_url",), "az": ("endpoint",)}

_TRUE = frozenset({"1", "true", "yes", "on", "y"})

_WHAT = {"s3": "bucket", "gs": "bucket", "az": "container"}
_HOW = {
    "s3": "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or pass key/secret",
    "gs": (
        "set GOOGLE_APPLICATION_CREDENTIALS to a service-account JSON file or pass "
        "storage_options={'token': <that file or its dict>}"
    ),
    "az": (
        "set AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY (or AZURE_STORAGE_SAS_TOKEN) "
        "or pass account_name/account_key (or sas_token)"
    ),
}


# Prefixes and aliases obstore accepts for one config key ("aws_access_key_id", "sas_token"...):
# options that name the same key are the same option, whatever their spelling.
_CONFIG_PREFIXES = ("aws_", "google_", "azure_storage_", "azure_")
_CONFIG_ALIASES = {
    "service_account_path": "service_account",
    "sas_token": "sas_key",
    "endpoint_url": "endpoint",
}


def config_name(key: str) -> str:
    """An obstore configuration key without its cloud prefix, aliases folded (``aws_endpoint_url``
    and ``endpoint`` are both ``endpoint``)."""
    name = key.lower()
    for prefix in _CONFIG_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    return _CONFIG_ALIASES.get(name, name)


def truthy(value: object) -> bool:
    """A boolean option as object_store parses one from text (``true``, ``1``, ``yes``, ``on``)."""
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in _TRUE


def env_client_options(service: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The HTTP client options obstore would read from the environment for ``service``.

    ``{"allow_http": "true"}`` for ``AWS_ALLOW_HTTP=true`` on S3, for example;
    empty for services whose obstore client reads no environment (HTTP, local).
    """
    prefix = ENV_PREFIX.get(service)
    if prefix is None:
        return {}
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name, value in env.items():
        if name.startswith(prefix):
            option = name[len(prefix) :].lower()
            if option in ENV_CLIENT_OPTIONS:
                out[option] = value
    return out


def env_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the credential variables that are set (to scrub from messages)."""
    env = os.environ if environ is None else environ
    return [env[name] for name in SECRET_ENV if env.get(name)]


@dataclass(frozen=True)
class CloudSetup:
    """What one obstore store was configured with, options and environment together.

    ``endpoint`` is the server the client talks to (``None``: the cloud's
    own), as given, so it may hold credentials: show it through
    ``insitu.store.opener.redact_url``.
    """

    service: str
    endpoint: str | None = None
    allow_http: bool = False
    anonymous: bool = False
    credentials: bool = False
    credential_hosts: tuple[str, ...] = ()

    @property
    def plain_http_refused(self) -> bool:
        """True when the endpoint is ``http://`` but plain HTTP is not allowed: every request fails."""
        return bool(self.endpoint and self.endpoint.lower().startswith("http://") and not self.allow_http)

    def names_credential_service(self, text: str) -> bool:
        """True when ``text`` (a backend's message) names a request to a credentials address."""
        return any(f"//{host}/" in text or f"//{host}:" in text for host in self.credential_hosts)


def obstore_setup(
    service: str,
    config: Mapping[str, Any],
    client_options: Mapping[str, Any],
    *,
    environ: Mapping[str, str] | None = None,
) -> CloudSetup:
    """The effective configuration of an obstore client for ``service``.

    ``config`` holds the configuration keys passed to obstore, ``client_options``
    the merged client options. The environment fills in what the options
    leave unset, as obstore does.
    """
    env = os.environ if environ is None else environ
    given = {config_name(k): v for k, v in config.items() if v is not None}
    prefix = ENV_PREFIX.get(service)
    endpoint = next((str(given[k]) for k in _ENDPOINT_KEYS.get(service, ()) if k in given), None)
    if endpoint is None:
        endpoint = next((env[n] for n in _ENDPOINT_ENV.get(service, ()) if env.get(n)), None)
    anonymous = truthy(given.get("skip_signature", False)) or bool(
        prefix and truthy(env.get(f"{prefix}SKIP_SIGNATURE", ""))
    )
    keys = _CREDENTIAL_KEYS.get(service, frozenset())
    credentials = any(k in given for k in keys) or any(env.get(n) for n in _CREDENTIAL_ENV.get(service, ()))
    if service == "gs" and not credentials:
        credentials = GCLOUD_ADC.expanduser().is_file()
    hosts = list(_DEFAULT_CREDENTIAL_HOSTS.get(service, ()))
    key, variable = _METADATA_ENDPOINT.get(service, (None, None))
    custom = (given.get(key) if key else None) or (env.get(variable) if variable else None)
    if custom:
        netloc = urlsplit(str(custom)).netloc
        if netloc:
            hosts.insert(0, netloc)
    return CloudSetup(
        service=service,
        endpoint=endpoint,
        allow_http=truthy(client_options.get("allow_http", False)),
        anonymous=anonymous,
        credentials=credentials,
        credential_hosts=tuple(hosts),
    )


def credentials_hint(service: str, *, anonymous: bool = False, found: bool = True) -> str:
    """What to do about refused or missing credentials on ``service`` ("" for non-cloud services).

    ``found=False``: no credentials were found at all; ``anonymous``: the
    request was unsigned on purpose. Names variables and options, never values.
    """
    how = _HOW.get(service)
    if how is None:
        return ""
    what = _WHAT[service]
    if anonymous:
        return (
            f"the request was unsigned (anonymous=True) and the {what} refused it, so it is not public: {how}"
        )
    if not found:
        return (
            f"no credentials found: for a public {what} pass storage_options={{'anon': True}} "
            f"(or anonymous=True); otherwise {how}"
        )
    return (
        f"the credentials were refused or lack permission: check them ({how}); a public {what} "
        "reads without any: storage_options={'anon': True} (or anonymous=True)"
    )


def allow_http_hint(service: str) -> str:
    """What to do about a plain ``http://`` endpoint that obstore refuses."""
    prefix = ENV_PREFIX.get(service)
    variable = f" or set {prefix}ALLOW_HTTP=true" if prefix else ""
    return f"the endpoint is plain http:// and HTTP is not allowed: pass allow_http=True{variable}"


__all__ = [
    "ENV_CLIENT_OPTIONS",
    "ENV_PREFIX",
    "SECRET_ENV",
    "CloudSetup",
    "allow_http_hint",
    "config_name",
    "credentials_hint",
    "env_client_options",
    "env_secrets",
    "obstore_setup",
    "truthy",
]
