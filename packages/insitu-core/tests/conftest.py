"""Fixtures shared by the engine tests: stores of every layout the engine must read."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from zarr.abc.store import ByteRequest
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import LocalStore, WrapperStore

from insitu.testing import RecordingStore

CountingStore = RecordingStore  # the kit's recording wrapper: .gets, .reads, .chunk_gets()


class FaultyStore(WrapperStore[Any]):
    """Corrupts or fails chosen keys."""

    def __init__(
        self, store: Any, corrupt: set[str] = frozenset(), fail: dict[str, BaseException] | None = None
    ):
        super().__init__(store)
        self.corrupt = set(corrupt)
        self.fail = dict(fail or {})
        self.calls: collections.Counter[str] = collections.Counter()

    def _with_store(self, store: Any) -> FaultyStore:
        return FaultyStore(store, self.corrupt, self.fail)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self.calls[key] += 1
        if key in self.fail:
            exc = self.fail[key]
            if isinstance(exc, list):
                if exc:
                    raise exc.pop(0)
            else:
                raise exc
        buf = await self._store.get(key, prototype, byte_range)
        if key in self.corrupt and buf is not None:
            return prototype.buffer.from_bytes(b"\x00garbage" * 4)
        return buf


def field(n: int, shape: tuple[int, ...], seed: int = 0, dtype: str = "f4") -> np.ndarray:
    """A smooth-plus-noise field whose values identify their sample index."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(shape).astype(dtype)
    t = np.arange(n, dtype=dtype).reshape((n,) + (1,) * len(shape))
    return (t * 10 + base).astype(dtype)


def write_array(
    root: Path | Any,
    name: str,
    data: np.ndarray,
    chunks: tuple[int, ...],
    *,
    zarr_format: int = 3,
    shards: tuple[int, ...] | None = None,
    compressor: Any = "zstd",
    **kwargs: Any,
) -> zarr.Array:
    group = zarr.open_group(root, mode="a", zarr_format=zarr_format)
    if compressor == "zstd":
        compressors: Any = zarr.codecs.ZstdCodec(level=1) if zarr_format == 3 else {"id": "zstd", "level": 1}
    else:
        compressors = compressor
    arr = group.create_array(
        name,
        shape=data.shape,
        chunks=chunks,
        shards=shards,
        dtype=data.dtype,
        compressors=compressors,
        **kwargs,
    )
    arr[...] = data
    return arr


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A plugin registry rebuilt from scratch, with no plugin-loading env vars set."""
    from insitu.plugins.registry import BLOCK_ENV, DISABLE_AUTOLOAD_ENV, reset_registry

    monkeypatch.delenv(DISABLE_AUTOLOAD_ENV, raising=False)
    monkeypatch.delenv(BLOCK_ENV, raising=False)
    reset_registry()
    yield
    reset_registry()


@pytest.fixture
def era5(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """Two variables over (time=60, lat=6, lon=10), four samples per chunk, plus a finer-chunked one."""
    t2m = field(60, (6, 10), seed=1)
    u10 = field(60, (6, 10), seed=2) * -1
    write_array(tmp_path, "t2m", t2m, (4, 6, 10))
    write_array(tmp_path, "u10", u10, (3, 3, 5))  # other chunking, several chunks per row
    return tmp_path, {"t2m": t2m, "u10": u10}


StoreFactory = Callable[[Path], Any]


@pytest.fixture(params=["local", "wrapped"])
def open_local(request: pytest.FixtureRequest) -> StoreFactory:
    """Local files read in decode threads ('local') or through async Store.get ('wrapped')."""
    if request.param == "local":
        return lambda p: LocalStore(p, read_only=True)
    return lambda p: CountingStore(LocalStore(p, read_only=True))


def finishes(work: Callable[[], Any], within_s: float = 60.0, hang: str = "a deadlock") -> Any:
    """Run ``work`` in a thread; its result, or its exception re-raised, or a failure naming
    ``hang`` if it is still running after ``within_s`` (far beyond what the work takes, even on a
    loaded machine)."""
    import threading

    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = work()
        except BaseException as exc:
            out["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(within_s)
    assert not t.is_alive(), f"still running after {within_s} s: {hang}"
    if "error" in out:
        raise out["error"]
    return out["value"]
