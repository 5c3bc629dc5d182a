"""The committed figures are what their scripts draw from the library today.

``docs/img/patches/make_figures.py`` computes positions, blocks, halos and random draws with
``insitu.plan.patches``; ``docs/img/imaging/make_figures.py`` draws the stitcher's blending
windows from ``insitu.stitch``. A change there that moves a patch or a weight fails here until
the figures are drawn again, so the pictures never show what the library no longer does.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from conftest import DOCS

#: Each figure script, and the page that shows its figures.
SCRIPTS = {
    DOCS / "img" / "patches" / "make_figures.py": DOCS / "patches.md",
    DOCS / "img" / "imaging" / "make_figures.py": DOCS / "imaging.md",
}


def load_script(script: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"make_figures_{script.parent.name}", script)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIGURES = [(script, name) for script in SCRIPTS for name in sorted(load_script(script).FIGURES)]


@pytest.mark.parametrize(("script", "name"), FIGURES, ids=[f"{s.parent.name}/{n}" for s, n in FIGURES])
def test_the_committed_figure_is_what_the_script_draws(script: Path, name: str) -> None:
    drawn = load_script(script).FIGURES[name]()
    committed = (script.parent / name).read_text()
    assert committed == drawn, (
        f"{script.parent / name} is stale: run python {script.relative_to(DOCS.parent)}"
    )


@pytest.mark.parametrize("script", list(SCRIPTS), ids=lambda s: s.parent.name)
def test_every_figure_is_on_its_page(script: Path) -> None:
    page = SCRIPTS[script]
    text = page.read_text()
    where = f"img/{script.parent.name}"
    missing = [name for name in load_script(script).FIGURES if f"]({where}/{name})" not in text]
    assert not missing, f"docs/{page.name} does not show {missing}"
