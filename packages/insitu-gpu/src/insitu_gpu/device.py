"""Copy insitu batches to a CUDA device with CuPy.

CuPy is imported on first use, never at module import: the plugin registry
imports this module on machines without a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

INSTALL_HINT = "pip install cupy-cuda12x (CUDA 12; cupy-cuda13x for CUDA 13, cupy-cuda11x for CUDA 11)"


def import_cupy() -> Any:
    """The ``cupy`` module, or an ``ImportError`` that says what to install or what is missing."""
    try:
        import cupy
    except ImportError as exc:
        raise ImportError(f"insitu-gpu needs CuPy: {INSTALL_HINT}") from exc
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError without a driver; its class needs a working CuPy
        raise ImportError(
            f"CuPy is installed but CUDA is not usable ({exc}); check the driver and {INSTALL_HINT}"
        ) from exc
    if count == 0:
        raise ImportError("CuPy is installed but no CUDA device is visible (check CUDA_VISIBLE_DEVICES)")
    return cupy


class CupyDevice:
    """Copies batches to CUDA device ``device_id``; call it (or ``to_device``) on a batch."""

    def __init__(self, device_id: int = 0) -> None:
        self._cupy = import_cupy()
        count = int(self._cupy.cuda.runtime.getDeviceCount())
        if not 0 <= device_id < count:
            raise ValueError(f"device_id={device_id} but {count} CUDA device(s) are visible")
        self.device_id = device_id

    def to_device(self, batch: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """``{label: cupy.ndarray}`` on this device (a host-to-device copy per label)."""
        with self._cupy.cuda.Device(self.device_id):
            return {label: self._cupy.asarray(array) for label, array in batch.items()}

    __call__ = to_device

    def __repr__(self) -> str:
        return f"CupyDevice(device_id={self.device_id})"


def cupy_device(*, device_id: int = 0) -> CupyDevice:
    """Factory registered as device ``"cupy"``; raises ``ImportError`` without CuPy or a GPU."""
    return CupyDevice(device_id)


def to_device(batch: Mapping[str, np.ndarray], *, device_id: int = 0) -> dict[str, Any]:
    """One batch as CuPy arrays on CUDA device ``device_id``."""
    return CupyDevice(device_id).to_device(batch)


__all__ = ["INSTALL_HINT", "CupyDevice", "cupy_device", "import_cupy", "to_device"]
