"""Compose: several transforms as one, for configurations that take a single transform.

The engine already chains a list of chunk transforms; Compose makes such a
chain one object, with the chain's declared output and identity, so it can be
named, registered, reused and nested.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, overload

import numpy as np

from insitu.plugin_api import (
    ArrayGeometry,
    Batch,
    ConfigError,
    SlabSpec,
    bind_to_array,
    describe,
    transform_fingerprint,
    transform_output,
)


def _members(transforms: Iterable[Any], what: str) -> tuple[Any, ...]:
    if isinstance(transforms, (str, bytes)) or not isinstance(transforms, Iterable):
        raise ConfigError(f"{what} takes a list of transforms, got {transforms!r}")
    members = tuple(transforms)
    for t in members:
        if not callable(t):
            raise ConfigError(f"{what}: {t!r} is not callable")
    return members


class Compose:
    """Chunk transforms applied in order, as one chunk transform: ``Compose([Crop(...), Cast("float16")])``.

    ``out_spec`` finds each member's output from the previous one's as the
    engine does (its ``out_spec``, given the array's name where it takes it;
    a member without one is probed on slabs of zeros), and ``fingerprint`` is made of
    the members' fingerprints, so the persisted cache knows the chain.

    Called with a single :class:`~insitu.batch.Batch`, it applies its members
    as batch transforms instead; :meth:`batch` builds a composition meant for
    that use only (no ``out_spec``, so it cannot be mistaken for a chunk
    transform).
    """

    def __init__(self, transforms: Sequence[Callable[..., Any]]) -> None:
        self.transforms: tuple[Any, ...] = _members(transforms, "Compose")

    @staticmethod
    def batch(transforms: Sequence[Callable[[Batch], Batch]]) -> ComposeBatch:
        """Batch transforms applied in order, as one batch transform."""
        return ComposeBatch(transforms)

    @overload
    def __call__(self, name: Batch, block: None = None) -> Batch: ...
    @overload
    def __call__(self, name: str, block: np.ndarray) -> np.ndarray: ...
    def __call__(self, name: str | Batch, block: np.ndarray | None = None) -> np.ndarray | Batch:
        """As a chunk transform, ``(name, block)``: the members applied in order. With one ``Batch``:
        the members applied as batch transforms. Anything else is a ConfigError."""
        if block is None:
            if not isinstance(name, Batch):
                raise ConfigError(
                    f"Compose is called as a chunk transform, (name, block), or with one Batch; got {name!r}"
                )
            return ComposeBatch(self.transforms)(name)
        result = block
        for t in self.transforms:
            result = t(name, result)
        return result

    def bind(self, geom: ArrayGeometry) -> Compose:
        """The chain with each member that defines ``bind(geom)`` bound to ``geom``, as the
        dataset binds the transforms it is given, once per array."""
        bound = tuple(bind_to_array(t, geom) for t in self.transforms)
        if all(b is t for b, t in zip(bound, self.transforms, strict=True)):
            return self
        return Compose(bound)

    def out_spec(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], *, name: str
    ) -> tuple[tuple[int, ...], np.dtype[Any]]:
        """What the chain makes of a slab of ``shape`` and ``dtype`` of array ``name``: each member's
        output as the engine finds it (its ``out_spec``, or a probe on zeros for a member without one)."""
        spec = SlabSpec(tuple(int(s) for s in shape), np.dtype(dtype))
        for t in self.transforms:
            spec = transform_output(t, spec, name)
        return spec.shape, spec.dtype

    def fingerprint(self) -> str:
        """``Compose[<fingerprint>|<fingerprint>|...]``: the members' identities, in order."""
        return "Compose[" + "|".join(transform_fingerprint(t) for t in self.transforms) + "]"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.transforms == self.transforms

    def __hash__(self) -> int:
        return hash((type(self), self.transforms))

    def __len__(self) -> int:
        return len(self.transforms)

    def __repr__(self) -> str:
        return f"{type(self).__name__}([{', '.join(describe(t) for t in self.transforms)}])"


class ComposeBatch:
    """Batch transforms applied in order, as one batch transform (``Compose.batch([...])``)."""

    def __init__(self, transforms: Sequence[Callable[[Batch], Batch]]) -> None:
        self.transforms: tuple[Any, ...] = _members(transforms, "Compose.batch")

    def __call__(self, batch: Batch) -> Batch:
        """The members applied to ``batch`` in order."""
        for t in self.transforms:
            batch = t(batch)
        return batch

    def fingerprint(self) -> str:
        """``Compose.batch[<fingerprint>|...]``: the members' identities, in order."""
        return "Compose.batch[" + "|".join(transform_fingerprint(t) for t in self.transforms) + "]"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.transforms == self.transforms

    def __hash__(self) -> int:
        return hash((type(self), self.transforms))

    def __len__(self) -> int:
        return len(self.transforms)

    def __repr__(self) -> str:
        return f"Compose.batch([{', '.join(describe(t) for t in self.transforms)}])"


__all__ = ["Compose", "ComposeBatch"]
