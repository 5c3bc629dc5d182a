"""The python snippets of the docs and the README run, so they cannot rot.

Every fenced ``python`` block must be preceded by a marker line:

- ``<!-- snippet: run -->``: executed; the blocks of one page run in order in one namespace,
  in a fresh temporary directory (pages build their own synthetic data);
- ``<!-- snippet: run, requires=torch -->``: the same, skipped where ``torch`` is not installed;
- ``<!-- snippet: illustration (why) -->``: shown, not run, with the reason (a bucket, a path
  the reader supplies).

A block with no marker fails the test, so no snippet escapes by being forgotten.
"""

from __future__ import annotations

import importlib.util
import re
import warnings
from pathlib import Path

import pytest
from conftest import DOCS, ROOT

PAGES = [*sorted(p for p in DOCS.glob("*.md")), ROOT / "README.md"]
BLOCK = re.compile(r"(?:^(<!-- snippet: [^\n]*-->)\n)?^```python[^\n]*\n(.*?)^```", re.M | re.S)
MARKER = re.compile(r"<!-- snippet: (run(?:, requires=(?P<requires>[\w.,]+))?|illustration \(.+\)) -->")


def snippets(page: Path) -> list[tuple[str | None, str, int]]:
    """(marker, code, line) of every python block of ``page``."""
    text = page.read_text()
    return [(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1) for m in BLOCK.finditer(text)]


def ids(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=ids)
def test_every_python_block_is_marked(page: Path) -> None:
    bad = [line for marker, _, line in snippets(page) if marker is None or not MARKER.fullmatch(marker)]
    assert not bad, f"{ids(page)}: python blocks at lines {bad} lack a <!-- snippet: ... --> marker"


RUNNABLE = [
    page for page in PAGES if any((m or "").startswith("<!-- snippet: run") for m, _, _ in snippets(page))
]


@pytest.mark.parametrize("page", RUNNABLE, ids=ids)
def test_snippets_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__snippet__"}
    skipped = []
    for marker, code, line in snippets(page):
        match = MARKER.fullmatch(marker or "")
        if match is None or not marker or "illustration" in marker:
            continue
        missing = [
            m for m in (match["requires"] or "").split(",") if m and importlib.util.find_spec(m) is None
        ]
        if missing:
            skipped.append((line, missing))
            continue
        try:
            exec(compile(code, f"{page}:{line}", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"{ids(page)}: the snippet at line {line} failed: {exc!r}") from exc
    for value in namespace.values():  # release datasets a page left open, at a known point
        close = getattr(value, "close", None)
        if type(value).__name__ == "InSituDataset" and callable(close):
            close()
    if skipped:  # the page's other snippets ran and passed; say which ones could not
        warnings.warn(f"{ids(page)}: snippets needing missing packages were not run: {skipped}", stacklevel=1)
