"""The device stage: batches after gather, copied to the device and transformed there, in view order.

Per batch, on the host: copy the gathered arrays into the next slot of the
pinned ring (:mod:`insitu_gpu.ring`), enqueue one asynchronous copy per label
on the stage's own copy stream, record an event after them, and return. The
consumer's stream waits on that event (no host synchronisation); the device
transforms (:mod:`insitu_gpu.device_transforms`) are enqueued on the
consumer's stream after it. With ``prefetch=k`` the next ``k`` batches are
staged before one is handed over, so their copies overlap the consumer's
compute even when it synchronises every step.

Device buffers are recycled. A set of them is rewritten only when nothing
handed out still refers to it (no array, view, or DLPack import of it is
alive: checked by reference count, so a batch the consumer keeps stays
valid), and only after the work the consumer had enqueued by then (the copy
stream waits on an event recorded on the consumer's stream). New buffers are
allocated on the consumer's stream too: CuPy's pool reuses memory in the
order of the stream that allocated it, and that is the stream that uses it.
Transforms run on the consumer's stream for the same reason.

Ordering and resume: batches are handed out in the view's order, each once.
The stage reads up to ``prefetch`` batches ahead of what it handed out;
:meth:`DeviceStage.state_dict` subtracts them, so a resumed run starts with
the first batch the consumer has not seen, as without the stage.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitu_gpu.backend import Backend, Event, HostBackend, Stream
from insitu_gpu.device_transforms import DeviceChain
from insitu_gpu.ring import PinnedRing, Slot, host_dtype


class DeviceBatch(Mapping[str, Any]):
    """``{label: device array}`` for one batch, with the host batch's provenance.

    ``sample_indices``, ``read_indices``, ``valid`` and, for patches,
    ``patch_origins`` and ``patch_extent`` stay on the host (numpy), as they
    are in :class:`insitu.Batch`; ``split``, ``epoch`` and ``index``
    say which batch this is. The arrays support DLPack
    (``torch.from_dlpack``, ``jax.dlpack.from_dlpack``) without a copy.
    """

    def __init__(self, data: Mapping[str, Any], source: Mapping[str, np.ndarray]) -> None:
        self.data = dict(data)
        self.sample_indices: np.ndarray | None = getattr(source, "sample_indices", None)
        self.read_indices: Mapping[str, np.ndarray] = dict(getattr(source, "read_indices", None) or {})
        self.valid: np.ndarray | None = getattr(source, "valid", None)
        self.patch_origins: np.ndarray | None = getattr(source, "patch_origins", None)
        self.patch_extent: np.ndarray | None = getattr(source, "patch_extent", None)
        self.split = str(getattr(source, "split", ""))
        self.epoch = int(getattr(source, "epoch", 0))
        self.index = int(getattr(source, "index", 0))

    def __getitem__(self, label: str) -> Any:
        return self.data[label]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    @property
    def size(self) -> int:
        """Rows in the batch."""
        if self.sample_indices is not None:
            return int(self.sample_indices.shape[0])
        first = next(iter(self.data.values()), None)
        return 0 if first is None else int(first.shape[0])

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self.data.items())
        return f"DeviceBatch(split={self.split!r}, epoch={self.epoch}, index={self.index}, {{{parts}}})"


def _most_refs(buffers: Sequence[Any]) -> int:
    # Always called the same way, so the references this call itself adds are the same each time.
    return max((sys.getrefcount(b) for b in buffers), default=0)


class _DeviceSet:
    """Device buffers for one batch layout; free when no handed-out array refers to them."""

    def __init__(self, key: tuple[Any, ...], buffers: dict[str, Any]) -> None:
        self.key = key
        self.buffers = buffers
        self._order = list(buffers.values())
        self._baseline = _most_refs(self._order)
        self.staged = True  # acquired for a batch not handed out yet

    def in_use(self) -> bool:
        return self.staged or _most_refs(self._order) > self._baseline


class DeviceBuffers:
    """At most ``capacity`` recycled buffer sets (more are allocated only while the consumer keeps batches)."""

    def __init__(self, backend: Backend, capacity: int) -> None:
        self._backend = backend
        self.capacity = capacity
        self._sets: list[_DeviceSet] = []
        self.allocations = 0
        self.reuses = 0

    def acquire(
        self, layout: Mapping[str, tuple[tuple[int, ...], np.dtype[Any]]], consumer: Stream
    ) -> _DeviceSet:
        """A set for ``layout``, recycled when one is free, else new (allocated on the consumer's stream)."""
        key = tuple((label, shape, dtype.str) for label, (shape, dtype) in layout.items())
        for found in self._sets:
            if found.key == key and not found.in_use():
                self.reuses += 1
                found.staged = True
                return found
        buffers = self._backend.run_on(
            consumer,
            lambda: {
                label: self._backend.device_empty(shape, dtype) for label, (shape, dtype) in layout.items()
            },
        )
        made = _DeviceSet(key, buffers)
        self.allocations += 1
        if len(self._sets) >= self.capacity:
            # Forget a set the consumer still holds (or one of another layout): it is freed with its last use.
            victim = next((i for i, s in enumerate(self._sets) if s.in_use() or s.key != key), 0)
            del self._sets[victim]
        self._sets.append(made)
        return made

    def clear(self) -> None:
        """Forget every buffer set (each is freed with its last use)."""
        self._sets.clear()


@dataclass
class _Staged:
    batch: Mapping[str, np.ndarray]
    buffers: _DeviceSet
    ready: Event


class DeviceIterator(Iterator[DeviceBatch]):
    """One pass of a :class:`DeviceStage` over its view."""

    def __init__(self, stage: DeviceStage) -> None:
        self._stage = stage
        self._source: Iterator[Mapping[str, np.ndarray]] = iter(stage.view)
        self._pending: deque[_Staged] = deque()
        self._exhausted = False

    @property
    def pending(self) -> int:
        """Batches read from the view and staged, not yet handed out."""
        return len(self._pending)

    def __iter__(self) -> DeviceIterator:
        return self

    def __next__(self) -> DeviceBatch:
        stage = self._stage
        while not self._exhausted and len(self._pending) <= stage.prefetch:
            batch = next(self._source, None)
            if batch is None:
                self._exhausted = True
                break
            self._pending.append(stage._stage(batch))
        if not self._pending:
            raise StopIteration
        return stage._hand_over(self._pending.popleft())


class DeviceStage:
    """Iterate ``view`` as :class:`DeviceBatch` es on a device; see the module docstring.

    - ``backend``: a :class:`~insitu_gpu.cuda.CupyBackend` (what
      :func:`device_stage` builds) or :class:`~insitu_gpu.backend.HostBackend`
      (numpy; the default, for tests and dry runs).
    - ``transforms``: insitu-transforms objects (``StandardScaler``,
      ``Cast``, ``FillNaN``/``NanToNum``, ``Crop``, ``Coarsen``, ``Regrid``)
      run on the device, in order, on every label; give them here instead of
      to the dataset. Named dimensions are bound to each label's geometry when
      ``view`` is a dataset view.
    - ``prefetch``: batches staged ahead of the one handed out (0: none).
    - ``pinned_slots``: ring size (default ``prefetch + 1``, so that every
      batch staged ahead has its own slot); fewer make the host wait for a copy.
    - ``device_sets``: recycled device buffer sets kept (default ``prefetch + 2``).
    - ``copy_threads``: threads filling a pinned slot (large arrays only; see
      :mod:`insitu_gpu.ring`).
    """

    def __init__(
        self,
        view: Any,
        *,
        backend: Backend | None = None,
        transforms: Sequence[Any] = (),
        prefetch: int = 1,
        pinned_slots: int | None = None,
        device_sets: int | None = None,
        copy_threads: int = 1,
    ) -> None:
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"prefetch must be a non-negative integer, got {prefetch!r}")
        self.view = view
        self.backend: Backend = backend if backend is not None else HostBackend()
        self.prefetch = prefetch
        self.ring = PinnedRing(
            self.backend,
            pinned_slots if pinned_slots is not None else prefetch + 1,
            copy_threads=copy_threads,
        )
        sets = device_sets if device_sets is not None else prefetch + 2
        if isinstance(sets, bool) or not isinstance(sets, int) or sets < 1:
            raise ValueError(f"device_sets must be a positive integer, got {device_sets!r}")
        self.device_buffers = DeviceBuffers(self.backend, sets)
        self.geometries = _geometries(view)
        self.chain = DeviceChain(transforms, self.geometries)
        self._decode: dict[str, str] | None = None
        self._copy_stream: Stream | None = None
        self._iterator: DeviceIterator | None = None
        self.batches = 0
        self.copied_bytes = 0

    # -- iteration --------------------------------------------------------------------------------
    def __iter__(self) -> DeviceIterator:
        self._iterator = DeviceIterator(self)
        return self._iterator

    def __len__(self) -> int:
        return len(self.view)

    def _streams(self) -> tuple[Stream, Stream]:
        if self._copy_stream is None:
            self._copy_stream = self.backend.copy_stream()
        return self._copy_stream, self.backend.consumer_stream()

    def _stage(self, batch: Mapping[str, np.ndarray]) -> _Staged:
        copy_stream, consumer = self._streams()
        arrays = {label: np.asarray(values) for label, values in batch.items()}
        slot: Slot = self.ring.stage(arrays)
        layout = {label: (a.shape, host_dtype(a.dtype)) for label, a in arrays.items()}
        buffers = self.device_buffers.acquire(layout, consumer)
        # Whatever the consumer enqueued on these buffers (or on the memory just allocated) runs first.
        copy_stream.wait(consumer.record())
        for label, view in slot.views.items():
            self.backend.copy_to_device(buffers.buffers[label], view, copy_stream)
        ready = copy_stream.record()
        self.ring.hold(slot, ready)
        self.copied_bytes += sum(int(a.nbytes) for a in arrays.values())
        return _Staged(batch, buffers, ready)

    def _hand_over(self, staged: _Staged) -> DeviceBatch:
        _, consumer = self._streams()
        consumer.wait(staged.ready)
        # Views, never the buffers themselves: while any exists, the set is not recycled.
        views = {label: buf[...] for label, buf in staged.buffers.buffers.items()}
        staged.buffers.staged = False
        data = self.backend.run_on(consumer, lambda: self.chain(self.backend.xp, views))
        self.batches += 1
        return DeviceBatch(data, staged.batch)

    # -- epochs and resume (forwarded to the view) ----------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """The view's ``set_epoch``."""
        self.view.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """The view's state, counting only batches this stage has handed out (not those staged ahead)."""
        state = dict(self.view.state_dict())
        if self._iterator is not None and "batches_done" in state:
            state["batches_done"] = int(state["batches_done"]) - self._iterator.pending
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The view's ``load_state_dict``: the next pass continues after the batches in ``state``."""
        self.view.load_state_dict(state)

    # -- reporting and release -----------------------------------------------------------------------
    @property
    def stats(self) -> dict[str, Any]:
        """Counters: batches handed out, bytes copied, pinned ring and device buffer reuse, transforms."""
        return {
            "backend": self.backend.name,
            "batches": self.batches,
            "copied_bytes": self.copied_bytes,
            "pinned_slots": self.ring.slots,
            "pinned_bytes": self.ring.nbytes,
            "pinned_allocations": self.ring.allocations,
            "pinned_waits": self.ring.waits,
            "device_allocations": self.device_buffers.allocations,
            "device_reuses": self.device_buffers.reuses,
            "transforms": self.chain.describe(),
            "decode": self.decode_paths(),
        }

    def decode_paths(self) -> dict[str, str]:
        """Per label, where its chunks are decoded and why (probed once; see :mod:`insitu_gpu.decode`)."""
        if self._decode is None:
            from insitu_gpu.decode import decode_paths

            self._decode = decode_paths(self.geometries)
        return self._decode

    def close(self) -> None:
        """Release the copy stream (and its thread on the CPU backend) and the recycled buffers."""
        self.device_buffers.clear()
        self.ring.close()
        self.backend.close()
        self._copy_stream = None

    def __enter__(self) -> DeviceStage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DeviceStage({self.view!r}, backend={self.backend!r}, prefetch={self.prefetch})"


def _geometries(view: Any) -> dict[str, Any]:
    """``{label: ArrayGeometry}`` of a dataset view (empty for other views)."""
    dataset = getattr(view, "dataset", None)
    found: dict[str, Any] = {}
    for group in ("labels", "statics"):
        for geom in getattr(dataset, group, None) or ():
            label = getattr(geom, "label", None)
            if isinstance(label, str):
                found[label] = geom
    return found


def device_stage(
    view: Any,
    *,
    device_id: int = 0,
    transforms: Sequence[Any] = (),
    prefetch: int = 1,
    pinned_slots: int | None = None,
    device_sets: int | None = None,
    copy_threads: int = 1,
    consumer_stream: Callable[[], int] | None = None,
) -> DeviceStage:
    """A :class:`DeviceStage` on CUDA device ``device_id`` (CuPy); ImportError naming what to
    install without CuPy or a GPU. ``consumer_stream`` returns the raw CUDA stream the consumer
    computes on (``lambda: torch.cuda.current_stream().cuda_stream``); default CuPy's current one."""
    from insitu_gpu.cuda import CupyBackend

    backend = CupyBackend(device_id, consumer_stream=consumer_stream)
    return DeviceStage(
        view,
        backend=backend,
        transforms=transforms,
        prefetch=prefetch,
        pinned_slots=pinned_slots,
        device_sets=device_sets,
        copy_threads=copy_threads,
    )


__all__ = ["DeviceBatch", "DeviceBuffers", "DeviceIterator", "DeviceStage", "device_stage"]
