"""insitu plugin: registers the transforms by class name, and ``insitu check-transform``.

Plugins load on the first registry lookup, which the first ``open_store``
makes: importing every transform here would put scipy (Regrid's sparse
weights) on every user's time to first batch. Each transform is registered
as a stand-in that imports its module when first used; ``insitu.<name>`` and
configurations resolve it to the class itself (``insitu_target``).
"""

from __future__ import annotations

from insitu.plugin_api import LazyObject, RegisterCommand, RegisterTransform, hookimpl

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


@hookimpl
def insitu_register_transforms(register: RegisterTransform) -> None:
    """Each transform under its class name; configurations match names ignoring case and
    underscores (``{"name": "random_crop", ...}`` finds ``RandomCrop``)."""
    for name, module in TRANSFORMS.items():
        register(name, LazyObject(module, name, "transform"))


@hookimpl
def insitu_register_commands(register: RegisterCommand) -> None:
    """``insitu check-transform``."""
    from insitu_transforms.command import CheckTransformCommand

    register("check-transform", CheckTransformCommand())
