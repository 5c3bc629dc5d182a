"""GPU staging for insitu: copy batches to a CUDA device through CuPy."""

from __future__ import annotations

from insitu_gpu.device import CupyDevice, cupy_device, to_device

__all__ = ["CupyDevice", "cupy_device", "to_device"]
