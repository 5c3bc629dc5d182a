"""insitu plugin: registers the transforms by class name, and ``insitu check-transform``.

Plugins load on the first registry lookup, which the first ``open_store``
makes: importing every transform here would put scipy (Regrid's sparse
weights) on every user's time to first batch. Each transform is registered
as a stand-in that imports its module when first used; ``insitu.<name>`` and
configurations resolve it to the class itself (``insitu_target``).
"""

from __future__ import annotations

import importlib
from typing import Any

from insitu.hookspecs import RegisterCommand, RegisterTransform, hookimpl

#: Registered name -> module defining it (the class has the same name).
TRANSFORMS: dict[str, str] = {
    "StandardScaler": "insitu_transforms.scaler",
    "RandomCrop": "insitu_transforms.crop",
    "Cast": "insitu_transforms.chunk",
    "FillNaN": "insitu_transforms.chunk",
    "NanToNum": "insitu_transforms.chunk",
    "Crop": "insitu_transforms.crop",
    "Coarsen": "insitu_transforms.coarsen",
    "Compose": "insitu_transforms.compose",
    "Regrid": "insitu_transforms.regrid",
}


class LazyTransform:
    """A registered transform whose module is imported on first use."""

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.__name__ = name
        self.__doc__ = f"{module}.{name}, imported on first use."

    @property
    def insitu_target(self) -> Any:
        """The transform class itself (imports its module)."""
        return getattr(importlib.import_module(self.module), self.__name__)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.insitu_target(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<lazy transform {self.module}.{self.__name__}>"


@hookimpl
def insitu_register_transforms(register: RegisterTransform) -> None:
    """Each transform under its class name; configurations match names ignoring case and
    underscores (``{"name": "random_crop", ...}`` finds ``RandomCrop``)."""
    for name, module in TRANSFORMS.items():
        register(name, LazyTransform(module, name))


@hookimpl
def insitu_register_commands(register: RegisterCommand) -> None:
    """``insitu check-transform``."""
    from insitu_transforms.command import CheckTransformCommand

    register("check-transform", CheckTransformCommand())
