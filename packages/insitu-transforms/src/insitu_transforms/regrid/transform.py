"""The Regrid chunk transform: each decoded slab mapped from its grid to another, once, before it is pooled."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import scipy.sparse as sp  # type: ignore[import-untyped]  # scipy ships no type information

from insitu.errors import ConfigError
from insitu_transforms.regrid import cache, weights
from insitu_transforms.regrid.apply import PreparedWeights
from insitu_transforms.regrid.grids import Grid, find_lat_lon_dims

if TYPE_CHECKING:
    from insitu.geometry import ArrayGeometry

Method = Literal["bilinear", "conservative", "nearest"]
CacheDir = str | os.PathLike[str] | None | Literal[False]


class Regrid:
    """Regrid the last two axes of every block from ``source`` to ``target``, as a chunk transform.

    ``Regrid(source, target, method)``: ``source`` is the array's :class:`Grid`
    (``Grid.from_geometry(geom)``, ``Grid.from_coords(lat, lon)``), ``target``
    a Grid or a resolution for :meth:`Grid.regular` (``"1.5deg"``). Blocks
    are ``(rows, ..., lat, lon)``: the latitude and longitude must be the
    **last two delivered axes, in that order** (``dims`` names them in
    messages); every other axis (levels, channels) and the sample axis are
    kept. Output is float32, or float64 for float64 input (integers become
    float32).

    Methods: ``"bilinear"`` (clamped to the outermost row or column near
    the poles and at regional edges, see :mod:`.bilinear`; curvilinear
    sources through :mod:`.curvilinear`), ``"conservative"`` (first-order,
    area-weighted on the sphere, rectilinear grids only, see
    :mod:`.conservative`) and ``"nearest"`` (great-circle). NaN source
    values are left out and the other weights renormalised; a target cell
    with no valid source is NaN.

    The weights are a CSR matrix ``(target.size, source.size)`` built at
    construction (the target is checked against a regional source's domain
    then), kept once per process and stored in ``cache_dir`` (default
    ``$XDG_CACHE_HOME/insitu/regrid`` or ``~/.cache/insitu/regrid``;
    ``False``: no files). Pickling leaves them out; a copy in another
    process reloads them from the cache directory on its first block.
    """

    def __init__(
        self,
        source: Grid,
        target: Grid | str | float,
        method: Method | str = "bilinear",
        *,
        dims: tuple[str, str] = ("latitude", "longitude"),
        cache_dir: CacheDir = None,
    ) -> None:
        if not isinstance(source, Grid):
            raise ConfigError(
                "Regrid's source must be a Grid (Grid.from_geometry(geom), Grid.from_coords(lat, lon)), "
                f"got {type(source).__name__}; Regrid.for_array(geom, target) builds it from an array"
            )
        if not isinstance(dims, (tuple, list)) or len(dims) != 2 or not all(isinstance(d, str) for d in dims):
            raise ConfigError(
                f"dims names the latitude and longitude dimensions, like ('lat', 'lon'); got {dims!r}"
            )
        self._source = source
        self._target = target if isinstance(target, Grid) else Grid.regular(target)
        self._method = weights.check_method(method)
        self._dims = (str(dims[0]), str(dims[1]))
        self._cache_dir = cache_dir
        weights.check_pair(self._source, self._target, self._method)
        self._lock = threading.Lock()
        self._prepared: PreparedWeights | None = None
        self._ready()  # built now: a bad pair of grids fails here, not in a decode thread

    @classmethod
    def for_array(
        cls,
        geom: ArrayGeometry,
        target: Grid | str | float,
        method: Method | str = "bilinear",
        *,
        dims: tuple[str, str] | None = None,
        cache_dir: CacheDir = None,
    ) -> Regrid:
        """A Regrid for one array, its source grid read from the array's coordinates (selections
        applied). The latitude and longitude dimensions (``dims``, found by name by default) must be
        the array's last two delivered dimensions, in that order."""
        lat_dim, lon_dim = dims if dims is not None else find_lat_lon_dims(geom)
        delivered = tuple(geom.delivered_dims)
        if delivered[-2:] != (lat_dim, lon_dim):
            raise ConfigError(
                f"Regrid maps the last two delivered axes of an array, which must be ({lat_dim!r}, "
                f"{lon_dim!r}) in that order; array {geom.name!r} delivers {list(delivered)}"
            )
        source = Grid.from_geometry(geom, (lat_dim, lon_dim))
        return cls(source, target, method, dims=(lat_dim, lon_dim), cache_dir=cache_dir)

    # -- properties --------------------------------------------------------------------------------
    @property
    def source(self) -> Grid:
        return self._source

    @property
    def target(self) -> Grid:
        return self._target

    @property
    def method(self) -> str:
        return self._method

    @property
    def dims(self) -> tuple[str, str]:
        return self._dims

    @property
    def weights(self) -> sp.csr_matrix:
        """A copy of the float64 weights, ``(target.size, source.size)``, cells in C order (the
        cached matrix itself is shared by every Regrid of these grids)."""
        return self._load().copy()

    # -- the chunk-transform contract ------------------------------------------------------------
    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        """``block`` of shape ``(rows, ..., *source.shape)`` regridded to ``(rows, ..., *target.shape)``."""
        block = np.asarray(block)
        self._check_shape(name, block.shape)
        dtype = self._out_dtype(name, block.dtype)
        lead = block.shape[:-2]
        out = self._ready().apply(block.reshape(-1, self._source.size), dtype)
        return out.reshape(*lead, *self._target.shape)

    def out_spec(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], *, name: str
    ) -> tuple[tuple[int, ...], np.dtype[Any]]:
        """The target grid in place of the last two axes; float32 (float64 for float64 input)."""
        self._check_shape(name, tuple(shape))
        return (*tuple(shape[:-2]), *self._target.shape), self._out_dtype(name, np.dtype(dtype))

    def fingerprint(self) -> str:
        """``Regrid/<weights version>(<method>;<source digest>;<target digest>)``: stable across processes."""
        return f"Regrid/{weights.WEIGHTS_VERSION}({self._method};{self._source.digest};{self._target.digest})"

    # -- internals ---------------------------------------------------------------------------------
    def _check_shape(self, name: str, shape: tuple[int, ...]) -> None:
        lat_dim, lon_dim = self._dims
        if len(shape) < 3:
            raise ConfigError(
                f"Regrid maps the last two axes of each sample ({lat_dim}, {lon_dim}); array {name!r} has "
                f"samples of shape {tuple(shape[1:])}"
            )
        if tuple(shape[-2:]) != self._source.shape:
            raise ConfigError(
                f"source grid is {self._source.describe_shape()} but array {name!r} has lat/lon "
                f"{shape[-2]}x{shape[-1]} (Regrid maps the last two axes of each sample, which must be "
                f"{lat_dim} and {lon_dim} in that order)"
            )

    @staticmethod
    def _out_dtype(name: str, dtype: np.dtype[Any]) -> np.dtype[Any]:
        if dtype.kind == "f":
            return np.dtype(np.float64 if dtype.itemsize >= 8 else np.float32)
        if dtype.kind in "iub":
            return np.dtype(np.float32)
        raise ConfigError(f"Regrid needs real numbers; array {name!r} is {dtype}")

    def _cache_path(self) -> Path | None:
        if self._cache_dir is False:
            return None
        if self._cache_dir is None:
            return cache.default_cache_dir()
        return Path(os.fspath(self._cache_dir))

    def _load(self) -> sp.csr_matrix:
        source, target, method = self._source, self._target, self._method
        return cache.load_or_build(
            weights.weights_key(source, target, method),
            (target.size, source.size),
            # Looked up at call time, so tests can tell a cache hit from a build.
            lambda: weights.build_weights(source, target, method),
            self._cache_path(),
        )

    def _ready(self) -> PreparedWeights:
        prepared = self._prepared
        if prepared is None:
            with self._lock:
                if self._prepared is None:
                    self._prepared = PreparedWeights(self._load())
                prepared = self._prepared
        return prepared

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_lock")
        state["_prepared"] = None  # rebuilt from the cache in the receiving process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Regrid({self._method!r}, {self._source!r} -> {self._target!r})"
