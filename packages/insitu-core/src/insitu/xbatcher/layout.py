"""Which boxes make xbatcher's batches: its rules for ``input_dims``, ``input_overlap``,
``batch_dims`` and ``concat_input_dims``, planned from the dimension sizes alone.

Along each dimension it cuts, xbatcher takes whole pieces only: ``count`` pieces of ``size``
every ``stride = size - overlap`` elements from the first. The dimensions it cuts are those only
``batch_dims`` names (pieces of the batch length), then those of ``input_dims``, and a batch is
a product of runs of pieces, one run per dimension:

- without ``concat_input_dims``, one piece (a batch is a box of the input sizes, and of the
  batch lengths along the batch-only dimensions);
- with it and no ``batch_dims``, every piece (one batch);
- with it and ``batch_dims`` only on other dimensions, every input piece of one slice of them;
- with it and ``batch_dims`` also naming an input dimension, ``ceil(batch / stride)`` consecutive
  pieces along that dimension, and ``length // batch`` batches along each dimension ``batch_dims``
  names (pieces past them are in no batch).

A batch's pieces lie in one box (:attr:`SlicedDim.box`); boxes of consecutive batches start
:attr:`SlicedDim.box_stride` apart, which is what the patch engine reads.
"""

from __future__ import annotations

import itertools
import math
import operator
import warnings
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class SlicedDim:
    """How one dimension is cut: ``count`` pieces of ``size`` every ``stride`` elements from 0
    (whole pieces only), ``per_batch`` consecutive pieces to a batch and ``batches`` batches along
    it (pieces past ``batches * per_batch`` are in none). ``length`` is the dimension's extent."""

    dim: str
    length: int
    size: int
    stride: int
    count: int
    per_batch: int
    batches: int

    def pieces(self, k: int) -> range:
        """The pieces of the ``k``-th batch along this dimension."""
        return range(k * self.per_batch, min((k + 1) * self.per_batch, self.count))

    @property
    def box(self) -> int:
        """The extent read for one batch: every piece of a full batch."""
        return (min(self.per_batch, self.count) - 1) * self.stride + self.size

    @property
    def box_stride(self) -> int:
        """Elements between the boxes of consecutive batches (the whole dimension when there is one
        batch along it, so that no second box is placed, not even a padded one)."""
        return self.length if self.batches == 1 else self.per_batch * self.stride

    @property
    def ragged(self) -> bool:
        """Whether the last batch holds fewer pieces than the others (its box runs past the end)."""
        return len(self.pieces(self.batches - 1)) < min(self.per_batch, self.count)


@dataclass(frozen=True)
class BatchLayout:
    """Every batch of a generator, as boxes of the array: ``dims`` are the sliced dimensions in
    xbatcher's order (those only ``batch_dims`` names, then ``input_dims``); a batch is one batch
    index per sliced dimension, and holds the product of their pieces."""

    dims: tuple[SlicedDim, ...]
    input_dims: tuple[str, ...]
    concat: bool

    @property
    def n_batches(self) -> int:
        """How many batches xbatcher makes."""
        return math.prod(d.batches for d in self.dims)

    def pieces_of(self, batch: tuple[int, ...]) -> list[dict[str, int]]:
        """The first element of each piece of ``batch`` per sliced dimension, in xbatcher's order
        (C order over the sliced dimensions)."""
        ranges = [d.pieces(k) for d, k in zip(self.dims, batch, strict=True)]
        return [
            {d.dim: i * d.stride for d, i in zip(self.dims, combo, strict=True)}
            for combo in itertools.product(*ranges)
        ]


def plan_batches(
    sizes: Mapping[Hashable, int],
    input_dims: Any,
    input_overlap: Any = None,
    batch_dims: Any = None,
    concat_input_dims: bool = False,
) -> BatchLayout:
    """The batches xbatcher makes of an array of ``sizes`` with these arguments.

    Bad arguments raise what xbatcher raises for them: ``KeyError`` for a dimension the data lacks,
    ``ValueError`` for a size past the dimension or an overlap not below the size, ``TypeError``
    for a size or overlap that is not an integer, each naming the value. With
    ``concat_input_dims``, a ``batch_dims`` length on an input dimension that is below 1, longer
    than the dimension, or leaves a batch without a piece (xbatcher fails reading that batch) is a
    ``ValueError`` when planned. A dimension in both ``input_dims`` and ``batch_dims`` without
    ``concat_input_dims`` is left to ``input_dims``, with xbatcher's warning.
    """
    inputs = _dims_mapping("input_dims", input_dims)
    batches = _dims_mapping("batch_dims", {} if batch_dims is None else batch_dims)
    overlap = {} if input_overlap is None else input_overlap
    if not isinstance(overlap, Mapping):
        raise ArgumentTypeError(f"input_overlap must be a dict of dimension to overlap, got {overlap!r}")
    shared = {d: n for d, n in batches.items() if d in inputs}
    only_batch = {d: n for d, n in batches.items() if d not in inputs}
    for name, value in inputs.items():
        _number(f"input_dims[{name!r}]", value)
        _number(f"input_overlap[{name!r}]", overlap.get(name, 0))
    for name, value in (batches if concat_input_dims else only_batch).items():
        _number(f"batch_dims[{name!r}]", value)
    if shared and not concat_input_dims:
        warnings.warn(
            f"dimensions {shared} are in both input_dims and batch_dims; without concat_input_dims "
            "they do not change the batches (input_dims cuts them)",
            UserWarning,
            stacklevel=3,
        )
    cut = {
        **{d: ("batch_dims", n) for d, n in only_batch.items()},
        **{d: ("input_dims", n) for d, n in inputs.items()},
    }
    dims = []
    for name, (given, size) in cut.items():
        length, size, stride, count = _pieces(sizes, given, name, size, overlap)
        if not concat_input_dims:
            per_batch, n = 1, count
        elif name in only_batch:
            # Without a shared dimension each slice of batch_dims is a batch; with one, xbatcher
            # counts them as whole batch lengths in the dimension.
            per_batch, n = 1, (length // size if shared else count)
        elif name in shared:
            per_batch, n = _shared_batches(name, length, shared[name], stride, count)
        else:
            per_batch, n = count, 1
        dims.append(SlicedDim(name, length, size, stride, count, per_batch, n))
    return BatchLayout(tuple(dims), tuple(inputs), bool(concat_input_dims))


class ArgumentTypeError(TypeError, AttributeError):
    """An argument of the wrong kind (``input_overlap`` not a mapping, ``ds`` not an xarray object):
    a ``TypeError``, and the ``AttributeError`` xbatcher raises for it (it reads an attribute the
    argument lacks)."""


def _dims_mapping(what: str, given: Any) -> dict[str, Any]:
    found = dict(given)  # as xbatcher reads it: a mapping or (name, size) pairs
    bad = [k for k in found if not isinstance(k, str)]
    if bad:
        raise TypeError(f"{what} must name dimensions by string, got {bad!r}")
    return found


def _number(what: str, value: Any) -> None:
    """Refuse what is not a number at all; a float is refused once its range is checked (xbatcher
    compares it first), by :func:`_integer`."""
    if not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{what} must be an integer, got {value!r}")


def _integer(what: str, value: Any) -> int:
    if not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an integer, got {value!r}")
    return operator.index(value)


def _pieces(
    sizes: Mapping[Hashable, int], given: str, name: str, size: Any, overlap: Mapping[Any, Any]
) -> tuple[int, int, int, int]:
    """``(length, size, stride, count)`` of the whole pieces along one dimension, or xbatcher's
    error for them; ``given`` names the argument the size comes from."""
    what = f"{given}[{name!r}]"
    if name not in sizes:
        raise KeyError(f"{what}: no dimension {name!r} in the data; its dimensions are {list(sizes)}")
    length = int(sizes[name])
    if size > length:
        raise ValueError(f"{what}={size} is larger than dimension {name!r} ({length})")
    over = overlap.get(name, 0)
    _number(f"input_overlap[{name!r}]", over)
    if over >= size:
        raise ValueError(f"input_overlap[{name!r}]={over} must be less than {what}={size}")
    size, over = _integer(what, size), _integer(f"input_overlap[{name!r}]", over)
    if size < 1:
        raise ValueError(f"{what}={size}: a size must be at least 1")
    stride = size - over
    return length, size, stride, (length - size) // stride + 1


def _shared_batches(name: str, length: int, batch: Any, stride: int, count: int) -> tuple[int, int]:
    """``(pieces per batch, batches)`` along a dimension both ``input_dims`` and ``batch_dims`` name."""
    what = f"batch_dims[{name!r}]"
    batch = _integer(what, batch)
    if batch < 1:
        raise ValueError(f"{what}={batch}: a batch length must be at least 1")
    if batch > length:
        raise ValueError(f"{what}={batch} is longer than dimension {name!r} ({length})")
    per_batch = -(-batch // stride)
    n = length // batch
    if (n - 1) * per_batch >= count:
        raise ValueError(
            f"{what}={batch} makes {n} batches along {name!r} of {per_batch} pieces each, but there are "
            f"{count} pieces: batch {n - 1} would be empty (xbatcher fails reading it); choose another "
            "batch length"
        )
    return per_batch, n
