"""The CUDA backend of the device stage, through CuPy (any build: cupy-cuda12x, cupy-cuda13x).

CuPy is imported when a :class:`CupyBackend` is built, never at module import.
Nothing here runs in CI (no GPU there): the logic it serves is tested through
:class:`insitu_gpu.backend.HostBackend`, and these few calls are the whole
CUDA-specific surface.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from insitu_gpu.backend import Event, Stream
from insitu_gpu.device import import_cupy


class CupyEvent:
    """A ``cupy.cuda.Event`` (timing disabled: recording and waiting cost less)."""

    def __init__(self, event: Any) -> None:
        self.raw = event

    def query(self) -> bool:
        """Whether the stream has run everything enqueued before this event."""
        return bool(self.raw.done)

    def synchronize(self) -> None:
        """Block the host until the event has completed."""
        self.raw.synchronize()


class CupyStream:
    """A ``cupy.cuda.Stream`` (or ``ExternalStream`` around a framework's stream)."""

    def __init__(self, cupy: Any, stream: Any) -> None:
        self._cupy = cupy
        self.raw = stream

    def record(self) -> CupyEvent:
        """A CUDA event recorded after everything enqueued so far."""
        event = self._cupy.cuda.Event(block=False, disable_timing=True, interprocess=False)
        event.record(self.raw)
        return CupyEvent(event)

    def wait(self, event: Event) -> None:
        """Later work on this stream starts after ``event`` (a :class:`CupyEvent`); the host does not block."""
        if not isinstance(event, CupyEvent):
            raise TypeError(f"a CUDA stream waits on CUDA events, got {type(event).__name__}")
        self.raw.wait_event(event.raw)


class CupyBackend:
    """Pinned host memory, device arrays and streams on CUDA device ``device_id``.

    ``consumer_stream`` returns the raw ``cudaStream_t`` (an int) the
    consumer computes on, such as ``torch.cuda.current_stream().cuda_stream``;
    by default it is CuPy's current stream, which DLPack consumers (JAX,
    ``torch.from_dlpack``) synchronise with when they import an array.
    """

    name = "cupy"

    def __init__(self, device_id: int = 0, *, consumer_stream: Callable[[], int] | None = None) -> None:
        cupy = import_cupy()
        count = int(cupy.cuda.runtime.getDeviceCount())
        if not 0 <= device_id < count:
            raise ValueError(f"device_id={device_id} but {count} CUDA device(s) are visible")
        self._cupy = cupy
        self.device_id = device_id
        self._device = cupy.cuda.Device(device_id)
        self._consumer_ptr = consumer_stream

    @property
    def xp(self) -> Any:
        """The ``cupy`` module."""
        return self._cupy

    def pinned_empty(self, nbytes: int) -> np.ndarray:
        # Page-locked through CuPy's pinned pool; the numpy view keeps the allocation alive.
        """A page-locked host buffer of ``nbytes`` (uint8) from CuPy's pinned pool."""
        memory = self._cupy.cuda.alloc_pinned_memory(int(nbytes))
        return np.frombuffer(memory, dtype=np.uint8, count=int(nbytes))

    def device_empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        """An uninitialised CuPy array on the backend's device."""
        with self._device:
            return self._cupy.empty(shape, dtype=dtype)

    def copy_stream(self) -> CupyStream:
        """A new non-blocking CUDA stream for host-to-device copies."""
        with self._device:
            return CupyStream(self._cupy, self._cupy.cuda.Stream(non_blocking=True))

    def consumer_stream(self) -> CupyStream:
        """The stream the consumer computes on: the framework's current stream where one was given,
        else CuPy's current stream."""
        with self._device:
            if self._consumer_ptr is None:
                return CupyStream(self._cupy, self._cupy.cuda.get_current_stream())
            return CupyStream(self._cupy, self._cupy.cuda.ExternalStream(int(self._consumer_ptr())))

    def copy_to_device(self, dst: Any, src: np.ndarray, stream: Stream) -> None:
        """Enqueue ``dst[...] = src`` on ``stream``; asynchronous because ``src`` is page-locked."""
        if not isinstance(stream, CupyStream):
            raise TypeError(f"CupyBackend copies on CUDA streams, got {type(stream).__name__}")
        with self._device:
            # Asynchronous only from page-locked memory; the stage guarantees `src` is.
            dst.set(src, stream=stream.raw)

    def run_on(self, stream: Stream, work: Callable[[], Any]) -> Any:
        """``work()`` on the backend's device with ``stream`` current, so its kernels follow the stream's work."""
        if not isinstance(stream, CupyStream):
            raise TypeError(f"CupyBackend runs work on CUDA streams, got {type(stream).__name__}")
        with self._device, stream.raw:
            return work()

    def to_host(self, array: Any) -> np.ndarray:
        """A numpy copy of a CuPy array (synchronises)."""
        return np.asarray(self._cupy.asnumpy(array))

    def close(self) -> None:
        """Nothing to release by hand: CuPy frees streams and memory with their last reference."""

    def __repr__(self) -> str:
        return f"CupyBackend(device_id={self.device_id})"


__all__ = ["CupyBackend", "CupyEvent", "CupyStream"]
