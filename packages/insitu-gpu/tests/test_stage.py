"""The device stage on the CPU backend: order, coverage, overlap, buffer reuse, resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tests_support import open_dataset

from insitu_gpu import DeviceBatch, DeviceStage, HostBackend
from insitu_gpu.ring import PinnedRing


def host_pass(view: Any) -> list[dict[str, Any]]:
    """What the view yields without the stage: sample indices and values of every batch."""
    return [
        {"indices": b.sample_indices.copy(), "index": b.index, **{k: np.array(v) for k, v in b.items()}}
        for b in view
    ]


def assert_same_pass(device: list[DeviceBatch], host: list[dict[str, Any]]) -> None:
    assert [b.index for b in device] == [h["index"] for h in host]
    for d, h in zip(device, host, strict=True):
        np.testing.assert_array_equal(d.sample_indices, h["indices"])
        for label in ("t2m", "z"):
            np.testing.assert_array_equal(np.asarray(d[label]), h[label])
            assert d[label].dtype == h[label].dtype


@pytest.mark.parametrize("prefetch", [0, 1, 3])
@pytest.mark.parametrize("mode", ["deferred", "thread"])
def test_every_batch_once_in_view_order_with_its_values(store_path: Path, prefetch: int, mode: str) -> None:
    with open_dataset(store_path) as ds:
        ds.set_epoch(2)
        expected = host_pass(ds.train)
        # A copy stream that lags behind the host: copies really overlap the next batch's staging.
        stage = DeviceStage(ds.train, backend=HostBackend(mode=mode, delay_s=0.002), prefetch=prefetch)  # type: ignore[arg-type]
        with stage:
            got = list(stage)
        assert_same_pass(got, expected)
        seen = np.concatenate([b.sample_indices for b in got])
        assert sorted(seen.tolist()) == list(range(40))  # every sample once


def test_few_slots_many_in_flight_still_deliver_correct_values(store_path: Path) -> None:
    # One pinned slot for three batches staged ahead: each staging must wait for the previous copy.
    with open_dataset(store_path) as ds:
        expected = host_pass(ds.train)
        with DeviceStage(ds.train, prefetch=3, pinned_slots=1) as stage:
            got = list(stage)
            assert stage.stats["pinned_waits"] > 0
        assert_same_pass(got, expected)


def test_without_the_ring_wait_the_same_run_delivers_wrong_values(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The test above has teeth: with the wait removed, a deferred copy reads the next batch's bytes.
    def careless_hold(self: PinnedRing, slot: Any, copied: Any) -> None:
        slot.busy = None

    monkeypatch.setattr(PinnedRing, "hold", careless_hold)
    with open_dataset(store_path) as ds:
        expected = host_pass(ds.train)
        with DeviceStage(ds.train, prefetch=3, pinned_slots=1) as stage:
            got = list(stage)
    with pytest.raises(AssertionError):
        assert_same_pass(got, expected)


def test_pinned_ring_and_device_buffers_are_bounded_and_reused(store_path: Path) -> None:
    with open_dataset(store_path, drop_last=True) as ds, DeviceStage(ds.train, prefetch=1) as stage:
        n = 0
        for batch in stage:
            n += 1
            del batch  # the consumer keeps nothing: buffers can be recycled
        stats = stage.stats
    assert n == 6
    assert stats["batches"] == n
    assert stats["pinned_slots"] == 2
    assert stats["pinned_allocations"] == 2
    assert stats["device_allocations"] <= 3  # prefetch + 2
    assert stats["device_allocations"] + stats["device_reuses"] == n
    assert stats["device_reuses"] >= n - 3


def test_batches_the_consumer_keeps_are_never_overwritten(store_path: Path) -> None:
    with open_dataset(store_path) as ds:
        expected = host_pass(ds.train)
        with DeviceStage(ds.train, prefetch=1, device_sets=1) as stage:
            kept = list(stage)  # every batch held at once: no buffer may be recycled under them
            assert stage.stats["device_reuses"] == 0
        assert_same_pass(kept, expected)


def test_a_kept_view_of_a_batch_blocks_its_reuse(store_path: Path) -> None:
    with open_dataset(store_path, drop_last=True) as ds:
        expected = host_pass(ds.train)
        with DeviceStage(ds.train, prefetch=0, device_sets=1) as stage:
            it = iter(stage)
            first = next(it)
            row = first["t2m"][0]  # a view into the device buffer
            del first
            rest = list(it)
        np.testing.assert_array_equal(row, expected[0]["t2m"][0])
        for d, h in zip(rest, expected[1:], strict=True):
            np.testing.assert_array_equal(d["t2m"], h["t2m"])


@pytest.mark.parametrize("prefetch", [0, 2])
def test_resume_mid_epoch_continues_with_the_first_batch_not_handed_out(
    store_path: Path, prefetch: int
) -> None:
    with open_dataset(store_path) as ds:
        ds.set_epoch(1)
        whole = [b.sample_indices.copy() for b in ds.train]
        stage = DeviceStage(ds.train, prefetch=prefetch)
        it = iter(stage)
        first = [next(it).sample_indices.copy() for _ in range(3)]
        state = stage.state_dict()
        stage.close()
    assert state["batches_done"] == 3
    with open_dataset(store_path) as again:
        stage = DeviceStage(again.train, prefetch=prefetch)
        stage.load_state_dict(state)
        rest = [b.sample_indices.copy() for b in stage]
        stage.close()
    assert len(first) + len(rest) == len(whole)
    for got, want in zip(first + rest, whole, strict=True):
        np.testing.assert_array_equal(got, want)


def test_stage_forwards_epochs_and_length(dataset: Any) -> None:
    stage = DeviceStage(dataset.train)
    assert len(stage) == len(dataset.train)
    stage.set_epoch(4)
    first = next(iter(stage))
    assert first.epoch == 4
    stage.close()


def test_bad_settings_are_refused(dataset: Any) -> None:
    with pytest.raises(ValueError, match="prefetch"):
        DeviceStage(dataset.train, prefetch=-1)
    with pytest.raises(ValueError, match="device_sets"):
        DeviceStage(dataset.train, device_sets=0)
