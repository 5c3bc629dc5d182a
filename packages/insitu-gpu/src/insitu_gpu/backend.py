"""Where the device stage's memory and streams come from: a backend.

The stage (:mod:`insitu_gpu.stage`) is written against this small interface,
so the same ring, ordering and recycling code runs on a GPU (CuPy, see
:mod:`insitu_gpu.cuda`) and on the CPU (:class:`HostBackend`, numpy), where
CI tests it.

A backend gives: page-locked host buffers, device arrays, streams that run
work in order, and events recorded on a stream. On the CPU a "stream" is a
queue of work that runs either only when something waits for it
(``mode="deferred"``: a copy whose source is overwritten before anyone waited
for it reads the new bytes, so a missing wait shows as wrong values, every
time) or on a worker thread (``mode="thread"``: copies really overlap the
consumer, in stream order, with an optional delay per copy).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Literal, Protocol

import numpy as np


class Event(Protocol):
    """A point in a stream's work."""

    def query(self) -> bool:
        """Whether the stream has run everything enqueued before this event."""
        ...

    def synchronize(self) -> None:
        """Block the host until :meth:`query` is true."""
        ...


class Stream(Protocol):
    """Work that runs in the order it was enqueued."""

    def record(self) -> Event:
        """An event after everything enqueued so far."""
        ...

    def wait(self, event: Event) -> None:
        """Later work on this stream starts after ``event`` (the host does not block)."""
        ...


class Backend(Protocol):
    """Memory, streams and copies for one device."""

    name: str

    @property
    def xp(self) -> Any:
        """The array namespace of device arrays (``numpy`` or ``cupy``)."""
        ...

    def pinned_empty(self, nbytes: int) -> np.ndarray:
        """A page-locked host buffer of ``nbytes`` (uint8): what an asynchronous copy reads from."""
        ...

    def device_empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        """An uninitialised device array."""
        ...

    def copy_stream(self) -> Stream:
        """A stream for host-to-device copies, separate from the consumer's."""
        ...

    def consumer_stream(self) -> Stream:
        """The stream the consumer computes on now (a training step's kernels)."""
        ...

    def copy_to_device(self, dst: Any, src: np.ndarray, stream: Stream) -> None:
        """Enqueue ``dst[...] = src`` on ``stream``; returns before the copy runs."""
        ...

    def run_on(self, stream: Stream, work: Callable[[], Any]) -> Any:
        """``work()`` with its device work ordered after everything enqueued on ``stream``."""
        ...

    def to_host(self, array: Any) -> np.ndarray:
        """A numpy copy of a device array (for checks)."""
        ...

    def close(self) -> None:
        """Release streams and threads."""
        ...


# -- the CPU backend ---------------------------------------------------------------------------------


class HostEvent:
    """Position ``mark`` in a :class:`HostStream`."""

    def __init__(self, stream: HostStream, mark: int) -> None:
        self._stream = stream
        self._mark = mark

    def query(self) -> bool:
        """Whether the stream has run everything enqueued before this event."""
        return self._stream.completed >= self._mark

    def synchronize(self) -> None:
        """Block until the stream has run everything before this event (running it here in deferred mode)."""
        self._stream.run_until(self._mark)

    def __repr__(self) -> str:
        return f"HostEvent(mark={self._mark}, done={self.query()})"


class HostStream:
    """A FIFO of callables standing in for a CUDA stream (see the module docstring for the modes)."""

    def __init__(self, *, mode: Literal["deferred", "thread"] = "deferred", delay_s: float = 0.0) -> None:
        if mode not in ("deferred", "thread"):
            raise ValueError(f"mode must be 'deferred' or 'thread', got {mode!r}")
        self.mode = mode
        self.delay_s = float(delay_s)
        self._ops: deque[Callable[[], None]] = deque()
        self._cond = threading.Condition()
        self.enqueued = 0
        self.completed = 0
        self._closed = False
        self._error: BaseException | None = None
        # The deferred mode runs work on whichever thread waits: one at a time, in order.
        self._run_lock = threading.RLock()
        self._worker: threading.Thread | None = None
        if mode == "thread":
            self._worker = threading.Thread(target=self._work, name="insitu-gpu-host-stream", daemon=True)
            self._worker.start()

    def enqueue(self, op: Callable[[], None]) -> None:
        """Append ``op`` to the stream; a RuntimeError once the stream is closed."""
        with self._cond:
            if self._closed:
                raise RuntimeError("the stream is closed")
            self._ops.append(op)
            self.enqueued += 1
            self._cond.notify_all()

    def record(self) -> HostEvent:
        """An event after everything enqueued so far."""
        with self._cond:
            return HostEvent(self, self.enqueued)

    def wait(self, event: Event) -> None:
        # Cross-stream ordering: the op that follows runs only once the other stream reached `event`.
        """Later work on this stream starts after ``event`` (the host does not block)."""
        self.enqueue(event.synchronize)

    def run_until(self, mark: int) -> None:
        """Block until ``mark`` ops have run (running them here in deferred mode)."""
        if self._worker is None:
            # Checked before taking the run lock: another thread may be running a later op that
            # waits on the caller (a copy stream waiting on this one), and ops up to ``mark`` are done.
            if self.completed >= mark:
                return
            with self._run_lock:
                while self.completed < mark:
                    with self._cond:
                        op = self._ops.popleft()
                    self._run(op)
            return
        with self._cond:
            while self.completed < mark and self._error is None:
                self._cond.wait(timeout=1.0)
            if self._error is not None:
                raise RuntimeError("a copy on the host stream failed") from self._error

    def synchronize(self) -> None:
        """Block until everything enqueued so far has run."""
        self.run_until(self.enqueued)

    def _run(self, op: Callable[[], None]) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)
        op()
        with self._cond:
            self.completed += 1
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._ops and not self._closed:
                    self._cond.wait()
                if not self._ops:
                    return
                op = self._ops.popleft()
            try:
                self._run(op)
            except BaseException as exc:  # surfaced to whoever waits on this stream
                with self._cond:
                    self._error = exc
                    self._cond.notify_all()
                return

    def close(self) -> None:
        """Refuse further work and stop the worker thread (waiting up to 5 s for it)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._worker is not None and self._worker is not threading.current_thread():
            self._worker.join(timeout=5.0)


class HostBackend:
    """numpy "device": the stage's code path on the CPU, for tests and ``--dry-run``.

    ``mode`` and ``delay_s`` configure the copy stream (see
    :class:`HostStream`). The consumer stream is the host itself: work the
    consumer does is never deferred, so handing a batch over waits for its
    copies (where CUDA would make the consumer's stream wait instead).
    """

    name = "numpy"

    def __init__(self, *, mode: Literal["deferred", "thread"] = "deferred", delay_s: float = 0.0) -> None:
        self._mode = mode
        self._delay_s = delay_s
        self._streams: list[HostStream] = []
        self._consumer = HostStream(mode="deferred")

    @property
    def xp(self) -> Any:
        """``numpy``: host "device" arrays are numpy arrays."""
        return np

    def pinned_empty(self, nbytes: int) -> np.ndarray:
        """A host buffer of ``nbytes`` (uint8), standing in for page-locked memory."""
        return np.empty(int(nbytes), dtype=np.uint8)

    def device_empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        """An uninitialised numpy array."""
        return np.empty(shape, dtype=dtype)

    def copy_stream(self) -> HostStream:
        """A new host stream for copies, closed with the backend."""
        stream = HostStream(mode=self._mode, delay_s=self._delay_s)
        self._streams.append(stream)
        return stream

    def consumer_stream(self) -> HostStream:
        """The backend's one consumer stream."""
        return self._consumer

    def copy_to_device(self, dst: Any, src: np.ndarray, stream: Stream) -> None:
        """Enqueue ``dst[...] = src`` on ``stream`` (a :class:`HostStream`); returns before the copy runs."""
        if not isinstance(stream, HostStream):
            raise TypeError(f"HostBackend copies on its own streams, got {type(stream).__name__}")
        stream.enqueue(lambda: np.copyto(dst, src))

    def run_on(self, stream: Stream, work: Callable[[], Any]) -> Any:
        """``work()``, run on the host once everything enqueued on ``stream`` has run."""
        stream.record().synchronize()  # the host computes now, so everything before must have run
        return work()

    def to_host(self, array: Any) -> np.ndarray:
        """A numpy copy of the array."""
        return np.array(array, copy=True)

    def close(self) -> None:
        """Close every copy stream the backend made."""
        for stream in self._streams:
            stream.close()
        self._streams.clear()

    def __repr__(self) -> str:
        return f"HostBackend(mode={self._mode!r}, delay_s={self._delay_s})"


__all__ = ["Backend", "Event", "HostBackend", "HostEvent", "HostStream", "Stream"]
