"""An xbatcher drop-in: ``BatchGenerator`` takes xbatcher's arguments and yields its batches, read
by the patch engine.

``from insitu.xbatcher import BatchGenerator`` in place of ``from xbatcher import BatchGenerator``:
the same arguments (``input_dims``, ``input_overlap``, ``batch_dims``, ``concat_input_dims``,
``preload_batch``), the same batches (``xr.Dataset`` or ``xr.DataArray``: the same dimensions,
coordinates and values) and the same exception types for bad arguments, with each stored chunk
decoded once per pass. Batches come in chunk order rather than xbatcher's; ``shuffle=``,
``seed=`` and ``edge=`` are insitu's additions. See ``docs/xbatcher.md``.

- :mod:`insitu.xbatcher.layout`: which boxes make xbatcher's batches (sizes only, no read);
- :mod:`insitu.xbatcher.pieces`: a box's batch as xarray objects, shaped as xbatcher does;
- :mod:`insitu.xbatcher.generator`: the generator over the engine's boxes.
"""

from __future__ import annotations

from insitu.xbatcher.generator import BatchGenerator
from insitu.xbatcher.layout import ArgumentTypeError, BatchLayout, SlicedDim, plan_batches

__all__ = ["ArgumentTypeError", "BatchGenerator", "BatchLayout", "SlicedDim", "plan_batches"]
