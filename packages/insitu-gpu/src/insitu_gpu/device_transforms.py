"""insitu-transforms operations on device arrays, written against the array API.

Each function takes the array namespace ``xp`` (``numpy`` in CI, ``cupy`` on
a GPU) and uses only what both provide, so the CPU tests run the very code a
GPU runs. The host transforms stay the reference: shapes, dtypes and errors
come from their own ``out_spec`` and attributes, and the tests compare every
result with the host path.

Supported: ``StandardScaler``, ``Cast``, ``FillNaN`` (``NanToNum``),
``Crop``, ``Coarsen`` and ``Regrid`` (its sparse weights through
``cupyx.scipy.sparse`` on a GPU, ``scipy.sparse`` on the CPU). Chunk
transforms apply per label as the dataset applies them per array (the sample
axis first; a chunk transform on a batch gives what it gives on the chunks
the batch was gathered from, since each acts on samples independently).

No branch depends on data values (``if nan.any()``): on a GPU each such test
is a synchronisation with the host, which would stall the copy overlap.
``Coarsen`` runs the host's own block reduction
(:func:`insitu_transforms.coarsen.block_reduce`, written for either array
module). The transforms come from insitu-transforms, which this module
imports when a chain is built (``pip install insitu-gpu[transforms]``).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

_SHIFTED = re.compile(r"^(?P<base>.+?)[+-]\d+$")

#: The insitu-transforms classes with a device version (by class name; NanToNum is a FillNaN).
SUPPORTED = ("StandardScaler", "Cast", "FillNaN", "NanToNum", "Crop", "Coarsen", "Regrid")


def _kind(transform: Any) -> str | None:
    """Which device version runs ``transform`` (a NanToNum is a FillNaN), None when there is none."""
    try:
        from insitu_transforms import Cast, Coarsen, Crop, FillNaN, StandardScaler
    except ImportError:  # without insitu-transforms no transform has a device version
        return None
    for klass in (StandardScaler, Cast, FillNaN, Crop, Coarsen):
        if isinstance(transform, klass):
            return klass.__name__
    from insitu_transforms import Regrid  # last: its module imports scipy

    return "Regrid" if isinstance(transform, Regrid) else None


def _base(label: str) -> str:
    match = _SHIFTED.match(label)
    return match["base"] if match else label


# -- the operations ----------------------------------------------------------------------------------


def scale(xp: Any, scaler: Any, label: str, array: Any, cache: dict[Any, Any]) -> Any:
    """``StandardScaler.transform`` on the device: the same operations in the same dtype."""
    found = scaler.stats(label)
    if found is None:
        return array
    mean, std = found
    sample_shape = tuple(array.shape[1:])
    try:
        fits = np.broadcast_shapes(mean.shape, sample_shape) == sample_shape
    except ValueError:
        fits = False
    if not fits:
        scaler.transform(label, np.empty((0, *sample_shape), dtype=np.float32))  # raises its own error
        raise ValueError(f"StandardScaler statistics {mean.shape} do not fit {label!r} {sample_shape}")
    dtype = np.dtype(array.dtype) if np.dtype(array.dtype).kind == "f" else np.dtype(np.float32)
    key = (id(scaler), label, dtype.str)
    if key not in cache:  # statistics copied to the device once per label and dtype
        cache[key] = (xp.asarray(mean.astype(dtype)), xp.asarray((1.0 / std).astype(dtype)), scaler)
    d_mean, d_inv, _ = cache[key]
    return (array - d_mean) * d_inv


def fill_nan(xp: Any, value: float, array: Any) -> Any:
    """NaN replaced by ``value`` (``FillNaN``); integer arrays pass through."""
    if np.dtype(array.dtype).kind not in "fc":
        return array
    return xp.where(xp.isnan(array), xp.asarray(value, dtype=array.dtype), array)


def coarsen(xp: Any, plan: Mapping[int, int], how: str, out_dtype: np.dtype[Any], array: Any) -> Any:
    """Block means (NaN left out) or maxima (NaN ignored unless all NaN) over ``plan`` ``{axis: factor}``:
    :func:`insitu_transforms.coarsen.block_reduce`, the host's own reduction."""
    from insitu_transforms.coarsen import block_reduce

    return block_reduce(xp, array, plan, how, out_dtype)


class DeviceWeights:
    """A Regrid's CSR weights on the device, applied to ``(rows, ..., lat, lon)`` arrays."""

    def __init__(self, xp: Any, regrid: Any) -> None:
        host = regrid.weights.tocsr()
        self.n_target, self.n_source = (int(host.shape[0]), int(host.shape[1]))
        self.target_shape = tuple(regrid.target.shape)
        if xp is np:
            self.matrix = host
        else:
            sparse = importlib.import_module("cupyx.scipy.sparse")
            self.matrix = sparse.csr_matrix(host)
        empty = np.flatnonzero(np.diff(host.indptr) == 0)
        self.empty = xp.asarray(empty) if empty.size else None

    def apply(self, xp: Any, array: Any, out_dtype: np.dtype[Any]) -> Any:
        """Regrid ``array`` (last two axes the source grid) to the target grid as the host
        path (sums in float64, NaN treated as the host treats it), cast to ``out_dtype``."""
        lead = tuple(array.shape[:-2])
        m = int(np.prod(lead, dtype=np.int64))
        # (n_source, m) float64, as the host path: sums in float64, one rounding at the end.
        x = xp.reshape(array, (m, self.n_source)).T.astype(np.float64)
        missing = xp.isnan(x)
        clean = xp.where(missing, xp.asarray(0.0, dtype=x.dtype), x)
        plain = self.matrix @ x
        total = self.matrix @ clean
        weight = self.matrix @ (~missing).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            renormalised = xp.where(weight > 0, total / weight, xp.asarray(np.nan, dtype=x.dtype))
        # Fields holding NaN leave it out and renormalise the other weights; the others are the plain product.
        has_nan = xp.any(missing, axis=0)
        result = xp.where(has_nan[None, :], renormalised, plain)
        if self.empty is not None:
            result[self.empty, :] = np.nan
        return xp.reshape(result.T.astype(out_dtype), (*lead, *self.target_shape))


# -- the chain ----------------------------------------------------------------------------------------

Step = Callable[[Any, str, Any], Any]


class DeviceChain:
    """The device versions of ``transforms``, applied in order to every label of a batch.

    ``geometries`` (``{label: ArrayGeometry}``) binds dimension names and
    gives each label's array name (what chunk transforms' ``labels`` refer to);
    without it the array name is the label without a ``+k``/``-k`` offset.
    An unsupported transform is a TypeError here, naming the ones that are.
    """

    def __init__(self, transforms: Sequence[Any], geometries: Mapping[str, Any] | None = None) -> None:
        self.transforms = tuple(transforms)
        self._geoms = dict(geometries or {})
        self._kinds: list[str] = []
        for t in self.transforms:
            kind = _kind(t)
            if kind is None:
                raise TypeError(
                    f"{type(t).__name__} has no device version; the device stage runs {', '.join(SUPPORTED)} "
                    "from insitu-transforms. Give other transforms to the dataset (they run on the host)"
                )
            self._kinds.append(kind)
        self._bound: dict[tuple[int, str], Any] = {}
        self._cache: dict[Any, Any] = {}

    def describe(self) -> list[str]:
        """The transforms run on the device, by class name."""
        return list(self._kinds)

    def name_of(self, label: str) -> str:
        """The array name of ``label`` (what transforms' ``labels`` filters match), from its geometry when known."""
        geom = self._geoms.get(label)
        return str(geom.name) if geom is not None else _base(label)

    def _bind(self, i: int, label: str) -> Any:
        key = (i, label)
        if key not in self._bound:
            t = self.transforms[i]
            geom = self._geoms.get(label)
            bind = getattr(t, "bind", None)
            self._bound[key] = bind(geom) if geom is not None and bind is not None else t
        return self._bound[key]

    def __call__(self, xp: Any, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """Apply the chain to every array of a batch on the device (``xp``: its array namespace); returns
        a new mapping, the input is not modified."""
        out = dict(arrays)
        for i, kind in enumerate(self._kinds):
            if kind == "StandardScaler":
                scaler = self.transforms[i]
                if out and all(scaler.stats(label) is None for label in out):
                    scaler(_EmptyBatch(out))  # raises the host's error naming the labels
                out = {label: scale(xp, scaler, label, a, self._cache) for label, a in out.items()}
                continue
            out = {label: self._chunk_step(xp, i, kind, label, a) for label, a in out.items()}
        return out

    def _chunk_step(self, xp: Any, i: int, kind: str, label: str, array: Any) -> Any:
        t = self._bind(i, label)
        name = self.name_of(label)
        labels = getattr(t, "labels", None)
        if labels is not None and name not in labels:
            return array
        if kind in ("Cast", "Crop"):
            return t(name, array)  # astype / basic indexing: the host code runs as is on device arrays
        if kind == "FillNaN":
            return fill_nan(xp, t.value, array)
        shape, dtype = tuple(int(s) for s in array.shape), np.dtype(array.dtype)
        out_shape, out_dtype = t.out_spec(shape, dtype, name=name)  # the host's checks and errors
        if kind == "Coarsen":
            if tuple(out_shape) == shape and np.dtype(out_dtype) == dtype:
                return array
            return t.reduce(xp, name, array)  # the host's block reduction, on the device's arrays
        key = ("regrid", id(t))
        if key not in self._cache:
            self._cache[key] = (DeviceWeights(xp, t), t)
        return self._cache[key][0].apply(xp, array, np.dtype(out_dtype))


class _EmptyBatch(Mapping[str, Any]):
    """The labels of a batch, for a host transform to raise its own error about them."""

    def __init__(self, arrays: Mapping[str, Any]) -> None:
        self._labels = list(arrays)

    def __getitem__(self, label: str) -> Any:
        raise KeyError(label)

    def __iter__(self) -> Any:
        return iter(self._labels)

    def __len__(self) -> int:
        return len(self._labels)


__all__ = ["SUPPORTED", "DeviceChain", "DeviceWeights", "coarsen", "fill_nan", "scale"]
