"""The plugin module named by the entry point: hook implementations only, no heavy imports."""

from __future__ import annotations

from insitu.plugin_api import RegisterTransform, hookimpl


@hookimpl
def insitu_register_transforms(register: RegisterTransform) -> None:
    """Register ``Negate`` under the name ``"negate"``."""
    from insitu_example_plugin.transform import Negate

    register("negate", Negate)
