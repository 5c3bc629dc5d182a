"""The service's own error code (``InvalidAccessKeyId``, ``SignatureDoesNotMatch``...) and what it means.

A 403 says only "refused"; the code in the response says why, and so which
setting to check: the key ID, the secret, the session token, the policy or the
clock. Backends keep it in different places: botocore as data
(``response["Error"]["Code"]``, which s3fs raises from), obstore 0.12 only
inside its message, as the XML error body the service sent, on a line after
the one the stores show. :func:`service_error_code` finds it in either, so a
message can lead with it even when the body is cut off.
"""

from __future__ import annotations

import re

# The <Code> of an S3-style XML error body (S3 and its clones, GCS's XML API, Azure Blob).
_CODE_IN_BODY = re.compile(r"<Code>\s*([A-Za-z][A-Za-z0-9.]{1,63})\s*</Code>")
# An XML error body quoted at the end of a backend's message line (obstore's "...: <?xml ...?>").
_XML_TAIL = re.compile(r":?\s*<(?:\?xml|Error>).*$")
# How many exceptions of a chain to look through: s3fs raises its own OSError from botocore's.
_CHAIN = 4

_S3_KEYS = "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the key/secret options"

#: What each code means and what to do, for the codes a misconfigured reader meets. Names
#: variables and options, never values.
CODE_HINTS: dict[str, str] = {
    "InvalidAccessKeyId": (
        "the service does not know this access key ID: check AWS_ACCESS_KEY_ID or the key option "
        "(a key of another account, service or endpoint is refused too)"
    ),
    "SignatureDoesNotMatch": (
        "the access key ID is known but the secret does not match it: check AWS_SECRET_ACCESS_KEY "
        "or the secret option"
    ),
    "AccessDenied": (
        "the credentials were accepted but lack permission for this object or bucket: check the "
        f"policy (s3:GetObject, s3:ListBucket) or use other credentials ({_S3_KEYS}); a public "
        "bucket reads without any: storage_options={'anon': True} (or anonymous=True)"
    ),
    "ExpiredToken": (
        "the session token has expired: refresh the temporary credentials "
        "(AWS_SESSION_TOKEN or the token option, with their key ID and secret)"
    ),
    "TokenRefreshRequired": (
        "the session token has expired: refresh the temporary credentials "
        "(AWS_SESSION_TOKEN or the token option, with their key ID and secret)"
    ),
    "InvalidToken": (
        "the session token is not valid for these credentials: check AWS_SESSION_TOKEN or the "
        "token option (unset it for long-term keys)"
    ),
    "RequestTimeTooSkewed": (
        "this machine's clock is too far from the service's for a signed request: set the clock right (NTP)"
    ),
    "PermanentRedirect": (
        "the bucket is in another region than the one the request went to: set region (AWS_REGION "
        "or the region option) to the bucket's"
    ),
    "AuthorizationHeaderMalformed": (
        "the request was signed for another region than the bucket's: set region (AWS_REGION or "
        "the region option) to the bucket's"
    ),
    "AllAccessDisabled": "the bucket's owner has disabled all access to it",
    "NoSuchBucket": "the bucket does not exist: check its name, and the endpoint or region",
}


def service_error_code(exc: BaseException) -> str | None:
    """The service's error code carried by ``exc`` or an exception it was raised from, if any.

    botocore's structured ``response["Error"]["Code"]`` first (a bare HTTP
    status there, as for a HEAD request without a body, is not a code), else
    the ``<Code>`` element of an XML error body in the message.
    """
    seen: BaseException | None = exc
    texts: list[str] = []
    for _ in range(_CHAIN):
        if seen is None:
            break
        response = getattr(seen, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            if isinstance(code, str) and code and not code.isdigit():
                return code
        texts.append(str(seen))
        seen = seen.__cause__ or seen.__context__
    for text in texts:
        match = _CODE_IN_BODY.search(text)
        if match:
            return match.group(1)
    return None


def code_hint(code: str | None, service: str) -> str:
    """What ``code`` means on ``service`` and what to do about it ("" when there is no specific hint).

    The hints name S3's variables and options; other services' codes lead the message unexplained.
    """
    return CODE_HINTS.get(code, "") if code and service == "s3" else ""


def with_code(code: str | None, message: str) -> str:
    """``message`` led by the service's error code, so a cut message still names it."""
    return f"{code}: {message}" if code else message


def without_error_body(line: str) -> str:
    """A backend's message line without the XML error body it quotes (its code leads the message)."""
    return _XML_TAIL.sub("", line).rstrip(" :")


__all__ = ["CODE_HINTS", "code_hint", "service_error_code", "with_code", "without_error_body"]
