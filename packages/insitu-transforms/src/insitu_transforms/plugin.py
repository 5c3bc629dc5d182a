"""insitu plugin: registers the transforms by class name."""

from __future__ import annotations

from insitu.hookspecs import RegisterCommand, RegisterTransform, hookimpl
from insitu_transforms.chunk import Cast, NanToNum
from insitu_transforms.scaler import StandardScaler


@hookimpl
def insitu_register_transforms(register: RegisterTransform) -> None:
    """``StandardScaler`` (batch transform), ``Cast`` and ``NanToNum`` (chunk transforms)."""
    register("StandardScaler", StandardScaler)
    register("Cast", Cast)
    register("NanToNum", NanToNum)


@hookimpl
def insitu_register_commands(register: RegisterCommand) -> None:
    """``insitu check-transform``."""
    from insitu_transforms.command import CheckTransformCommand

    register("check-transform", CheckTransformCommand())
