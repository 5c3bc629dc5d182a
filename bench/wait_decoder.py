"""A decoder that stands for a decode of known length: it waits, without the GIL, then decodes.

``bench/scaling.py`` replaces the cost of decoding with ``time.sleep`` (which
releases the GIL, as zstd, blosc and numpy copies do) so that decode threads
beyond the machine's cores can still overlap their "decoding": with ``T``
threads and a wait of ``d`` seconds per chunk, an engine with no serial cost
would deliver ``T / d`` chunks/s whatever the core count. Where the engine's
own GIL-holding work per chunk cannot keep up, throughput stops following
``T``: that plateau is its serial limit.

The decoder is registered through insitu's plugin registry like any other
(``insitu_register_decoders``, name ``"wait"``). :func:`entry_point_dir` writes
the distribution metadata that makes this module an ``insitu`` entry point for
an interpreter that puts that folder and this module's folder on ``sys.path``;
the wait is read from ``INSITU_BENCH_WAIT_S`` (seconds) when the decoder is made.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from insitu.plugins.hookspecs import RegisterDecoder, hookimpl

WAIT_ENV = "INSITU_BENCH_WAIT_S"
DECODER_NAME = "wait"
_DIST = "insitu_bench_wait-0.dist-info"
_decoded = 0  # chunks decoded by waiting decoders in this process
_decoded_lock = threading.Lock()


class WaitingDecoder:
    """Wraps a real chunk decoder: each ``decode`` first sleeps ``wait_s``; everything else
    (``nbytes``, ``decodes_into``, ``dtype``...) is the wrapped decoder's."""

    def __init__(self, inner: Any, wait_s: float) -> None:
        self._inner = inner
        self.wait_s = wait_s

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def decode(self, raw: Any, out: Any = None) -> Any:
        """Wait ``wait_s`` (the GIL released), then decode ``raw`` as the wrapped decoder does."""
        global _decoded
        time.sleep(self.wait_s)
        with _decoded_lock:
            _decoded += 1
        return self._inner.decode(raw, out)


def decoded() -> int:
    """Chunks decoded by waiting decoders in this process so far (a run checks the engine used them:
    a factory that declined would leave the array to zarr's pipeline, silently)."""
    return _decoded


def waiting_decoder(geom: Any) -> WaitingDecoder | None:
    """The decoder factory registered as ``"wait"``: numcodecs' decoder for ``geom`` behind the wait
    (None when numcodecs cannot decode the array)."""
    from insitu.store.codecs import numcodecs_decoder

    inner = numcodecs_decoder(geom)
    return None if inner is None else WaitingDecoder(inner, float(os.environ.get(WAIT_ENV, "0")))


@hookimpl
def insitu_register_decoders(register: RegisterDecoder) -> None:
    """Register the waiting decoder (select it with ``InSituDataset(..., decoders=["wait"])``)."""
    register(DECODER_NAME, waiting_decoder)


def entry_point_dir(folder: Path) -> Path:
    """Write into ``folder`` the metadata of a distribution whose ``insitu`` entry point is this
    module; returns ``folder``, to put on ``sys.path`` with this module's own folder."""
    dist = folder / _DIST
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: insitu-bench-wait\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[insitu]\nbench-wait = {__name__}\n")
    return folder
