"""The pinned ring: allocated once from the first batch, reused in turn, bounded, never rewritten under a copy."""

from __future__ import annotations

import numpy as np
import pytest

from insitu_gpu.backend import HostBackend, HostStream
from insitu_gpu.ring import ALIGN, PinnedRing


def batch(rows: int, fill: float) -> dict[str, np.ndarray]:
    return {
        "x": np.full((rows, 5, 7), fill, dtype="float32"),
        "y": np.full((rows,), int(fill), dtype=">i4"),  # big-endian: staged in native order
    }


def test_slots_are_allocated_once_and_reused_in_turn() -> None:
    ring = PinnedRing(HostBackend(), slots=3)
    buffers = []
    for i in range(12):
        slot = ring.stage(batch(4, float(i)))
        assert slot.index == i % 3
        assert slot.buffer is not None
        buffers.append(slot.buffer)
        np.testing.assert_array_equal(slot.views["x"], np.full((4, 5, 7), float(i), "float32"))
        assert slot.views["y"].dtype == np.dtype("int32")
        assert slot.views["y"].tolist() == [i] * 4
    assert ring.allocations == 3
    assert all(buffers[i] is buffers[i % 3] for i in range(12))
    # Each label starts on an aligned boundary; the slot holds one batch and nothing more.
    assert ring.nbytes == 3 * (-(-4 * 5 * 7 * 4 // ALIGN) * ALIGN + ALIGN)


def test_a_smaller_last_batch_reuses_the_slot_and_a_larger_one_regrows_it_once() -> None:
    ring = PinnedRing(HostBackend(), slots=2)
    for i in range(4):
        ring.stage(batch(4, float(i)))
    ring.stage(batch(1, 9.0))
    assert ring.allocations == 2
    big = ring.stage(batch(8, 5.0))
    assert ring.allocations == 3
    np.testing.assert_array_equal(big.views["x"], np.full((8, 5, 7), 5.0, "float32"))
    for i in range(4):  # the other slot regrows to the new size once; after that, no allocation
        ring.stage(batch(8, float(i)))
    assert ring.allocations == 4
    bound = 2 * (-(-8 * 5 * 7 * 4 // ALIGN) * ALIGN + ALIGN)
    assert ring.nbytes == bound


def test_a_slot_is_rewritten_only_after_the_copy_that_reads_it() -> None:
    ring = PinnedRing(HostBackend(), slots=1)
    stream = HostStream(mode="deferred")
    seen: list[float] = []
    first = ring.stage(batch(2, 1.0))
    stream.enqueue(lambda: seen.append(float(first.views["x"][0, 0, 0])))
    ring.hold(first, stream.record())
    ring.stage(batch(2, 2.0))  # must run the pending copy of 1.0 before overwriting
    assert seen == [1.0]
    assert ring.waits == 1


def test_slots_must_be_positive() -> None:
    with pytest.raises(ValueError, match="pinned slots"):
        PinnedRing(HostBackend(), slots=0)


def test_large_arrays_are_copied_in_parallel_pieces_with_the_same_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import insitu_gpu.ring as ring_module

    monkeypatch.setattr(ring_module, "SPLIT_BYTES", 1024)  # small pieces, so a small test splits
    ring = PinnedRing(HostBackend(), slots=2, copy_threads=3)
    rng = np.random.default_rng(0)
    for _ in range(4):
        arrays = {"a": rng.normal(size=(30, 64)).astype("float32"), "b": rng.integers(0, 9, size=(30, 3))}
        slot = ring.stage(arrays)
        for label, values in arrays.items():
            np.testing.assert_array_equal(slot.views[label], values)
    assert len(ring_module._split(slot.views["a"], arrays["a"], 3)) == 3
    ring.close()
