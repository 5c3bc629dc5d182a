"""GPU staging for insitu: a device stage after gather (pinned ring, overlapped copies, device transforms).

Nothing here imports CuPy at import time; without CuPy or a GPU the CUDA
entry points raise an ImportError naming what to install, and the numpy
backend (:class:`HostBackend`) runs the same stage on the CPU.
"""

from __future__ import annotations

from insitu_gpu.backend import Backend, HostBackend
from insitu_gpu.device import CupyDevice, cupy_device, to_device
from insitu_gpu.device_transforms import SUPPORTED as DEVICE_TRANSFORMS
from insitu_gpu.device_transforms import DeviceChain
from insitu_gpu.stage import DeviceBatch, DeviceStage, device_stage

__all__ = [
    "DEVICE_TRANSFORMS",
    "Backend",
    "CupyDevice",
    "DeviceBatch",
    "DeviceChain",
    "DeviceStage",
    "HostBackend",
    "cupy_device",
    "device_stage",
    "to_device",
]
