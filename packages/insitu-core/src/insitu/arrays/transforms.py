"""The chunk-transform contract: what a transform produces, and a stable identity for caching.

A chunk transform is a callable ``(name, block) -> block`` run once per
decoded slab (sample axis first), before the slab enters the pool. It may
change the dtype and the per-sample shape; the pool sizes its slots for the
output, which is declared or found by trying:

* ``out_spec(shape, dtype) -> (shape, dtype)`` declares the output for an
  input of ``shape`` (``(chunk_len, *sample_shape)``) and ``dtype``. A
  transform that treats arrays differently may take the array's name as a
  keyword: ``out_spec(shape, dtype, *, name)``.
* Omitted, the output is found by trying (:func:`probe_output`): when the
  dataset is built, the transform is called on a slab of zeros of its
  input's shape and dtype (the full chunk shape, as the transforms before it
  leave it) and on a shorter one, the way ``jax.eval_shape`` finds a
  function's output. Zeros, not a real chunk: the spec is needed before
  anything is read, and reading a chunk per array at construction would cost
  a round trip per array on a remote store. A transform whose output shape
  or dtype depends on the values (not only on the input's shape and dtype)
  must declare ``out_spec``; every real slab is still checked against the
  spec, so such a transform is a clear error at the slab where it differs,
  never a wrong sample.
* The sample-axis length must be kept, declared or probed: samples are
  addressed by their index along it.
* ``fingerprint() -> str`` names the transform and its parameters for the
  persisted cache. Omitted: a default made of the qualified name, a hash of
  the code and a hash of the pickled state, stable across processes; a
  transform whose state cannot be pickled must define ``fingerprint()`` to be
  persisted.

A slab whose output differs from the declared or probed spec is a clear error
naming the transforms and the array.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import pickle
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from insitu.arrays.geometry import ArrayGeometry, bytes_per_sample
from insitu.errors import ConfigError

ChunkTransform = Callable[[str, np.ndarray], np.ndarray]


@runtime_checkable
class DeclaresOutput(Protocol):
    """A chunk transform that changes shape or dtype says what it makes."""

    def out_spec(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> tuple[tuple[int, ...], Any]:
        """``(shape, dtype)`` of the output for an input slab of ``shape`` and ``dtype``."""


@runtime_checkable
class Fingerprinted(Protocol):
    """A transform with an explicit, process-independent identity."""

    def fingerprint(self) -> str:
        """A string naming the transform and its parameters, the same in every process (the persisted
        cache's key)."""


@dataclass(frozen=True)
class SlabSpec:
    """Shape (sample axis first, full chunk length) and dtype of one decoded slab of an array."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """The shape of one sample (the slab's shape without the sample axis)."""
        return self.shape[1:]

    @functools.cached_property
    def sample_nbytes(self) -> int:
        """Bytes of one sample."""
        # Cached: read on every slab load, and np.prod costs microseconds (seconds at 5,000 arrays).
        return bytes_per_sample(self.sample_shape, self.dtype)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole slab."""
        return self.shape[0] * self.sample_nbytes


def source_spec(geom: ArrayGeometry) -> SlabSpec:
    """The slab one decoded chunk of ``geom`` makes before any transform."""
    return SlabSpec(geom.slab_shape, geom.dtype)


def output_spec(
    geom: ArrayGeometry, transforms: Sequence[ChunkTransform], *, start: SlabSpec | None = None
) -> SlabSpec:
    """The slab a chain of transforms produces from one decoded slab of ``geom`` (or from ``start``).

    Each transform's ``out_spec`` where it declares one, else its output on a probe slab of zeros
    (:func:`probe_output`)."""
    spec = source_spec(geom) if start is None else start
    for t in transforms:
        spec = transform_output(t, spec, geom.name)
    return spec


def transform_output(t: ChunkTransform, spec: SlabSpec, name: str) -> SlabSpec:
    """The slab one chunk transform ``t`` makes from a slab ``spec`` of array ``name``: what its
    ``out_spec`` declares, or (none declared) what :func:`probe_output` finds; checked to keep the
    sample-axis length and to be a numeric dtype the pool can hold."""
    declare = getattr(t, "out_spec", None)  # the DeclaresOutput protocol
    if declare is None:
        return probe_output(t, spec, name)
    try:
        if _takes_name(declare):
            shape, dtype = declare(spec.shape, spec.dtype, name=name)
        else:
            shape, dtype = declare(spec.shape, spec.dtype)
        out = SlabSpec(tuple(int(s) for s in shape), np.dtype(dtype))
    except ConfigError:
        raise  # already names what is wrong (a Compose's member, a bound transform's check)
    except Exception as exc:
        raise ConfigError(
            f"chunk transform {describe(t)} for array {name!r}: out_spec{spec.shape, str(spec.dtype)} "
            f"failed: {exc!r}"
        ) from exc
    if not out.shape or out.shape[0] != spec.shape[0]:
        raise ConfigError(
            f"chunk transform {describe(t)} for array {name!r} declares output shape {out.shape} "
            f"from {spec.shape}; chunk transforms must keep the sample-axis length {spec.shape[0]}"
        )
    _check_poolable(t, name, out, "declares")
    return out


def probe_output(t: ChunkTransform, spec: SlabSpec, name: str) -> SlabSpec:
    """The output of ``t`` (no ``out_spec``) on a slab ``spec`` of array ``name``, found by calling
    it on slabs of zeros of that dtype and sample shape: one of the full length ``spec.shape[0]``
    and one shorter (half as long; two rows for a one-row slab), as a short last slab is.

    Two lengths, so that an output whose first axis does not follow the number of samples is caught
    even where the slab length equals one of the other sizes (``block.sum(axis=0)`` on a ``(4, 4, 6)``
    slab makes ``(4, 6)``, which one probe could not tell from a per-sample reduction).
    Floating-point warnings are silenced for the calls (zeros divide into NaN harmlessly). Raises
    ConfigError when a call fails, when the output does not keep the number of samples, or when its
    dtype is not numeric."""
    rows = spec.shape[0]
    full = _probe_once(t, spec.shape, spec.dtype, name)
    short_rows = rows // 2 if rows > 1 else 2
    short = _probe_once(t, (short_rows, *spec.sample_shape), spec.dtype, name)
    for n, result in ((rows, full), (short_rows, short)):
        if result.ndim == 0 or result.shape[0] != n:
            raise ConfigError(
                f"chunk transform {describe(t)} for array {name!r} turned a {(n, *spec.sample_shape)}/"
                f"{spec.dtype} slab of zeros (a probe for its output, as it declares no out_spec) into "
                f"{result.shape}/{result.dtype}: it changes the number of samples along the sample axis "
                f"({n} -> {result.shape[0] if result.ndim else 'none'}). Chunk transforms must keep the "
                f"sample-axis length {rows}: samples are addressed by their index along that axis, so a "
                "transform that drops, merges or adds samples would misplace every index after it. "
                "Reduce or reshape the other axes; select samples with a split or sel/isel"
            )
    if full.shape[1:] != short.shape[1:] or full.dtype != short.dtype:
        raise ConfigError(
            f"chunk transform {describe(t)} for array {name!r} declares no out_spec, and its output on "
            f"slabs of zeros depends on the number of samples: {full.shape}/{full.dtype} from {rows} rows, "
            f"{short.shape}/{short.dtype} from {short_rows}; a slab's samples must come out the same "
            "whatever the slab's length (the last slab of an array is often shorter)"
        )
    out = SlabSpec((rows, *(int(s) for s in full.shape[1:])), full.dtype)
    _check_poolable(t, name, out, "makes (probed with zeros)")
    return out


def _probe_once(t: ChunkTransform, shape: tuple[int, ...], dtype: np.dtype[Any], name: str) -> np.ndarray:
    probe = np.zeros(shape, dtype)
    try:
        with np.errstate(all="ignore"):
            return np.asarray(t(name, probe))
    except Exception as exc:
        raise ConfigError(
            f"chunk transform {describe(t)} for array {name!r} declares no out_spec, so it is called on a "
            f"{shape}/{dtype} slab of zeros to find its output shape and dtype, and it raised {exc!r}; "
            "define out_spec(shape, dtype) -> (shape, dtype) to declare its output instead"
        ) from exc


def _check_poolable(t: Any, name: str, out: SlabSpec, how: str) -> None:
    if out.dtype.hasobject or out.dtype.kind not in "biufc":
        raise ConfigError(
            f"chunk transform {describe(t)} for array {name!r} {how} dtype {out.dtype}; "
            "only numeric dtypes can be pooled"
        )


def _takes_name(fn: Any) -> bool:
    try:
        return "name" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def chain_runner(
    name: str, transforms: Sequence[ChunkTransform], out: SlabSpec
) -> Callable[[np.ndarray], np.ndarray]:
    """``run(block) -> block``: the chain applied to a slab (maybe a short last one), checked
    against ``out``, the chain's output as :func:`output_spec` found it (declared or probed)."""
    transforms = tuple(transforms)

    def run(block: np.ndarray) -> np.ndarray:
        rows = block.shape[0]
        result = block
        for t in transforms:
            result = t(name, result)
        result = np.asarray(result)
        if result.shape != (rows, *out.sample_shape) or result.dtype != out.dtype:
            expected = f"{(rows, *out.sample_shape)}/{out.dtype}"
            probed = [describe(t) for t in transforms if not isinstance(t, DeclaresOutput)]
            found = (
                f"declares {expected}"
                if not probed
                else f"was expected to make {expected}, found by calling {probed} (no out_spec) on slabs "
                "of zeros"
            )
            raise ConfigError(
                f"chunk transforms {[describe(t) for t in transforms]} for array {name!r} turned a "
                f"{block.shape}/{block.dtype} slab into {result.shape}/{result.dtype}, but the chain "
                f"{found}; a transform whose output shape or dtype depends on the values (not only on "
                "the input's shape and dtype) must define out_spec(shape, dtype)"
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
    """Each array's chain as a list of fingerprints (:func:`transform_fingerprint`), for cache keys."""
    return {name: [transform_fingerprint(t) for t in chain] for name, chain in transforms.items()}
