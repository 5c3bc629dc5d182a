"""What the command line prints, and which exit status it returns, when a subcommand fails.

The rule (also in ``insitu --help`` and docs/operability.md): exit 2 for bad
usage, something typed on the command line that is wrong (an option, an
unknown name: a sample dimension, a variable, a transform, a URL scheme); exit
1 when what the URL points at fails (missing, unreachable, refusing, corrupt
metadata, a bad chunk, a cache problem) or the subcommand found a problem.
Either way one line on stderr, ``insitu: error: ...``; ``--debug`` or
``INSITU_DEBUG=1`` shows the traceback instead.
"""

from __future__ import annotations

import re

from insitu.errors import InSituError, MetadataError

USAGE = 2
FAILURE = 1
#: The longest message shown; a backend's error can carry a whole response body.
MAX_MESSAGE = 500

_SPACE = re.compile(r"\s*\n\s*")
_ERRNO = re.compile(r"^\[Errno -?\d+\] ")


def exit_status(exc: BaseException) -> int:
    """2 for what the user typed wrong, 1 for what the store, the data or the machine did."""
    if isinstance(exc, MetadataError):  # the store's content, not the command line
        return FAILURE
    # ValueError covers ConfigError (an unknown dimension or variable, a bad option) and a bad
    # store option; LookupError an unknown scheme or registered name.
    if isinstance(exc, (ValueError, LookupError)):
        return USAGE
    return FAILURE


def one_line(exc: BaseException) -> str:
    """The exception as one line naming what is at fault (URLs already shown without secrets)."""
    from insitu.store.opener import redact_urls

    text = str(exc).strip()
    if isinstance(exc, KeyError) and type(exc).__str__ is KeyError.__str__:
        text = text.strip("'\"")  # KeyError shows its key quoted
    text = _ERRNO.sub("", _SPACE.sub("; ", text))
    if not isinstance(exc, (InSituError, OSError, ValueError, LookupError, ImportError)) or not text:
        # Not a message written for users: say what kind of failure it was, and how to see more.
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        text += " (--debug shows the traceback)"
    if len(text) > MAX_MESSAGE:
        text = text[: MAX_MESSAGE - 1].rstrip() + "…"
    return redact_urls(text)
