"""The code map in engine.md names every core module, and the site's navigation lists each page once.

Both are read as plain text (no mkdocs, no YAML loader: mkdocs.yml may carry tags a safe loader
refuses), so the check runs wherever the docs tests do.
"""

from __future__ import annotations

import re
from collections import Counter

from conftest import DOCS, ROOT

CORE = ROOT / "packages" / "insitu-core" / "src" / "insitu"


def map_rows() -> list[set[str]]:
    """The backticked names of each table row under engine.md's "Where the code is"."""
    text = (DOCS / "engine.md").read_text()
    section = text.split("\n## Where the code is\n", 1)[1].split("\n## ", 1)[0]
    return [set(re.findall(r"`([^`]+)`", line)) for line in section.splitlines() if line.startswith("|")]


def core_modules() -> list[tuple[str, ...]]:
    """Each module of insitu-core as its path parts under ``insitu/`` (packages by their folder)."""
    found = []
    for path in sorted(CORE.rglob("*.py")):
        parts = path.relative_to(CORE).parts
        if "__pycache__" in parts:
            continue
        if parts[-1] == "__init__.py":
            if len(parts) > 1:
                found.append((*parts[:-2], f"{parts[-2]}/"))
            continue
        found.append(parts)
    return found


def is_named(parts: tuple[str, ...], rows: list[set[str]]) -> bool:
    """A top-level module is named anywhere in the map; one inside a folder is named in a row that
    also names its folders (``plan/`` and ``limits.py``; ``cli/``, ``bench/`` and ``sweep.py``)."""
    *folders, name = parts
    wanted = {f"{f}/" for f in folders} | {name}
    return any(wanted <= row for row in rows)


def test_the_engine_map_names_every_core_module() -> None:
    rows = map_rows()
    missing = ["/".join(p) for p in core_modules() if not is_named(p, rows)]
    assert not missing, f"docs/engine.md's 'Where the code is' does not name {missing}"


def nav_pages() -> list[str]:
    """The pages mkdocs.yml's ``nav:`` lists, in order (``- Title: page.md`` or ``- page.md``)."""
    lines = (ROOT / "mkdocs.yml").read_text().splitlines()
    start = lines.index("nav:") + 1
    pages = []
    for line in lines[start:]:
        if line and not line[0].isspace() and not line.startswith("#"):
            break  # the next top-level key
        entry = re.match(r"\s*-\s+(?:[^:]+:\s+)?(\S+\.md)\s*$", line)
        if entry:
            pages.append(entry[1])
    return pages


def test_the_navigation_lists_each_page_once() -> None:
    pages = nav_pages()
    assert {"index.md", "api/index.md", "changelog.md"} <= set(pages)  # the whole nav, sections included
    twice = sorted(p for p, n in Counter(pages).items() if n > 1)
    assert not twice, f"mkdocs.yml's nav lists {twice} more than once"
