"""insitu plugin: registers the transforms by class name."""

from __future__ import annotations

from insitu.hookspecs import RegisterCommand, RegisterTransform, hookimpl
from insitu_transforms.chunk import Cast, FillNaN, NanToNum
from insitu_transforms.coarsen import Coarsen
from insitu_transforms.compose import Compose
from insitu_transforms.crop import Crop, RandomCrop
from insitu_transforms.regrid import Regrid
from insitu_transforms.scaler import StandardScaler


@hookimpl
def insitu_register_transforms(register: RegisterTransform) -> None:
    """Each transform under its class name; configurations match names ignoring case and
    underscores (``{"name": "random_crop", ...}`` finds ``RandomCrop``)."""
    register("StandardScaler", StandardScaler)
    register("RandomCrop", RandomCrop)
    register("Cast", Cast)
    register("FillNaN", FillNaN)
    register("NanToNum", NanToNum)
    register("Crop", Crop)
    register("Coarsen", Coarsen)
    register("Compose", Compose)
    register("Regrid", Regrid)


@hookimpl
def insitu_register_commands(register: RegisterCommand) -> None:
    """``insitu check-transform``."""
    from insitu_transforms.command import CheckTransformCommand

    register("check-transform", CheckTransformCommand())
