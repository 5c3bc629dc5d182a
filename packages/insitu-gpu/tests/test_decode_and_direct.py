"""Without nvCOMP or kvikio: "not available" with the reason, and the CPU path visible and correct."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from insitu_gpu import DeviceStage, HostBackend
from insitu_gpu.decode import array_codec, decode_paths, gpu_decoder, nvcomp_support
from insitu_gpu.direct import DirectReader


@pytest.fixture
def no_gpu_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("nvidia.nvcomp", "kvikio", "kvikio.nvcomp_codec", "kvikio.defaults"):
        monkeypatch.setitem(sys.modules, name, None)  # `import name` raises ImportError


@pytest.mark.usefixtures("no_gpu_packages")
def test_without_nvcomp_gpu_decode_is_not_available_and_says_what_to_install() -> None:
    support = nvcomp_support()
    assert not support.available
    assert support.describe().startswith("not available (")
    assert "pip install nvidia-nvcomp-cu12" in support.reason
    assert gpu_decoder("zstd", support) is None


@pytest.mark.usefixtures("no_gpu_packages")
def test_the_stage_reports_cpu_decode_per_array(dataset: Any) -> None:
    with DeviceStage(dataset.train) as stage:
        paths = stage.stats["decode"]
    assert set(paths) == {"t2m", "z"}
    assert all(p.startswith("cpu (zstd; GPU decode not available") for p in paths.values())


def test_codec_names_come_from_v2_and_v3_metadata() -> None:
    assert array_codec({"compressor": {"id": "lz4"}}) == "lz4"
    assert array_codec({"codecs": [{"name": "bytes"}, {"name": "zstd"}]}) == "zstd"
    sharded = {
        "codecs": [
            {"name": "sharding_indexed", "configuration": {"codecs": [{"name": "bytes"}, {"name": "gzip"}]}}
        ]
    }
    assert array_codec(sharded) == "gzip"
    assert array_codec({"codecs": [{"name": "bytes"}]}) is None


def test_paths_with_nvcomp_present_name_the_codec() -> None:
    from insitu_gpu.decode import NvcompSupport

    class Geom:
        def __init__(self, codec: str) -> None:
            self.metadata = {"codecs": [{"name": "bytes"}, {"name": codec}]}

    paths = decode_paths({"a": Geom("zstd"), "b": Geom("blosc")}, NvcompSupport("nvidia.nvcomp", ""))
    assert "nvCOMP could decode it" in paths["a"]
    assert paths["b"] == "cpu (blosc has no nvCOMP decoder)"


@pytest.mark.usefixtures("no_gpu_packages")
def test_direct_reads_fall_back_to_host_reads_with_the_same_values(tmp_path: Path) -> None:
    values = np.arange(2 * 3 * 5, dtype="float32").reshape(2, 3, 5)
    path = tmp_path / "slab.bin"
    path.write_bytes(b"\0" * 64 + values.tobytes())
    reader = DirectReader(HostBackend())
    assert reader.path == "host"
    got = reader.read(path, (2, 3, 5), "float32", offset=64)
    np.testing.assert_array_equal(np.asarray(got), values)
    assert reader.reads == {"kvikio": 0, "host": 1}
    with pytest.raises(OSError, match="read 120 of 240 bytes"):
        reader.read(path, (4, 3, 5), "float32", offset=64)
    with pytest.raises(ImportError, match="kvikio"):
        DirectReader(HostBackend(), use_kvikio=True)
