from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from insitu import Batch
from insitu.testing import assert_entry_point, assert_registers
from insitu_gpu import CupyDevice, cupy_device, to_device


def _gpu_available() -> bool:
    if importlib.util.find_spec("cupy") is None:
        return False
    import cupy

    try:
        return int(cupy.cuda.runtime.getDeviceCount()) > 0
    except Exception:  # no driver: CuPy raises its own CUDA runtime error
        return False


needs_gpu = pytest.mark.skipif(not _gpu_available(), reason="needs CuPy and a CUDA device")


def test_plugin_registers_the_devices() -> None:
    assert_registers("insitu_gpu.plugin", "devices", ["cupy", "cuda", "host"], exact=True)
    assert_entry_point("gpu", "insitu_gpu.plugin")


def test_importing_the_plugin_does_not_import_cupy() -> None:
    code = (
        "import sys, insitu, insitu_gpu, insitu_gpu.plugin, insitu_gpu.stage, insitu_gpu.device_transforms; "
        "sys.exit(any(m in sys.modules for m in ('cupy', 'cupyx', 'kvikio', 'torch', 'jax')))"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_without_cupy_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` fail even where it is installed
    batch = Batch({"x": np.ones((2, 3), "float32")}, np.arange(2))
    with pytest.raises(ImportError, match=r"pip install cupy-cuda12x"):
        cupy_device()
    with pytest.raises(ImportError, match=r"pip install cupy-cuda12x"):
        to_device(batch)


@needs_gpu
@pytest.mark.gpu
def test_to_device_copies_values_to_the_gpu() -> None:
    import cupy

    x = np.arange(12, dtype="float32").reshape(3, 4)
    out = to_device(Batch({"x": x}, np.arange(3)))
    assert isinstance(out["x"], cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(out["x"]), x)


@needs_gpu
@pytest.mark.gpu
def test_device_id_out_of_range_is_rejected() -> None:
    with pytest.raises(ValueError, match="device_id"):
        CupyDevice(device_id=10_000)
