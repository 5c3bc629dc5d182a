"""``jax_iterator(view, device=...)``: batches on one device, through insitu-gpu's stage when installed.

For a GPU device with insitu-gpu installed, each batch is copied through the
stage's pinned ring on its own CUDA stream and imported with
``jax.dlpack.from_dlpack`` (no copy; the DLPack hand-off orders JAX's stream
after the copy). Otherwise, or for a CPU device, it is ``jax.device_put``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from insitu.plugin_api import ConfigError
from insitu_jax.adapter import import_jax


def resolve_device(device: Any) -> Any:
    """A ``jax.Device`` from a device, an index into ``jax.devices()``, or ``"gpu:1"``/``"cuda:1"``/``"cpu"``."""
    jax = import_jax()
    if isinstance(device, int) and not isinstance(device, bool):
        return jax.devices()[device]
    if isinstance(device, str):
        platform, _, index = device.partition(":")
        platform = "gpu" if platform == "cuda" else platform
        return jax.devices(platform)[int(index or 0)]
    if hasattr(device, "platform"):
        return device
    raise ConfigError(f"device must be a jax.Device, an index or a name like 'gpu:0', got {device!r}")


def device_batches(view: Any, device: Any) -> Iterator[dict[str, Any]]:
    """``{label: jax.Array}`` on ``device`` (a ``jax.Device``) for each batch of ``view``, in order."""
    jax = import_jax()
    stage = _stage(view, device)
    if stage is None:
        for batch in view:
            yield jax.device_put(dict(batch.items()), device)
        return
    try:
        for staged in stage:
            yield {label: jax.dlpack.from_dlpack(array) for label, array in staged.items()}
    finally:
        stage.close()


def _stage(view: Any, device: Any) -> Any | None:
    if getattr(device, "platform", None) != "gpu":
        return None
    try:
        from insitu_gpu import device_stage
    except ImportError:
        return None
    index = getattr(device, "local_hardware_id", None)
    # prefetch=0: jax_iterator already reads `prefetch` batches ahead and counts them for resume.
    try:
        return device_stage(view, device_id=int(index if index is not None else device.id), prefetch=0)
    except ImportError:  # insitu-gpu without a usable CuPy: device_put still works
        return None


__all__ = ["device_batches", "resolve_device"]
