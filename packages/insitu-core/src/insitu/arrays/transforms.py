"""The chunk-transform contract: what a transform produces, and a stable identity for caching.

A chunk transform is a callable ``(name, block) -> block`` run once per
decoded slab (sample axis first), before the slab enters the pool. It may
change the dtype and the per-sample shape if it says so:

* ``out_spec(shape, dtype) -> (shape, dtype)`` declares the output for an
  input of ``shape`` (``(chunk_len, *sample_shape)``) and ``dtype``. The pool
  sizes its slots for the declared output. Omitted: output = input. The
  sample-axis length must be kept (samples are addressed by index). A
  transform that treats arrays differently may take the array's name as a
  keyword: ``out_spec(shape, dtype, *, name)``.
* ``fingerprint() -> str`` names the transform and its parameters for the
  persisted cache. Omitted: a default made of the qualified name, a hash of
  the code and a hash of the pickled state, stable across processes; a
  transform whose state cannot be pickled must define ``fingerprint()`` to be
  persisted.

An undeclared change of shape or dtype is a clear error naming the transform
and the array, at the first chunk.
"""

from __future__ import annotations

import hashlib
import inspect
import pickle
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from insitu.arrays.geometry import ArrayGeometry
from insitu.errors import ConfigError

ChunkTransform = Callable[[str, np.ndarray], np.ndarray]


@runtime_checkable
class DeclaresOutput(Protocol):
    """A chunk transform that changes shape or dtype says what it makes."""

    def out_spec(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[tuple[int, ...], Any]: ...


@runtime_checkable
class Fingerprinted(Protocol):
    """A transform with an explicit, process-independent identity."""

    def fingerprint(self) -> str: ...


@dataclass(frozen=True)
class SlabSpec:
    """Shape (sample axis first, full chunk length) and dtype of one decoded slab of an array."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return self.shape[1:]

    @property
    def sample_nbytes(self) -> int:
        return int(np.prod(self.sample_shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.sample_nbytes


def source_spec(geom: ArrayGeometry) -> SlabSpec:
    return SlabSpec(geom.slab_shape, geom.dtype)


def output_spec(
    geom: ArrayGeometry, transforms: Sequence[ChunkTransform], *, start: SlabSpec | None = None
) -> SlabSpec:
    """The slab a chain of transforms produces from one decoded slab of ``geom`` (or from ``start``)."""
    spec = source_spec(geom) if start is None else start
    for t in transforms:
        declare = getattr(t, "out_spec", None)  # the DeclaresOutput protocol
        if declare is None:
            continue
        try:
            if _takes_name(declare):
                shape, dtype = declare(spec.shape, spec.dtype, name=geom.name)
            else:
                shape, dtype = declare(spec.shape, spec.dtype)
            out = SlabSpec(tuple(int(s) for s in shape), np.dtype(dtype))
        except Exception as exc:
            raise ConfigError(
                f"chunk transform {describe(t)} for array {geom.name!r}: out_spec{spec.shape, str(spec.dtype)} "
                f"failed: {exc!r}"
            ) from exc
        if not out.shape or out.shape[0] != spec.shape[0]:
            raise ConfigError(
                f"chunk transform {describe(t)} for array {geom.name!r} declares output shape {out.shape} "
                f"from {spec.shape}; chunk transforms must keep the sample-axis length {spec.shape[0]}"
            )
        if out.dtype.hasobject or out.dtype.kind not in "biufc":
            raise ConfigError(
                f"chunk transform {describe(t)} for array {geom.name!r} declares dtype {out.dtype}; "
                "only numeric dtypes can be pooled"
            )
        spec = out
    return spec


def _takes_name(fn: Any) -> bool:
    try:
        return "name" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def chain_runner(
    name: str, transforms: Sequence[ChunkTransform], out: SlabSpec
) -> Callable[[np.ndarray], np.ndarray]:
    """``run(block) -> block``: the chain applied to a slab (maybe a short last one), checked
    against the declared output ``out``."""
    transforms = tuple(transforms)

    def run(block: np.ndarray) -> np.ndarray:
        rows = block.shape[0]
        result = block
        for t in transforms:
            result = t(name, result)
        result = np.asarray(result)
        if result.shape != (rows, *out.sample_shape) or result.dtype != out.dtype:
            declared = (
                "declares no out_spec"
                if not any(isinstance(t, DeclaresOutput) for t in transforms)
                else (f"declared {(rows, *out.sample_shape)}/{out.dtype}")
            )
            raise ConfigError(
                f"chunk transforms {[describe(t) for t in transforms]} for array {name!r} turned a "
                f"{block.shape}/{block.dtype} slab into {result.shape}/{result.dtype}, but the chain "
                f"{declared}; a transform that changes shape or dtype must define out_spec(shape, dtype)"
            )
        return result

    return run


def describe(t: Any) -> str:
    """A short name for messages."""
    kind = t if isinstance(t, (types.FunctionType, types.BuiltinFunctionType, type)) else type(t)
    return f"{kind.__module__}.{getattr(kind, '__qualname__', repr(kind))}"


# -- fingerprints -----------------------------------------------------------------------------------
def transform_fingerprint(t: Any) -> str:
    """A string naming ``t`` and its parameters, equal in every process that builds the same ``t``.

    ``t.fingerprint()`` when defined; else the qualified name, a hash of the
    code (so editing the function changes it) and a hash of the pickled state
    (so other parameters change it). ``repr`` is never used: it holds memory
    addresses. Raises ConfigError when no stable identity can be derived.
    """
    if isinstance(t, Fingerprinted):
        return str(t.fingerprint())
    digest = hashlib.sha256()
    func = t if isinstance(t, types.FunctionType) else None
    if func is None and isinstance(t, types.MethodType):
        func = t.__func__  # type: ignore[assignment]  # a bound method: its function and its instance
        digest.update(_state_digest(t.__self__, t).encode())
    if func is not None:
        digest.update(_code_digest(func.__code__).encode())
        for cell in func.__closure__ or ():
            digest.update(_state_digest(cell.cell_contents, t).encode())
        if func.__defaults__:
            digest.update(_state_digest(func.__defaults__, t).encode())
    else:
        code = getattr(inspect.getattr_static(type(t), "__call__", None), "__code__", None)
        if code is not None:
            digest.update(_code_digest(code).encode())
        digest.update(_state_digest(getattr(t, "__dict__", None) or _slots_state(t), t).encode())
    return f"{describe(t)}#{digest.hexdigest()[:16]}"


def _code_digest(code: types.CodeType) -> str:
    parts: list[bytes] = [code.co_code, repr(code.co_names).encode(), repr(code.co_varnames).encode()]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            parts.append(_code_digest(const).encode())
        else:
            parts.append(repr(const).encode())
    return hashlib.sha256(b"\0".join(parts)).hexdigest()


def _slots_state(t: Any) -> dict[str, Any]:
    names = [n for k in type(t).__mro__ for n in getattr(k, "__slots__", ())]
    return {n: getattr(t, n) for n in names if hasattr(t, n)}


def _state_digest(state: Any, owner: Any) -> str:
    try:
        raw = pickle.dumps(state, protocol=4)
    except Exception as exc:
        raise ConfigError(
            f"chunk transform {describe(owner)} has state that cannot be pickled ({exc}); define a "
            "fingerprint() method returning a string that names its parameters to persist its output"
        ) from exc
    return hashlib.sha256(raw).hexdigest()


def per_array_fingerprints(transforms: Mapping[str, Sequence[Any]]) -> dict[str, list[str]]:
    return {name: [transform_fingerprint(t) for t in chain] for name, chain in transforms.items()}
