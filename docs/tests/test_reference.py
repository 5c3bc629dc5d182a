"""Every public name is in the API reference and every hook spec on the plugins page.

Names are read from the packages' sources (``__all__`` parsed, not imported), so the check
needs no framework installed and follows the code as other work changes it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import DOCS, ROOT

# API page -> (import name, the __init__ that lists its public names)
PAGES = {
    "insitu.md": ("insitu", "packages/insitu-core/src/insitu/__init__.py"),
    "insitu-testing.md": ("insitu.testing", "packages/insitu-core/src/insitu/testing/__init__.py"),
    "insitu-stores.md": ("insitu_stores", "packages/insitu-stores/src/insitu_stores/__init__.py"),
    "insitu-transforms.md": (
        "insitu_transforms",
        "packages/insitu-transforms/src/insitu_transforms/__init__.py",
    ),
    "insitu-torch.md": ("insitu_torch", "packages/insitu-torch/src/insitu_torch/__init__.py"),
    "insitu-jax.md": ("insitu_jax", "packages/insitu-jax/src/insitu_jax/__init__.py"),
    "insitu-tf.md": ("insitu_tf", "packages/insitu-tf/src/insitu_tf/__init__.py"),
    "insitu-gpu.md": ("insitu_gpu", "packages/insitu-gpu/src/insitu_gpu/__init__.py"),
}


def public_names(init: Path) -> list[str]:
    """The string entries of ``__all__`` in ``init``."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [ast.literal_eval(e) for e in node.value.elts]  # type: ignore[attr-defined]
    raise AssertionError(f"{init} has no __all__")


def directives(page: Path) -> set[str]:
    """The objects a page renders with mkdocstrings (``::: dotted.path``)."""
    return set(re.findall(r"^::: ([\w.]+)\s*$", page.read_text(), re.M))


def test_every_package_has_a_reference_page() -> None:
    inits = {str(p.relative_to(ROOT)) for p in ROOT.glob("packages/*/src/*/__init__.py")}
    assert inits <= {init for _, init in PAGES.values()}, "a package without an API page"


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_public_name_is_in_the_api_reference(page: str) -> None:
    module, init = PAGES[page]
    shown = directives(DOCS / "api" / page)
    missing = [n for n in public_names(ROOT / init) if n != "__version__" and f"{module}.{n}" not in shown]
    assert not missing, f"docs/api/{page} lacks ::: {module}.<name> for {missing}"


def test_plugin_served_root_names_are_listed() -> None:
    from insitu.plugins.exports import EXPORTS

    text = (DOCS / "api" / "insitu.md").read_text()
    missing = [n for n in EXPORTS if f"`insitu.{n}`" not in text]
    assert not missing, f"docs/api/insitu.md does not list plugin-served root names {missing}"


def test_every_hook_spec_has_a_heading_and_its_register_signature_on_the_plugins_page() -> None:
    from insitu.plugins import hookspecs

    text = (DOCS / "plugins.md").read_text()
    assert hookspecs.HOOK_NAMES, "no hook specs found"
    for hook in hookspecs.HOOK_NAMES:
        assert re.search(rf"^### {hook}$", text, re.M), f"docs/plugins.md has no heading for {hook}"
        protocol = ast.parse(Path(hookspecs.__file__).read_text())
        annotation = next(
            f.args.args[0].annotation.id  # type: ignore[attr-defined]
            for f in protocol.body
            if isinstance(f, ast.FunctionDef) and f.name == hook
        )
        section = text.split(f"### {hook}\n", 1)[1].split("\n### ", 1)[0]
        assert f"register: {annotation}" in section, f"{hook}: the page does not show register: {annotation}"
        assert f"::: insitu.plugins.hookspecs.{hook}" in section, f"{hook}: its docstring is not rendered"
