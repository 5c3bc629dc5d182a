from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

import insitu
from insitu.batch import Batch
from insitu.testing import AdapterConformance, assert_entry_point, assert_registers
from insitu_jax import jax_iterator, to_jax

# Without jax_enable_x64, JAX stores int64 as int32; the kit checks dtypes jax keeps as they are.
JAX_DTYPES: Mapping[str, str] = {"x": "float32", "y": "int32", "mask": "uint8"}


class TestToJaxConformance(AdapterConformance):
    per_batch = True
    sample_dtypes: ClassVar[Mapping[str, str]] = JAX_DTYPES

    def adapter(self) -> Any:
        return to_jax


class TestJaxIteratorConformance(AdapterConformance):
    sample_dtypes: ClassVar[Mapping[str, str]] = JAX_DTYPES

    def adapter(self) -> Any:
        return jax_iterator


def test_to_jax_returns_device_arrays() -> None:
    out = to_jax(Batch({"x": np.ones((2, 3), "float32")}, np.arange(2)))
    assert isinstance(out["x"], jax.Array)
    assert out["x"].devices() == {jax.devices()[0]}


def test_to_jax_places_with_a_sharding() -> None:
    mesh = jax.make_mesh((1,), ("batch",))
    sharding = NamedSharding(mesh, PartitionSpec("batch"))
    out = to_jax(Batch({"x": np.ones((4, 3), "float32")}, np.arange(4)), sharding=sharding)
    assert out["x"].sharding == sharding


@pytest.mark.parametrize("prefetch", [1, 2, 5])
def test_jax_iterator_yields_every_batch_in_order(view: Any, prefetch: int) -> None:
    expected = [np.array(batch["x"]) for batch in view]
    got = [np.asarray(item["x"]) for item in jax_iterator(view, prefetch=prefetch)]
    assert len(got) == len(view)
    for want, have in zip(expected, got, strict=True):
        np.testing.assert_array_equal(have, want)


def test_jax_iterator_rejects_zero_prefetch(view: Any) -> None:
    with pytest.raises(ValueError, match="prefetch"):
        next(jax_iterator(view, prefetch=0))


def test_linear_regression_learns_with_jax_grad(view: Any) -> None:
    def loss_fn(params: dict[str, jax.Array], batch: dict[str, jax.Array]) -> jax.Array:
        prediction = batch["x"] @ params["w"] + params["b"]
        return jnp.mean((prediction - batch["y"]) ** 2)

    @jax.jit
    def step(
        params: dict[str, jax.Array], batch: dict[str, jax.Array]
    ) -> tuple[dict[str, jax.Array], jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        return jax.tree_util.tree_map(lambda p, g: p - 0.1 * g, params, grads), loss

    params = {"w": jnp.zeros((4, 1)), "b": jnp.zeros((1,))}
    epoch_losses = []
    for epoch in range(5):
        view.set_epoch(epoch)
        losses = []
        for batch in jax_iterator(view):
            params, loss = step(params, batch)
            losses.append(float(loss))
        epoch_losses.append(float(np.mean(losses)))
    assert epoch_losses[-1] < 0.01 * epoch_losses[0], epoch_losses


def test_plugin_registers_both_adapters() -> None:
    assert_registers("insitu_jax.plugin", "adapters", ["to_jax", "jax_iterator"], exact=True)
    assert_entry_point("jax", "insitu_jax.plugin")
    assert insitu.to_jax is to_jax
    assert insitu.jax_iterator is jax_iterator


def test_importing_the_plugin_does_not_import_jax() -> None:
    code = "import sys, insitu, insitu_jax, insitu_jax.plugin; sys.exit('jax' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
