"""``jax_iterator(view, device=...)``: every batch on that device, in order, resumable (CPU here)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import insitu
from insitu_jax import jax_iterator


@pytest.mark.parametrize("device", ["cpu", 0, "cpu:0"])
def test_batches_land_on_the_device_in_view_order(view: insitu.DatasetView, device: object) -> None:
    expected = [{k: np.array(v) for k, v in b.items()} for b in view]
    got = list(jax_iterator(view, device=device))
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        for label, values in e.items():
            assert g[label].devices() == {jax.devices("cpu")[0]}
            np.testing.assert_array_equal(np.asarray(g[label]), values)


def test_state_counts_only_the_batches_returned(view: insitu.DatasetView) -> None:
    it = jax_iterator(view, device="cpu", prefetch=2)
    next(it)
    next(it)
    assert it.state_dict()["batches_done"] == 2


def test_device_and_sharding_together_are_refused(view: insitu.DatasetView) -> None:
    sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    with pytest.raises(insitu.ConfigError, match="not both"):
        jax_iterator(view, device="cpu", sharding=sharding)
