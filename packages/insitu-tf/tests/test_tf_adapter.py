from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import pytest
import tensorflow as tf
import zarr
from zarr.storage import MemoryStore

import insitu
from insitu.batch import Batch
from insitu.testing import AdapterConformance, BatchSource, assert_entry_point, assert_registers, make_batches
from insitu.testing.synthetic import make_linear_regression
from insitu_tf import AUTOTUNE, as_tf_dataset, consumed_state, dataset_fn, rank_view


def _source(view: Any, label: str = "x") -> np.ndarray:
    return np.asarray(zarr.open_group(view.dataset.store, mode="r")[label][:])


def _row_ids(source: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Index in ``source`` of each row of ``rows`` (rows of the synthetic x are distinct)."""
    lookup = {row.tobytes(): i for i, row in enumerate(source)}
    assert len(lookup) == len(source), "source rows must be distinct for this check"
    return np.array([lookup[row.tobytes()] for row in rows.reshape(-1, source.shape[1])])


def _train_samples(view: Any) -> np.ndarray:
    return np.sort(view.dataset.manifest.samples("train"))


class TestAsTfDatasetConformance(AdapterConformance):
    def adapter(self) -> Any:
        return as_tf_dataset

    def to_numpy(self, value: Any) -> np.ndarray:
        return value.numpy()


def test_element_spec_is_exact(view: Any) -> None:
    spec = as_tf_dataset(view).element_spec
    assert set(spec) == {"x", "y"}
    assert spec["x"] == tf.TensorSpec(shape=(None, 4), dtype=tf.float32)
    assert spec["y"] == tf.TensorSpec(shape=(None, 1), dtype=tf.float32)


def test_batch_dimension_is_fixed_when_the_view_drops_the_last_batch() -> None:
    source = BatchSource(make_batches(2, 8, {"x": "float32"}, {"x": (3,)}), batch_size=8)
    source.drop_last = True
    assert as_tf_dataset(source).element_spec["x"].shape == (8, 3)


def test_batch_dimension_of_a_real_view_that_drops_the_last_batch() -> None:
    store = MemoryStore()
    make_linear_regression(store, n_samples=200, n_features=4, n_targets=2, chunks=50, seed=0)
    geoms = insitu.open_geometries(store, variables=["x", "y"])
    manifest = insitu.split_by_chunk(geoms["x"], fractions=(1.0,), names=("train",))
    with insitu.InSituDataset(store, manifest, geoms, batch_size=32, drop_last=True) as ds:
        dataset = as_tf_dataset(ds.train)
        assert dataset.element_spec == {
            "x": tf.TensorSpec(shape=(32, 4), dtype=tf.float32),
            "y": tf.TensorSpec(shape=(32, 2), dtype=tf.float32),
        }
        shapes = [tuple(element["y"].shape) for element in dataset]
    assert shapes == [(32, 2)] * (200 // 32)


def test_a_static_field_is_declared_once_per_batch() -> None:
    """A field without the sample axis comes as (1, *shape) in every batch, and the signature says so."""
    store = MemoryStore()
    make_linear_regression(store, n_samples=64, n_features=4, n_targets=1, chunks=16, seed=0)
    mask = zarr.create_array(store, name="mask", shape=(4,), dtype="float32", dimension_names=("feature",))
    mask[...] = np.arange(4, dtype="float32")
    geoms = insitu.open_geometries(store, variables=["x"], sample_axis=0)
    static = insitu.open_geometries(store, variables=["mask"], sample_axis=0)["mask"].as_static()
    manifest = insitu.split_by_chunk(geoms["x"], fractions=(1.0,), names=("train",))
    with insitu.InSituDataset(store, manifest, [geoms["x"], static], batch_size=16, drop_last=True) as ds:
        dataset = as_tf_dataset(ds.train)
        assert dataset.element_spec["mask"] == tf.TensorSpec(shape=(1, 4), dtype=tf.float32)
        assert dataset.element_spec["x"] == tf.TensorSpec(shape=(16, 4), dtype=tf.float32)
        for element in dataset:
            np.testing.assert_array_equal(element["mask"].numpy(), mask[...][np.newaxis])
            assert tuple((element["x"] * element["mask"]).shape) == (16, 4)  # broadcasts


def test_batch_transforms_that_rename_labels_are_declared_and_the_length_is_known() -> None:
    store = MemoryStore()
    make_linear_regression(store, n_samples=64, n_features=4, n_targets=2, chunks=16, seed=0)
    geoms = insitu.open_geometries(store, variables=["x", "y"])
    manifest = insitu.split_by_chunk(geoms["x"], fractions=(1.0,), names=("train",))

    def to_model(batch: Batch) -> Batch:
        return Batch({"inputs": batch["x"] * 2, "target": batch["y"][:, 0]}, batch.sample_indices)

    with insitu.InSituDataset(store, manifest, geoms, batch_size=16, batch_transforms=[to_model]) as ds:
        dataset = as_tf_dataset(ds.train)
        assert dataset.element_spec == {
            "inputs": tf.TensorSpec(shape=(None, 4), dtype=tf.float32),
            "target": tf.TensorSpec(shape=(None,), dtype=tf.float32),
        }
        assert int(dataset.cardinality()) == len(ds.train) == 4
        assert sum(1 for _ in dataset) == 4


def test_values_equal_the_source_rows_in_delivery_order(view: Any) -> None:
    order = view.sample_order()
    got = {label: [] for label in ("x", "y")}
    for element in as_tf_dataset(view):
        for label, values in got.items():
            values.append(element[label].numpy())
    for label, values in got.items():
        np.testing.assert_array_equal(np.concatenate(values), _source(view, label)[order])


def _aligned(n: int, *, misalign: int = 0) -> np.ndarray:
    """A writeable float32 array whose data starts ``misalign`` bytes after a 64-byte boundary."""
    raw = np.zeros(4 * n + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + misalign
    out = raw[start : start + 4 * n].view("float32")
    out[:] = np.arange(n)
    return out


def _first_tensor(values: np.ndarray) -> tf.Tensor:
    batch = Batch({"x": values}, np.arange(len(values)))
    (element,) = as_tf_dataset(BatchSource([batch], batch_size=len(values)))
    return element["x"]


def test_an_aligned_batch_is_shared_with_tensorflow() -> None:
    values = _aligned(256)
    tensor = _first_tensor(values)
    values[0] = 99.0  # shared: the write shows through
    assert float(tensor[0]) == 99.0


@pytest.mark.parametrize("misalign", [4, 16, 32])
def test_a_misaligned_batch_is_copied(misalign: int) -> None:
    values = _aligned(256, misalign=misalign)
    tensor = _first_tensor(values)
    values[0] = 99.0
    assert float(tensor[0]) == 0.0


class _FreshBatches:
    """A view-like source that allocates each batch as it is asked for and keeps no reference."""

    labels = ("x",)
    sample_shapes: ClassVar[dict[str, tuple[int, ...]]] = {"x": ()}
    dtypes: ClassVar[dict[str, np.dtype[Any]]] = {"x": np.dtype("float32")}
    batch_size = 256
    drop_last = True

    def __init__(self) -> None:
        self.owners: list[weakref.ref[np.ndarray]] = []

    def __iter__(self) -> Iterator[Batch]:
        values = _aligned(self.batch_size)
        self.owners.append(weakref.ref(values.base))
        yield Batch({"x": values}, np.arange(self.batch_size))

    def __len__(self) -> int:
        return 1


def test_a_shared_batch_lives_as_long_as_the_tensor() -> None:
    source = _FreshBatches()
    (element,) = as_tf_dataset(source)
    gc.collect()
    (owner,) = source.owners
    assert owner() is not None, "the batch memory was freed while TensorFlow still uses it"
    np.testing.assert_array_equal(element["x"].numpy(), np.arange(256, dtype="float32"))
    del element
    gc.collect()
    assert owner() is None, "TensorFlow kept the batch memory after the tensor was gone"


def test_tensors_survive_the_engine_recycling_batch_buffers() -> None:
    # Batches of 1 MiB come from insitu's recycled buffer pool; whether TensorFlow shares or
    # copies each one depends on its alignment. Either way, tensors from an earlier epoch keep
    # their values while later epochs reuse the pool.
    store = MemoryStore()
    make_linear_regression(store, n_samples=1024, n_features=1024, chunks=256, seed=1)
    source = np.asarray(zarr.open_group(store, mode="r")["x"][:])
    geoms = insitu.open_geometries(store, variables=["x"])
    manifest = insitu.split_by_chunk(geoms["x"], fractions=(1.0,), names=("train",))
    with insitu.InSituDataset(store, manifest, geoms, batch_size=256, seed=0, shuffle=False) as ds:
        kept = [element["x"] for element in as_tf_dataset(ds.train)]
        gc.collect()
        for epoch in (1, 2):
            ds.set_epoch(epoch)
            for batch in ds.train:
                batch["x"][:] = -1.0  # scribble over whatever buffer the pool handed out
    np.testing.assert_array_equal(np.concatenate([t.numpy() for t in kept]), source)


def test_autotune_constant_is_tensorflows() -> None:
    assert tf.data.AUTOTUNE == AUTOTUNE


def test_every_batch_arrives_in_order(view: Any) -> None:
    expected = [np.array(batch["y"]) for batch in view]
    got = [element["y"].numpy() for element in as_tf_dataset(view)]
    assert len(got) == len(view)
    for want, have in zip(expected, got, strict=True):
        np.testing.assert_array_equal(have, want)


# Keras learns the length of a dataset of unknown cardinality by reaching its end in epoch 1.
@pytest.mark.filterwarnings("ignore:Your input ran out of data:UserWarning")
def test_keras_dense_model_learns(view: Any) -> None:
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.1), loss="mse")
    dataset = as_tf_dataset(view).map(lambda b: (b["x"], b["y"]))
    history = model.fit(dataset, epochs=5, shuffle=False, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.01 * losses[0], losses
    # It learned the store's own answer, not just a smaller loss.
    truth = zarr.open_group(view.dataset.store, mode="r").attrs
    weights, bias = model.layers[-1].get_weights()
    np.testing.assert_allclose(weights, np.array(truth["weights"]), atol=0.05)
    np.testing.assert_allclose(bias, np.array(truth["bias"]), atol=0.05)


# -- ranks and tf.distribute ------------------------------------------------------------


def _rank_rows(view: Any, datasets: list[tf.data.Dataset]) -> list[np.ndarray]:
    """Source row ids each rank's dataset delivers, one array per rank."""
    source = _source(view)
    return [_row_ids(source, np.concatenate([e["x"].numpy() for e in d])) for d in datasets]


def _assert_disjoint_and_complete(view: Any, per_rank: list[np.ndarray]) -> None:
    assert len({len(ids) for ids in per_rank}) == 1, [len(ids) for ids in per_rank]
    union = np.sort(np.concatenate(per_rank))
    np.testing.assert_array_equal(union, _train_samples(view))  # each sample once across ranks


def test_explicit_ranks_read_disjoint_chunks_with_equal_batch_counts(view: Any) -> None:
    datasets = [as_tf_dataset(view, rank=r, world_size=2) for r in range(2)]
    assert [sum(1 for _ in d) for d in datasets] == [len(view.shard(r, 2)) for r in range(2)]
    assert len(view.shard(0, 2)) == len(view.shard(1, 2)) > 0
    chunks = [{c for b in view.shard(r, 2).plan().order.block_chunks for c in b} for r in range(2)]
    assert not chunks[0] & chunks[1]
    _assert_disjoint_and_complete(view, _rank_rows(view, datasets))


def test_input_context_picks_the_pipelines_shard(view: Any) -> None:
    contexts = [
        tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=i, num_replicas_in_sync=2)
        for i in range(2)
    ]
    make = dataset_fn(view)
    _assert_disjoint_and_complete(view, _rank_rows(view, [make(ctx) for ctx in contexts]))
    assert rank_view(view, input_context=contexts[1]).rank == 1


def test_mirrored_strategy_feeds_every_sample_once_to_its_replicas() -> None:
    store = MemoryStore()
    make_linear_regression(store, n_samples=512, n_features=4, chunks=64, seed=0)
    geoms = insitu.open_geometries(store, variables=["x", "y"])
    manifest = insitu.split_by_chunk(geoms["x"], fractions=(1.0,), names=("train",))
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    with insitu.InSituDataset(store, manifest, geoms, batch_size=16, drop_last=True, seed=0) as ds:
        distributed = strategy.distribute_datasets_from_function(dataset_fn(ds.train))
        rows = []
        for element in distributed:
            replicas = strategy.experimental_local_results(element["x"])
            assert len(replicas) == 2
            rows += [r.numpy() for r in replicas]
        ids = _row_ids(_source(ds.train), np.concatenate(rows))
        np.testing.assert_array_equal(np.sort(ids), np.arange(512))

        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
            model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.1), loss="mse")
        training = strategy.distribute_datasets_from_function(
            lambda ctx: as_tf_dataset(ds.train, input_context=ctx).map(lambda b: (b["x"], b["y"]))
        )
        with pytest.warns(UserWarning, match="ran out of data"):  # unknown length, learnt in epoch 1
            losses = model.fit(training, epochs=3, shuffle=False, verbose=0).history["loss"]
    assert losses[-1] < 0.01 * losses[0], losses


# -- resume (in process; test_tf_resume.py does it across processes) --------------------


def test_state_loaded_into_the_view_resumes_the_recreated_dataset(view: Any) -> None:
    view.set_epoch(1)
    whole = [e["x"].numpy() for e in as_tf_dataset(view)]
    iterator = iter(as_tf_dataset(view))
    head = [next(iterator)["x"].numpy() for _ in range(4)]
    state = consumed_state(view, 4)
    del iterator
    view.set_epoch(0)
    view.load_state_dict(state)
    rest = [e["x"].numpy() for e in as_tf_dataset(view)]
    for want, have in zip(whole, head + rest, strict=True):
        np.testing.assert_array_equal(have, want)


# -- bad input ------------------------------------------------------------------------


def test_closed_dataset_surfaces_as_a_clear_error(view: Any) -> None:
    dataset = as_tf_dataset(view)
    view.dataset.close()
    # TensorFlow re-raises errors from the generator as its own type, keeping insitu's message.
    with pytest.raises(tf.errors.UnknownError, match="DatasetClosedError: this InSituDataset is closed"):
        next(iter(dataset))


def test_more_ranks_than_chunks_fails_when_the_dataset_is_built(view: Any) -> None:
    with pytest.raises(insitu.ConfigError, match=r"world_size=7 exceeds the 6 chunk"):
        as_tf_dataset(view, rank=0, world_size=7)


@pytest.mark.parametrize(
    ("field", "value"),
    [("seed", 1), ("batch_size", 16), ("manifest", "0123456789abcdef"), ("shuffle", False)],
)
def test_mismatched_state_is_refused_naming_the_field(view: Any, field: str, value: Any) -> None:
    state = {**view.state_dict(), field: value}
    with pytest.raises(insitu.ConfigError, match=f"state does not match this view: {field}="):
        view.load_state_dict(state)


def test_state_of_another_world_size_resumes_the_rest_of_the_epoch(view: Any) -> None:
    # Elastic resume (the union over ranks is checked in test_tf_elastic_resume.py): a rank's state
    # saved at world size 2 loads at 3 and the view resumes mid-epoch instead of being refused.
    state = rank_view(view, rank=1, world_size=2).state_dict()
    resumed = rank_view(view, rank=1, world_size=3)
    resumed.load_state_dict({**state, "batches_done": 1})
    assert resumed.resuming


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"rank": 0}, insitu.ConfigError, "pass rank and world_size together"),
        ({"world_size": 2}, insitu.ConfigError, "pass rank and world_size together"),
        (
            {"rank": 0, "world_size": 2, "input_context": tf.distribute.InputContext()},
            insitu.ConfigError,
            "either input_context or rank/world_size",
        ),
        ({"prefetch": -2}, insitu.ConfigError, "prefetch must be None"),
        ({"prefetch": 1.5}, insitu.ConfigError, "prefetch must be None"),
    ],
)
def test_bad_arguments_are_refused(view: Any, kwargs: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        as_tf_dataset(view, **kwargs)


def test_a_view_sharded_otherwise_is_refused(view: Any) -> None:
    with pytest.raises(
        insitu.ConfigError, match="already sharded as rank 1 of 2, but rank/world_size says rank 0 of 2"
    ):
        as_tf_dataset(view.shard(1, 2), rank=0, world_size=2)
    assert as_tf_dataset(view.shard(1, 2), rank=1, world_size=2) is not None


def test_ranks_need_an_insitu_view() -> None:
    source = BatchSource(make_batches(2, 4, {"x": "float32"}, {"x": (3,)}), batch_size=4)
    with pytest.raises(TypeError, match=r"sharding by rank .*needs an insitu view .*lacks .*for_rank"):
        as_tf_dataset(source, rank=0, world_size=2)
    with pytest.raises(TypeError, match=r"dataset_fn needs an insitu view .*got insitu\.testing"):
        dataset_fn(source)
    with pytest.raises(TypeError, match=r"consumed_state needs an insitu view .*lacks .*state_dict"):
        consumed_state(source, 0)


def test_a_list_of_batches_is_refused_naming_its_type() -> None:
    batches = [Batch({"x": np.ones((2, 3), "float32")}, np.arange(2))]
    with pytest.raises(TypeError, match=r"as_tf_dataset needs an insitu view .*got list"):
        as_tf_dataset(batches)


@pytest.mark.parametrize(("done", "message"), [(-1, "non-negative"), (5, "handed out only 2 batch")])
def test_consumed_state_refuses_impossible_counts(view: Any, done: int, message: str) -> None:
    iterator = iter(as_tf_dataset(view, prefetch=0))
    next(iterator)
    next(iterator)
    with pytest.raises(insitu.ConfigError, match=message):
        consumed_state(view, done)


def test_plugin_registers_the_adapter() -> None:
    assert_registers("insitu_tf.plugin", "adapters", ["as_tf_dataset"], exact=True)
    assert_entry_point("tf", "insitu_tf.plugin")
    assert insitu.as_tf_dataset is as_tf_dataset


def test_importing_the_plugin_does_not_import_tensorflow() -> None:
    code = "import sys, insitu, insitu_tf, insitu_tf.plugin; sys.exit('tensorflow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
