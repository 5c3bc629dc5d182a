"""Iterate an insitu view as JAX arrays, on one process or as global arrays across many.

In a multi-process JAX run (``jax.distributed.initialize``), every process
reads its own chunks (the view is sharded by ``jax.process_index()``) and the
per-process batches are stitched into one global ``jax.Array`` per label,
batch axis split over a mesh of every process's devices. No data moves
between processes: each process only supplies the rows its devices hold.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from insitu.plugin_api import BatchedView, ConfigError, require_batched_view, require_shardable_view
from insitu_jax.adapter import import_jax, replicated, static_labels, to_jax

if TYPE_CHECKING:
    import jax

BATCH_AXIS = "batch"


def global_batch_sharding() -> jax.sharding.NamedSharding:
    """Split axis 0 over every device of every process (a 1-D mesh named ``"batch"``).

    What :func:`jax_iterator` uses in multi-process runs when no sharding is
    given; pass it to ``jax.jit(..., in_shardings=...)`` to match.
    """
    jax = import_jax()
    mesh = jax.sharding.Mesh(np.array(jax.devices()), (BATCH_AXIS,))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(BATCH_AXIS))


class JaxIterator(Iterator[dict[str, Any]]):
    """One pass over a view as ``{label: jax.Array}``, with transfers in flight and resumable state.

    Built by :func:`jax_iterator`. ``view`` is the view actually read (this
    process's shard in a multi-process run); ``sharding`` is where arrays go.
    """

    def __init__(
        self,
        view: BatchedView,
        *,
        sharding: jax.sharding.Sharding | None = None,
        prefetch: int = 2,
        device: Any = None,
    ) -> None:
        view = require_batched_view(view, "jax_iterator")
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise ConfigError(f"prefetch must be a positive integer, got {prefetch!r}")
        jax = import_jax()
        self.prefetch = prefetch
        self.process_count = jax.process_count()
        self.view = _process_view(view, jax.process_index(), self.process_count)
        if self.process_count > 1 and sharding is None:
            sharding = global_batch_sharding()
        self.sharding = sharding
        self.device = None
        if device is not None:
            if sharding is not None or self.process_count > 1:
                raise ConfigError("jax_iterator: give device (one device, one process) or sharding, not both")
            from insitu_jax.device import resolve_device

            self.device = resolve_device(device)
        # len() plans the epoch: a bad rank layout (more ranks than chunks) fails here, not mid-training.
        len(self.view)
        self._pending: deque[dict[str, Any]] = deque()
        self._source: Iterator[Mapping[str, np.ndarray]] | None = None

    def __iter__(self) -> JaxIterator:
        return self

    def __next__(self) -> dict[str, jax.Array]:
        if self._source is None:
            if self.device is None:
                self._source = iter(self.view)
            else:
                from insitu_jax.device import device_batches

                self._source = device_batches(self.view, self.device)
        # Keep `prefetch` batches converted beyond the one returned: their transfers run while
        # the caller computes on this one.
        while len(self._pending) <= self.prefetch:
            batch = next(self._source, None)
            if batch is None:
                break
            self._pending.append(self._convert(batch))
        if not self._pending:
            raise StopIteration
        return self._pending.popleft()

    def __len__(self) -> int:
        """Batches in this pass (per process; every process yields the same number)."""
        return len(self.view)

    def _convert(self, batch: Mapping[str, np.ndarray]) -> dict[str, jax.Array]:
        if self.device is not None:
            return dict(batch)  # already on the device (insitu_jax.device)
        if self.process_count == 1 or self.sharding is None or self.sharding.is_fully_addressable:
            return to_jax(batch, sharding=self.sharding)
        jax = import_jax()
        # Not a collective: each process builds its addressable shards from its own rows, and the
        # global shape is this process's batch times the process count.
        # A static field (1, *shape) is the same in every process: replicated, not split by rows.
        statics = static_labels(batch)
        whole = replicated(self.sharding) if statics else None
        return {
            label: jax.make_array_from_process_local_data(
                whole if label in statics and whole is not None else self.sharding, np.asarray(values)
            )
            for label, values in batch.items()
        }

    # -- exact resume ---------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The view's state counting only batches this iterator has returned.

        The view has already handed out the ``prefetch`` batches being
        converted ahead; they are not counted, so a run resumed from this
        state starts with the first batch the caller has not seen.
        """
        view = require_shardable_view(self.view, "JaxIterator.state_dict")
        state = dict(view.state_dict())
        state["batches_done"] = int(state["batches_done"]) - len(self._pending)
        return state

    def load_state_dict(self, state: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> None:
        """Resume from :meth:`state_dict` (possibly of another process); call before iterating.

        ``state`` is one process's state (processes that move in lockstep, as a jitted step
        makes them) or the list of every process's states. Saved at another process count, the
        processes share what the old ones left of the epoch (``docs/distributed.md``).
        """
        view = require_shardable_view(self.view, "JaxIterator.load_state_dict")
        if self._source is not None:
            raise RuntimeError("load_state_dict must be called before the iterator yields its first batch")
        view.load_state_dict(state)


def jax_iterator(
    view: BatchedView,
    *,
    sharding: jax.sharding.Sharding | None = None,
    prefetch: int = 2,
    device: Any = None,
) -> JaxIterator:
    """Iterate ``view`` as ``{label: jax.Array}``, keeping ``prefetch`` batches in flight.

    One process: each batch goes through :func:`insitu_jax.to_jax` with
    ``sharding``. Several processes (``jax.process_count() > 1``): the view
    is sharded as ``view.shard(jax.process_index(), jax.process_count())``
    (a view already sharded that way is used as is), so each process reads
    disjoint chunks and all yield the same number of batches; each label
    becomes a global array of ``process_count`` times the per-process batch,
    over ``sharding`` (default :func:`global_batch_sharding`), built with
    ``jax.make_array_from_process_local_data``. The per-process batch must
    divide evenly over the process's devices (``drop_last=True`` avoids a
    short last batch).

    The returned iterator has ``state_dict()`` / ``load_state_dict()`` for
    exact resume: see :class:`JaxIterator`.

    ``device`` (a ``jax.Device``, an index, or ``"gpu:0"``; one process, no
    ``sharding``) puts every batch on that device: on a GPU through
    insitu-gpu's device stage when it is installed (pinned ring, copies on
    their own stream, arrays by DLPack), otherwise with ``jax.device_put``.

    ``view`` is an insitu view (``ds.train``...) or any other
    :class:`insitu.BatchedView`; several processes and resume need an
    :class:`insitu.sources.ShardableView` (what ``ds.train`` is). Anything
    else raises TypeError naming its type.
    """
    return JaxIterator(view, sharding=sharding, prefetch=prefetch, device=device)


def _process_view(view: BatchedView, process_index: int, process_count: int) -> BatchedView:
    """The view this JAX process reads: its own shard in a multi-process run."""
    if process_count == 1:
        return view
    shardable = require_shardable_view(view, "jax_iterator in a multi-process JAX run")
    return shardable.for_rank(process_index, process_count, source="jax.process_index()/process_count()")


__all__ = ["JaxIterator", "global_batch_sharding", "jax_iterator"]
