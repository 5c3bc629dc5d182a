"""insitu plugin: registers the GPU devices (CuPy itself loads when one is built).

The only module of insitu-gpu that imports the hook specifications.
"""

from __future__ import annotations

from typing import Any

from insitu.plugin_api import RegisterDevice, hookimpl
from insitu_gpu.device import cupy_device
from insitu_gpu.stage import DeviceStage, device_stage


def host_stage(view: Any, **options: Any) -> DeviceStage:
    """The device stage on the CPU (numpy backend): the GPU code path, for tests and dry runs."""
    return DeviceStage(view, **options)


@hookimpl
def insitu_register_devices(register: RegisterDevice) -> None:
    """``cupy`` (batch copier), ``cuda`` (the device stage on a GPU), ``host`` (the same stage on numpy)."""
    register("cupy", cupy_device)
    register("cuda", device_stage)
    register("host", host_stage)
