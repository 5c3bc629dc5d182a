"""Text the suite publishes, free of this machine's paths.

The nox session passes interpreters by absolute path (``--insitubatch-python
/home/me/insitu/.nox/bench-insitubatch-py312/bin/python``), and error messages
quote source files by theirs. Recorded as is, ``docs/benchmarks.md`` would
name the checkout it ran in; made relative to the repository (and the home
directory written ``~``), it reads the same from any clone.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# A path starts where no path character precedes it, so "/x/work/main" is not "/work/main".
_PATH_START = r"(?<![\w./~-])"
# ... and ends at a separator or where no path character follows, so "/work/main2" is left alone.
_PATH_END = r"(?:/|(?![\w.-]))"


def _roots(path: Path) -> list[str]:
    """``path`` as written and resolved (they differ through symlinks), longest first."""
    spellings = {str(path).rstrip("/"), str(path.resolve()).rstrip("/")}
    return sorted((s for s in spellings if s), key=len, reverse=True)


def _replace_root(text: str, root: str, placeholder: str) -> str:
    def substitute(match: re.Match[str]) -> str:
        inside = match.group(0).endswith("/")
        if placeholder:
            return placeholder + ("/" if inside else "")
        return "" if inside else "."

    return re.sub(_PATH_START + re.escape(root) + _PATH_END, substitute, text)


def portable_paths(text: str, repo: Path = REPO, home: Path | None = None) -> str:
    """``text`` with paths inside ``repo`` made relative to it and paths under ``home`` starting ``~``.

    ``home`` defaults to the current user's home directory. The repository is
    replaced first, so a checkout inside the home directory becomes relative.
    """
    for root in _roots(repo):
        text = _replace_root(text, root, "")
    home = Path.home() if home is None else home
    if home != Path("/"):
        for root in _roots(home):
            text = _replace_root(text, root, "~")
    return text


def recorded_command(arguments: Sequence[str], repo: Path = REPO, home: Path | None = None) -> str:
    """The command line a results file records for ``bench/run.py ARGUMENTS``, without machine paths."""
    return portable_paths(shlex.join(["python", "bench/run.py", *arguments]), repo, home)


__all__ = ["REPO", "portable_paths", "recorded_command"]
