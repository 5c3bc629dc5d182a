"""Coordinate values read in the background, so that opening a remote store does not wait for them.

Reading coordinate arrays (``time``, ``latitude``...) takes two sequential
round trips (their metadata, then their values) after the data variables'
metadata. Nothing needs them before the first batch unless the user selects
by value (``sel``), splits by date, or the sample dimension can only be told by
which axis holds datetimes: :func:`insitu.open_geometries` starts the read and
hands every geometry a :class:`LazyCoords`, a mapping that waits for the read
the first time it is used. Batches carry the sample coordinate the same way
(:class:`LazyValues`), so ``batch.coords`` works as before and the first
batch is not held up by it.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from insitu.store.loop import in_loop_thread

Loaded = tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]


class _Pending:
    """The one background read that a store's geometries share: values and attributes."""

    def __init__(self, future: concurrent.futures.Future[Loaded]) -> None:
        self.future = future

    def result(self) -> Loaded:
        if not self.future.done() and in_loop_thread():
            raise RuntimeError("insitu: coordinates were needed on the engine's loop before they were read")
        return self.future.result()


class LazyCoords(Mapping[str, Any]):
    """``{dimension: values}`` (or attributes, with ``attrs=True``) once the background read is
    done; the first use waits for it and re-raises its error, if any."""

    def __init__(self, pending: _Pending, *, attrs: bool = False) -> None:
        self._pending = pending
        self._attrs = attrs

    @classmethod
    def pair(cls, future: concurrent.futures.Future[Loaded]) -> tuple[LazyCoords, LazyCoords]:
        """The values and the attributes of one read."""
        pending = _Pending(future)
        return cls(pending), cls(pending, attrs=True)

    @property
    def ready(self) -> bool:
        """Whether the background read has finished (reading the values will not wait)."""
        return self._pending.future.done()

    @property
    def failed(self) -> bool:
        """Whether the background read has finished with an error (raised where the values are used)."""
        future = self._pending.future
        return future.done() and (future.cancelled() or future.exception() is not None)

    def _data(self) -> Mapping[str, Any]:
        values, attrs = self._pending.result()
        return attrs if self._attrs else values

    def __getitem__(self, key: str) -> Any:
        return self._data()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data())

    def __len__(self) -> int:
        return len(self._data())

    def __repr__(self) -> str:
        return repr(dict(self)) if self.ready else "LazyCoords(<being read>)"

    def __reduce__(self) -> tuple[Any, ...]:  # a pickled geometry carries the values themselves
        return (dict, (dict(self),))


class LazyValues:
    """One coordinate's values, available once the background read is done (``.values`` waits)."""

    __slots__ = ("_coords", "_dim")

    def __init__(self, coords: Mapping[str, np.ndarray], dim: str) -> None:
        self._coords = coords
        self._dim = dim

    @property
    def values(self) -> np.ndarray | None:
        """The coordinate's values (``None`` when the dimension has none); waits for the background read."""
        return self._coords.get(self._dim)


def resolve(values: np.ndarray | LazyValues | None) -> np.ndarray | None:
    """The array behind a sample coordinate that may still be being read."""
    return values.values if isinstance(values, LazyValues) else values
