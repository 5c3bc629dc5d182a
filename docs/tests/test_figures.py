"""The patch figures are what their script draws from the planner today.

``docs/img/patches/make_figures.py`` computes positions, blocks, halos and random draws with
``insitu.plan.patches``; a change there that moves a patch fails here until the figures are
drawn again, so the pictures on docs/patches.md never show an order the planner no longer makes.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest
from conftest import DOCS

SCRIPT = DOCS / "img" / "patches" / "make_figures.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_figures", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FIGURES = sorted(load_script().FIGURES)


@pytest.mark.parametrize("name", FIGURES)
def test_the_committed_figure_is_what_the_script_draws(name: str) -> None:
    drawn = load_script().FIGURES[name]()
    committed = (SCRIPT.parent / name).read_text()
    assert committed == drawn, (
        f"docs/img/patches/{name} is stale: run python {SCRIPT.relative_to(DOCS.parent)}"
    )


def test_every_figure_is_on_the_page() -> None:
    page = (DOCS / "patches.md").read_text()
    missing = [name for name in FIGURES if f"](img/patches/{name})" not in page]
    assert not missing, f"docs/patches.md does not show {missing}"
