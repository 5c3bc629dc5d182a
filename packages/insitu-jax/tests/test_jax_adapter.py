from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from jax.sharding import NamedSharding, PartitionSpec
from zarr.storage import MemoryStore

import insitu
from insitu.batch import Batch
from insitu.testing import AdapterConformance, BatchSource, assert_entry_point, assert_registers, make_batches
from insitu.testing.synthetic import make_linear_regression
from insitu_jax import JaxIterator, global_batch_sharding, jax_iterator, to_jax

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


def _aligned(n: int, dtype: str = "float32", *, misalign: int = 0) -> np.ndarray:
    """A writeable 1-D array whose data starts ``misalign`` bytes after a 64-byte boundary."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.zeros(n * itemsize + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + misalign
    out = raw[start : start + n * itemsize].view(dtype)
    out[:] = np.arange(n)
    return out


def _shares_memory(result: jax.Array, source: np.ndarray) -> bool:
    return bool(result.unsafe_buffer_pointer() == source.ctypes.data)


def test_to_jax_returns_device_arrays() -> None:
    out = to_jax(Batch({"x": np.ones((2, 3), "float32")}, np.arange(2)))
    assert isinstance(out["x"], jax.Array)
    assert out["x"].devices() == {jax.devices()[0]}


def test_to_jax_shares_an_aligned_buffer_on_cpu() -> None:
    values = _aligned(256)
    out = to_jax({"x": values})["x"]
    assert _shares_memory(out, values)
    # Shared, not copied: a later write to the batch shows through (hence "do not write").
    values[0] = 99.0
    assert float(out[0]) == 99.0


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: _aligned(256, misalign=4), id="misaligned"),
        pytest.param(lambda: _aligned(256, "int64"), id="int64-without-x64"),
        pytest.param(lambda: _aligned(512)[::2], id="strided"),
    ],
)
def test_to_jax_copies_what_xla_cannot_share(make: Any) -> None:
    values = make()
    out = to_jax({"x": values})["x"]
    assert not _shares_memory(out, values)
    np.testing.assert_array_equal(np.asarray(out), values)


def test_to_jax_shares_a_read_only_aligned_buffer() -> None:
    values = _aligned(256)
    values.flags.writeable = False
    out = to_jax({"x": values})["x"]
    assert _shares_memory(out, values)
    np.testing.assert_array_equal(np.asarray(out), values)


def test_a_shared_buffer_lives_as_long_as_the_jax_array() -> None:
    values = _aligned(256)
    owner = weakref.ref(values.base)
    out = to_jax({"x": values})["x"]
    assert _shares_memory(out, values)
    del values
    gc.collect()
    assert owner() is not None, "the batch memory was freed while JAX still uses it"
    np.testing.assert_array_equal(np.asarray(out), np.arange(256, dtype="float32"))
    del out
    gc.collect()
    assert owner() is None, "JAX kept the batch memory after the array was gone"


def test_arrays_survive_the_engine_recycling_batch_buffers() -> None:
    # Batches of 1 MiB come from insitu's recycled buffer pool: a buffer goes back to the pool
    # when nothing references it. Whether JAX shares a batch's buffer depends on its alignment;
    # either way, arrays from an earlier epoch must keep their values while later epochs reuse
    # the pool.
    store = MemoryStore()
    make_linear_regression(store, n_samples=1024, n_features=1024, chunks=256, seed=1)
    source = np.asarray(zarr.open_group(store, mode="r")["x"][:])
    geoms = insitu.open_geometries(store, variables=["x"])
    manifest = insitu.split_by_chunk(geoms["x"], fractions=(1.0,), names=("train",))
    with insitu.InSituDataset(store, manifest, batch_size=256, seed=0, shuffle=False) as ds:
        kept = [to_jax(batch)["x"] for batch in ds.train]
        gc.collect()
        for epoch in (1, 2):
            ds.set_epoch(epoch)
            for batch in ds.train:
                batch["x"][:] = -1.0  # scribble over whatever buffer the pool handed out
    np.testing.assert_array_equal(np.concatenate([np.asarray(a) for a in kept]), source)


def test_to_jax_places_with_a_sharding() -> None:
    mesh = jax.make_mesh((1,), ("batch",))
    sharding = NamedSharding(mesh, PartitionSpec("batch"))
    values = _aligned(64).reshape(16, 4)
    out = to_jax(Batch({"x": values}, np.arange(16)), sharding=sharding)
    assert out["x"].sharding == sharding
    assert _shares_memory(out["x"], values)  # one CPU device: the aligned batch is not copied
    np.testing.assert_array_equal(np.asarray(out["x"]), values)


def test_single_process_iterator_reads_the_whole_view(view: Any) -> None:
    iterator = jax_iterator(view)
    assert isinstance(iterator, JaxIterator)
    assert iterator.view is view
    assert jax.process_count() == 1
    assert len(iterator) == len(view)


def test_global_batch_sharding_spans_every_device() -> None:
    sharding = global_batch_sharding()
    assert sharding.mesh.axis_names == ("batch",)
    assert set(sharding.mesh.devices.flat) == set(jax.devices())
    assert sharding.spec == PartitionSpec("batch")


@pytest.mark.parametrize("prefetch", [1, 2, 5])
def test_jax_iterator_yields_every_batch_in_order(view: Any, prefetch: int) -> None:
    expected = [np.array(batch["x"]) for batch in view]
    got = [np.asarray(item["x"]) for item in jax_iterator(view, prefetch=prefetch)]
    assert len(got) == len(view)
    for want, have in zip(expected, got, strict=True):
        np.testing.assert_array_equal(have, want)


@pytest.mark.parametrize("prefetch", [0, -1, 1.5, True])
def test_jax_iterator_rejects_a_bad_prefetch(view: Any, prefetch: Any) -> None:
    with pytest.raises(insitu.ConfigError, match="prefetch must be a positive integer"):
        jax_iterator(view, prefetch=prefetch)


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
    # It learned the store's own answer, not just a smaller loss.
    truth = zarr.open_group(view.dataset.store, mode="r").attrs
    np.testing.assert_allclose(np.asarray(params["w"]), np.array(truth["weights"]), atol=0.05)
    np.testing.assert_allclose(np.asarray(params["b"]), np.array(truth["bias"]), atol=0.05)


# -- bad input ------------------------------------------------------------------------


def test_closed_dataset_fails_on_the_first_batch(view: Any) -> None:
    view.dataset.close()
    iterator = jax_iterator(view)
    with pytest.raises(insitu.DatasetClosedError, match="closed"):
        next(iterator)


def test_more_ranks_than_chunks_fails_when_the_iterator_is_built(view: Any) -> None:
    with pytest.raises(insitu.ConfigError, match=r"world_size=100 exceeds the 6 chunk"):
        jax_iterator(view.shard(0, 100))


@pytest.mark.parametrize(
    # A state of another world size is an elastic resume, not a mismatch: test_jax_elastic_resume.py.
    ("field", "value"),
    [("seed", 1), ("batch_size", 16), ("manifest", "0123456789abcdef"), ("block_chunks", 7)],
)
def test_mismatched_state_is_refused_naming_the_field(view: Any, field: str, value: Any) -> None:
    state = {**view.state_dict(), field: value}
    with pytest.raises(insitu.ConfigError, match=field):
        jax_iterator(view).load_state_dict(state)


def test_a_foreign_state_is_refused(view: Any) -> None:
    with pytest.raises(insitu.ConfigError, match="not an insitu view state"):
        jax_iterator(view).load_state_dict({"epoch": 0, "batches_done": 3})


def test_state_cannot_be_loaded_mid_pass(view: Any) -> None:
    iterator = jax_iterator(view)
    state = iterator.state_dict()
    next(iterator)
    with pytest.raises(RuntimeError, match="before the iterator yields"):
        iterator.load_state_dict(state)


def test_a_list_of_batches_is_refused_naming_its_type() -> None:
    batches = [Batch({"x": np.ones((2, 3), "float32")}, np.arange(2))]
    with pytest.raises(TypeError, match=r"jax_iterator needs an insitu view .*got list"):
        jax_iterator(batches)


def test_state_needs_a_shardable_view() -> None:
    iterator = jax_iterator(BatchSource(make_batches(2, 4, {"x": "float32"}, {"x": (3,)}), batch_size=4))
    assert len(iterator) == 2
    with pytest.raises(TypeError, match=r"JaxIterator\.state_dict needs .*lacks .*state_dict"):
        iterator.state_dict()


def test_plugin_registers_both_adapters() -> None:
    assert_registers("insitu_jax.plugin", "adapters", ["to_jax", "jax_iterator"], exact=True)
    assert_entry_point("jax", "insitu_jax.plugin")
    assert insitu.to_jax is to_jax
    assert insitu.jax_iterator is jax_iterator


def test_importing_the_plugin_does_not_import_jax() -> None:
    code = "import sys, insitu, insitu_jax, insitu_jax.plugin; sys.exit('jax' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


_STATIC_ON_TWO_DEVICES = """
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec
from insitu.batch import Batch
from insitu_jax import to_jax
assert len(jax.devices()) == 2
sharding = NamedSharding(jax.make_mesh((2,), ("batch",)), PartitionSpec("batch"))
x, lsm = np.arange(12, dtype="float32").reshape(4, 3), np.ones((1, 2, 2), "float32")
out = to_jax(Batch({"x": x, "lsm": lsm}, np.arange(4), {"x": np.arange(4)}), sharding=sharding)
assert out["x"].sharding == sharding
assert out["lsm"].sharding.spec == PartitionSpec()  # a static field is replicated, not split by rows
assert out["lsm"].shape == (1, 2, 2)
np.testing.assert_array_equal(np.asarray(out["lsm"]), lsm)
print("ok")
"""


def test_a_static_field_is_replicated_over_a_batch_sharding() -> None:
    """A static field is (1, *shape) in every batch: split over two devices it would fail."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    run = subprocess.run(
        [sys.executable, "-c", _STATIC_ON_TWO_DEVICES], capture_output=True, text=True, env=env, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"
