"""GPU decode through nvCOMP, where it is installed; CPU decode, said so, everywhere else.

Two providers are looked for, in order: the ``nvidia-nvcomp-cu12`` /
``-cu13`` wheels (``nvidia.nvcomp``) and kvikio's numcodecs-style codec
(``kvikio.nvcomp_codec``). Neither is required: without them
:func:`nvcomp_support` says "not available" with the reason, and every array
is decoded on the CPU by the engine, which :func:`decode_paths` reports per
array (``DeviceStage.stats["decode"]``).

Scope today: the engine decodes into host pool slots (its decoder hook fills
numpy buffers), so GPU decode is not wired into a dataset's reads; this
module decodes stored chunk bytes straight to device arrays, which is what
``bench/gpu_check.py`` measures against the CPU codec.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Zarr codec name -> nvCOMP algorithm name (formats nvCOMP decodes as the CPU codecs write them).
NVCOMP_ALGORITHMS = {"zstd": "Zstd", "lz4": "LZ4", "gzip": "Deflate", "zlib": "Deflate"}


@dataclass(frozen=True)
class NvcompSupport:
    """Whether GPU decode is possible here, through which provider, and why not when it is not."""

    provider: str | None
    reason: str

    @property
    def available(self) -> bool:
        """Whether a provider of nvCOMP decode was found."""
        return self.provider is not None

    def describe(self) -> str:
        """One line for reports: the provider, or why GPU decode is not available."""
        return f"nvCOMP via {self.provider}" if self.available else f"not available ({self.reason})"


def nvcomp_support() -> NvcompSupport:
    """Probe the providers (imports them; cheap when they are absent)."""
    reasons = []
    for provider in ("nvidia.nvcomp", "kvikio.nvcomp_codec"):
        try:
            importlib.import_module(provider)
        except ImportError as exc:
            reasons.append(f"{provider}: {exc.__class__.__name__}")
            continue
        except Exception as exc:  # a provider present but broken (no driver) must not break the stage
            reasons.append(f"{provider}: {exc}")
            continue
        return NvcompSupport(provider, "")
    return NvcompSupport(None, "; ".join(reasons) + " (pip install nvidia-nvcomp-cu12 for GPU decode)")


def array_codec(metadata: Mapping[str, Any]) -> str | None:
    """The compressor of a Zarr array's metadata (v2 ``compressor`` or v3 bytes-to-bytes codec)."""
    compressor = metadata.get("compressor")
    if isinstance(compressor, Mapping):
        return str(compressor.get("id"))
    for codec in metadata.get("codecs", ()) or ():
        name = codec.get("name") if isinstance(codec, Mapping) else str(codec)
        if name == "sharding_indexed" and isinstance(codec, Mapping):
            return array_codec({"codecs": (codec.get("configuration") or {}).get("codecs", ())})
        if name not in (None, "bytes", "transpose", "crc32c", "endian"):
            return str(name)
    return None


def decode_paths(geometries: Mapping[str, Any], support: NvcompSupport | None = None) -> dict[str, str]:
    """Per label, where its chunks are decoded and why (see the module docstring)."""
    support = support if support is not None else nvcomp_support()
    paths: dict[str, str] = {}
    for label, geom in geometries.items():
        codec = array_codec(getattr(geom, "metadata", None) or {})
        if codec is None:
            paths[label] = "cpu (uncompressed: nothing to decode)"
        elif not support.available:
            paths[label] = f"cpu ({codec}; GPU decode {support.describe()})"
        elif codec not in NVCOMP_ALGORITHMS:
            paths[label] = f"cpu ({codec} has no nvCOMP decoder)"
        else:
            paths[label] = (
                f"cpu ({codec}: nvCOMP could decode it, but the engine decodes into host pool slots)"
            )
    return paths


def gpu_decoder(codec: str, support: NvcompSupport | None = None) -> Callable[[bytes], Any] | None:
    """``decode(chunk_bytes) -> cupy uint8 array`` on the GPU, or None where it cannot be done."""
    support = support if support is not None else nvcomp_support()
    algorithm = NVCOMP_ALGORITHMS.get(codec)
    if algorithm is None or not support.available:
        return None
    import cupy

    if support.provider == "nvidia.nvcomp":
        nvcomp = importlib.import_module("nvidia.nvcomp")
        decoder = nvcomp.Codec(algorithm=algorithm)

        def decode_nvcomp(data: bytes) -> Any:
            compressed = nvcomp.as_array(cupy.asarray(np.frombuffer(data, dtype=np.uint8)))
            return cupy.asarray(decoder.decode(compressed)).view(cupy.uint8)

        return decode_nvcomp
    batch = importlib.import_module("kvikio.nvcomp_codec").NvCompBatchCodec(codec)

    def decode_kvikio(data: bytes) -> Any:
        (out,) = batch.decode_batch([cupy.asarray(np.frombuffer(data, dtype=np.uint8))])
        return cupy.asarray(out).view(cupy.uint8)

    return decode_kvikio


__all__ = [
    "NVCOMP_ALGORITHMS",
    "NvcompSupport",
    "array_codec",
    "decode_paths",
    "gpu_decoder",
    "nvcomp_support",
]
