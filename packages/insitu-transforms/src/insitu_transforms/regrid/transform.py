"""The Regrid chunk transform: each decoded slab mapped from its grid to another, once, before it is pooled."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import scipy.sparse as sp  # type: ignore[import-untyped]  # scipy ships no type information

from insitu.plugin_api import ConfigError
from insitu_transforms.regrid import cache, weights
from insitu_transforms.regrid.apply import PreparedWeights
from insitu_transforms.regrid.grids import Grid, find_lat_lon_dims

if TYPE_CHECKING:
    from insitu.plugin_api import ArrayGeometry

Method = Literal["bilinear", "conservative", "nearest"]
CacheDir = str | os.PathLike[str] | None | Literal[False]


class Regrid:
    """Regrid the last two axes of every block from ``source`` to ``target``, as a chunk transform.

    ``Regrid(source, target, method)``: ``source`` is the array's :class:`Grid`
    (``Grid.from_geometry(geom)``, ``Grid.from_coords(lat, lon)``), ``target``
    a Grid or a resolution for :meth:`Grid.regular` (``"1.5deg"``). Blocks
    are ``(rows, ..., lat, lon)``: the latitude and longitude must be the
    **last two delivered axes, in that order**; every other axis (levels,
    channels) and the sample axis are kept. Output is float32, or float64
    for float64 input (integers become float32).

    Without ``source`` (``Regrid(target="1.5deg", method="conservative")``,
    or ``{"name": "regrid", "target": "1.5deg"}`` in a configuration) the
    transform is completed per array by an ``InSituDataset``, which calls
    :meth:`bind` with each array's geometry: the source grid is read from the
    array's coordinates, as :meth:`for_array` does. ``dims`` names the
    latitude and longitude dimensions there (default: ``latitude``/``lat``
    and ``longitude``/``lon``, found by name).

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
    process reloads them from the cache directory (or rebuilds them) on its
    first block.
    """

    def __init__(
        self,
        source: Grid | None = None,
        target: Grid | str | float | None = None,
        method: Method | str = "bilinear",
        *,
        dims: tuple[str, str] | None = None,
        cache_dir: CacheDir = None,
    ) -> None:
        if source is not None and not isinstance(source, Grid):
            raise ConfigError(
                "Regrid's source must be a Grid (Grid.from_geometry(geom), Grid.from_coords(lat, lon)), "
                f"got {type(source).__name__}; Regrid.for_array(geom, target) builds it from an array"
            )
        if target is None:
            raise ConfigError("Regrid needs a target: a Grid, or a resolution such as '1.5deg'")
        if dims is not None and (
            not isinstance(dims, (tuple, list)) or len(dims) != 2 or not all(isinstance(d, str) for d in dims)
        ):
            raise ConfigError(
                f"dims names the latitude and longitude dimensions, like ('lat', 'lon'); got {dims!r}"
            )
        self._source = source
        self._target = target if isinstance(target, Grid) else Grid.regular(target)
        self._method = weights.check_method(method)
        self._dims: tuple[str, str] | None = None if dims is None else (str(dims[0]), str(dims[1]))
        self._cache_dir = cache_dir
        self._lock = threading.Lock()
        self._prepared: PreparedWeights | None = None
        if source is not None:
            weights.check_pair(source, self._target, self._method)
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

    def bind(self, geom: ArrayGeometry) -> Regrid:
        """This transform for one array (``InSituDataset`` calls it once per array): without a source
        grid, a Regrid from the array's grid (:meth:`for_array`); with one, this Regrid unchanged (its
        fit to the array is checked by :meth:`out_spec`, after any transform before it)."""
        if self._source is not None:
            return self
        return type(self).for_array(
            geom, self._target, self._method, dims=self._dims, cache_dir=self._cache_dir
        )

    # -- properties --------------------------------------------------------------------------------
    @property
    def source(self) -> Grid | None:
        """The source grid; None until :meth:`bind` gives one."""
        return self._source

    @property
    def target(self) -> Grid:
        """The grid the transform interpolates onto."""
        return self._target

    @property
    def method(self) -> str:
        """The interpolation method (``"bilinear"``, ``"nearest"`` or ``"conservative"``)."""
        return self._method

    @property
    def dims(self) -> tuple[str, str]:
        """The latitude and longitude dimension names (as given, else the usual ones)."""
        return self._dims or ("latitude", "longitude")

    @property
    def weights(self) -> sp.csr_matrix:
        """A copy of the float64 weights, ``(target.size, source.size)``, cells in C order (the
        cached matrix itself is shared by every Regrid of these grids)."""
        return self._load().copy()

    # -- the chunk-transform contract ------------------------------------------------------------
    def __call__(self, name: str, block: np.ndarray) -> np.ndarray:
        """``block`` of shape ``(rows, ..., *source.shape)`` regridded to ``(rows, ..., *target.shape)``."""
        block = np.asarray(block)
        source = self._check_shape(name, block.shape)
        dtype = self._out_dtype(name, block.dtype)
        lead = block.shape[:-2]
        out = self._ready().apply(block.reshape(-1, source.size), dtype)
        return out.reshape(*lead, *self._target.shape)

    def out_spec(
        self, shape: tuple[int, ...], dtype: np.dtype[Any], *, name: str
    ) -> tuple[tuple[int, ...], np.dtype[Any]]:
        """The target grid in place of the last two axes; float32 (float64 for float64 input)."""
        self._check_shape(name, tuple(shape))
        return (*tuple(shape[:-2]), *self._target.shape), self._out_dtype(name, np.dtype(dtype))

    def fingerprint(self) -> str:
        """``Regrid/<weights version>(<method>;<source digest>;<target digest>)``: stable across processes
        (``unbound`` in place of the source digest until :meth:`bind` gives a source)."""
        source = "unbound" if self._source is None else self._source.digest
        return f"Regrid/{weights.WEIGHTS_VERSION}({self._method};{source};{self._target.digest})"

    # -- internals ---------------------------------------------------------------------------------
    def _bound_source(self, name: str | None) -> Grid:
        if self._source is None:
            which = "" if name is None else f" for array {name!r}"
            raise ConfigError(
                f"Regrid to {self._target.name} has no source grid{which}: give it to an "
                "InSituDataset, which binds it to each array's coordinates, or build it with "
                "Regrid.for_array(geom, target) or Regrid(Grid.from_coords(lat, lon), target)"
            )
        return self._source

    def _check_shape(self, name: str, shape: tuple[int, ...]) -> Grid:
        source = self._bound_source(name)
        lat_dim, lon_dim = self.dims
        if len(shape) < 3:
            raise ConfigError(
                f"Regrid maps the last two axes of each sample ({lat_dim}, {lon_dim}); array {name!r} has "
                f"samples of shape {tuple(shape[1:])}"
            )
        if tuple(shape[-2:]) != source.shape:
            raise ConfigError(
                f"source grid is {source.describe_shape()} but array {name!r} has lat/lon "
                f"{shape[-2]}x{shape[-1]} (Regrid maps the last two axes of each sample, which must be "
                f"{lat_dim} and {lon_dim} in that order)"
            )
        return source

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
        source, target, method = self._bound_source(None), self._target, self._method
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
        source = "<bound per array>" if self._source is None else repr(self._source)
        return f"Regrid({self._method!r}, {source} -> {self._target!r})"
