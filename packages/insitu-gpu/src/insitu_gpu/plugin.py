"""insitu plugin: registers the CuPy device (CuPy itself loads when the device is built)."""

from __future__ import annotations

from insitu.plugins.hookspecs import RegisterDevice, hookimpl
from insitu_gpu.device import cupy_device


@hookimpl
def insitu_register_devices(register: RegisterDevice) -> None:
    """``cupy``: ``cupy_device(device_id=0)`` builds a ``CupyDevice``."""
    register("cupy", cupy_device)
