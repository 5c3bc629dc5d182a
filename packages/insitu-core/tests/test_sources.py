"""The view protocols adapters accept: ``insitu.DatasetView`` satisfies them, other objects are named."""

from __future__ import annotations

import numpy as np
import pytest

import insitu
from insitu.sources import BatchedView, ShardableView, require_batched_view, require_shardable_view
from insitu.testing import BatchSource, linear_regression_view, make_batches


def _batch_source() -> BatchSource:
    return BatchSource(make_batches(2, 4, {"x": "float32"}, {"x": (3,)}), batch_size=4)


def test_a_dataset_view_is_a_batched_and_shardable_view() -> None:
    with linear_regression_view() as view:
        assert isinstance(view, insitu.DatasetView)
        assert isinstance(view, BatchedView)
        assert isinstance(view, ShardableView)
        assert isinstance(view.shard(1, 2), ShardableView)
        assert require_shardable_view(view, "test") is view


def test_the_protocol_is_exported_at_the_root() -> None:
    assert insitu.BatchedView is BatchedView
    assert "BatchedView" in insitu.__all__


def test_every_protocol_member_is_on_the_dataset_view_class() -> None:
    # Keeps the protocols to what DatasetView offers: a member added here and not there fails.
    members = {name for name in dir(ShardableView) if not name.startswith("_")} | {"__iter__", "__len__"}
    with linear_regression_view() as view:
        missing = sorted(name for name in members if not hasattr(view, name))
    assert not missing


@pytest.mark.parametrize("not_a_view", [[{"x": np.zeros((2, 3))}], (), "train", None, iter([])])
def test_other_objects_are_not_views(not_a_view: object) -> None:
    assert not isinstance(not_a_view, BatchedView)
    assert not isinstance(not_a_view, ShardableView)


def test_the_kit_batch_source_is_batched_but_not_shardable() -> None:
    source = _batch_source()
    assert isinstance(source, BatchedView)
    assert not isinstance(source, ShardableView)
    assert require_batched_view(source, "test") is source


def test_a_list_is_refused_naming_its_type_and_the_caller() -> None:
    with pytest.raises(TypeError, match=r"as_something needs an insitu view .*got list") as info:
        require_batched_view([{"x": np.zeros(3)}], "as_something")
    for missing in ("batch_size", "drop_last", "dtypes", "labels", "sample_shapes"):
        assert missing in str(info.value)
    assert "ds.train" in str(info.value)


def test_a_batch_source_is_refused_where_sharding_is_needed_naming_what_it_lacks() -> None:
    with pytest.raises(
        TypeError, match=r"set_epoch needs .* got insitu\.testing\.adapters\.BatchSource"
    ) as info:
        require_shardable_view(_batch_source(), "set_epoch")
    for missing in ("for_rank", "load_state_dict", "rank", "set_epoch", "state_dict", "world_size"):
        assert missing in str(info.value)
    assert "__iter__" not in str(info.value), "only the members it lacks are listed"
