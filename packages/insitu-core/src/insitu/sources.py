"""What framework adapters read: the view types ``as_torch``, ``jax_iterator`` and ``as_tf_dataset`` accept.

Two levels, both satisfied by :class:`insitu.DatasetView` (``ds.train``...):

- :class:`BatchedView`: iterate it for batches, ask it how many there are and
  what they hold (labels, sample shapes, dtypes, batch size, whether a short
  last batch is dropped). Enough for one process reading the whole view, so
  the conformance kit's ``BatchSource`` or a user's own batch producer works.
- :class:`ShardableView`: also split across ranks, moved to another epoch and
  resumed mid-epoch. Sharding by rank, ``set_epoch`` and
  ``state_dict``/``load_state_dict`` on an adapter need this level.

Both are ``runtime_checkable``: ``isinstance`` checks that the members exist,
not their signatures. Adapters call :func:`require_batched_view` /
:func:`require_shardable_view`, which turn a wrong argument into a TypeError
naming what was passed and what it lacks, instead of an AttributeError deep
inside a framework.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class BatchedView(Protocol):
    """Batches of ``{label: array}`` (sample axis first), re-iterable, with their description."""

    @property
    def batch_size(self) -> int:
        """Samples per batch (the last one may be shorter unless ``drop_last``)."""
        ...

    @property
    def drop_last(self) -> bool:
        """Whether a short last batch is left out, so every batch has ``batch_size`` rows."""
        ...

    @property
    def labels(self) -> tuple[str, ...]:
        """The keys of every batch, in order."""
        ...

    @property
    def sample_shapes(self) -> Mapping[str, tuple[int, ...]]:
        """Per label, the shape of one sample (a batch's array shape without its first axis)."""
        ...

    @property
    def dtypes(self) -> Mapping[str, np.dtype[Any]]:
        """Per label, the dtype of its arrays."""
        ...

    def __iter__(self) -> Iterator[Mapping[str, np.ndarray]]:
        """One pass: one mapping per batch (an ``insitu.Batch`` also carries its provenance)."""
        ...

    def __len__(self) -> int:
        """Batches in one pass."""
        ...


@runtime_checkable
class ShardableView(BatchedView, Protocol):
    """A :class:`BatchedView` that can be read by one rank of many, per epoch, and resumed."""

    @property
    def rank(self) -> int:
        """This view's rank (0 when unsharded)."""
        ...

    @property
    def world_size(self) -> int:
        """How many ranks share the split (1 when unsharded)."""
        ...

    def for_rank(self, rank: int, world_size: int, *, source: str = ...) -> ShardableView:
        """The view ``rank`` of ``world_size`` reads; ``source`` names who said so, for errors."""
        ...

    def set_epoch(self, epoch: int) -> None:
        """Read ``epoch``'s order on the next pass."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """Epoch and batches handed out, plus what must match to resume (JSON-able)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Continue after the batches recorded in ``state`` on the next pass: one rank's state, or
        the list of every rank's states (saved at this or another world size)."""
        ...


def _members(protocol: type) -> tuple[str, ...]:
    """The names ``isinstance(obj, protocol)`` looks for, for error messages."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass is object or klass.__module__ == "typing":
            continue
        names.update(n for n in vars(klass) if not n.startswith("_") or n in ("__iter__", "__len__"))
    return tuple(sorted(names))


def _type_name(obj: object) -> str:
    kind = type(obj)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _refusal(obj: object, protocol: type, caller: str, wanted: str) -> TypeError:
    missing = [name for name in _members(protocol) if not hasattr(obj, name)]
    return TypeError(
        f"{caller} needs {wanted}, got {_type_name(obj)} (it lacks {', '.join(missing)}); "
        "pass a split of an InSituDataset such as ds.train"
    )


def require_batched_view(obj: object, caller: str) -> BatchedView:
    """``obj`` if it is a :class:`BatchedView`, else a TypeError naming its type and ``caller``."""
    if not isinstance(obj, BatchedView):
        raise _refusal(obj, BatchedView, caller, "an insitu view (insitu.BatchedView)")
    return obj


def require_shardable_view(obj: object, caller: str) -> ShardableView:
    """``obj`` if it is a :class:`ShardableView`, else a TypeError naming its type and ``caller``."""
    if not isinstance(obj, ShardableView):
        raise _refusal(
            obj,
            ShardableView,
            caller,
            "an insitu view that can be sharded and resumed (insitu.sources.ShardableView)",
        )
    return obj


__all__ = ["BatchedView", "ShardableView", "require_batched_view", "require_shardable_view"]
