"""DataLoader settings that would deliver wrong batches are refused with the fix in the message.

``DataLoader.__init__`` only checks the dataset's class (see ``test_the_loader_constructor_
calls_nothing_on_the_dataset``), so the refusals come on the loader's first batch, or at
``iter(loader)`` for workers started by pickling the dataset.
"""

from __future__ import annotations

import pickle
import re
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

import insitu
from insitu.batch import Batch
from insitu.testing.adapters import BatchSource, make_batches
from insitu_torch import as_torch
from insitu_torch._loader_checks import LOADER_FIX

FIX = re.escape(LOADER_FIX)


def test_the_fix_in_the_messages_is_the_documented_loader() -> None:
    assert LOADER_FIX == "DataLoader(as_torch(view), batch_size=None, num_workers=0)"


def test_the_recommended_loader_raises_and_warns_nothing(view: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        items = list(DataLoader(as_torch(view), batch_size=None, num_workers=0))
    assert len(items) == len(view)
    assert items[0]["x"].shape == (32, 4), "no leading dimension added"


def test_the_default_loader_is_refused_on_its_first_batch_naming_the_fix(view: Any) -> None:
    loader = DataLoader(as_torch(view))  # batch_size=1: would stack each batch into shape (1, 32, 4)
    with pytest.raises(insitu.ConfigError, match=FIX) as info:
        next(iter(loader))
    assert "stack 1 insitu batch(es) of 32 samples" in str(info.value)


@pytest.mark.parametrize("batch_size", [1, 4])
def test_any_automatic_batching_is_refused(view: Any, batch_size: int) -> None:
    loader = DataLoader(as_torch(view), batch_size=batch_size, num_workers=0)
    with pytest.raises(insitu.ConfigError, match=FIX):
        next(iter(loader))


def test_the_stateful_loader_default_is_refused_too(view: Any) -> None:
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    with pytest.raises(insitu.ConfigError, match=FIX):
        next(iter(stateful.StatefulDataLoader(as_torch(view))))


def test_a_custom_collate_fn_is_left_alone(view: Any) -> None:
    # Whoever passes collate_fn decides how items combine: insitu only guards torch's default.
    loader = DataLoader(as_torch(view), batch_size=2, collate_fn=list)
    pair = next(iter(loader))
    assert [item["x"].shape for item in pair] == [(32, 4), (32, 4)]


def _first_batch_refusal(loader: DataLoader[Any]) -> str:
    """The message of the ConfigError the loader's first batch raises."""
    iterator = iter(loader)
    try:
        next(iterator)
    except insitu.ConfigError as error:
        # The traceback runs through torch's frames, which hold the iterator in a reference cycle:
        # left to the garbage collector, its shutdown waits 5 s per worker. Dropping the traceback
        # frees the iterator (and joins its workers) when this function returns.
        error.__traceback__ = None
        return str(error)
    raise AssertionError("the first batch was delivered")


@pytest.mark.parametrize("num_workers", [1, 2])
def test_forked_workers_are_refused_on_the_first_batch_naming_the_fix(view: Any, num_workers: int) -> None:
    loader = DataLoader(
        as_torch(view), batch_size=None, num_workers=num_workers, multiprocessing_context="fork"
    )
    message = _first_batch_refusal(loader)
    assert LOADER_FIX in message
    assert f"DataLoader worker 0 of {num_workers}" in message
    assert "replay the whole view" in message


def test_spawned_workers_are_refused_when_the_loader_starts_them(view: Any) -> None:
    loader = DataLoader(as_torch(view), batch_size=None, num_workers=2, multiprocessing_context="spawn")
    with warnings.catch_warnings():
        # torch's own advice for an unpicklable dataset (switch to fork) would be wrong here.
        warnings.simplefilter("error")
        with pytest.raises(insitu.ConfigError, match=FIX):
            iter(loader)


def test_the_dataset_refuses_to_be_pickled(view: Any) -> None:
    with pytest.raises(insitu.ConfigError, match="cannot be sent to another process"):
        pickle.dumps(as_torch(view))


def test_the_loader_constructor_calls_nothing_on_the_dataset() -> None:
    # Why the refusals cannot come earlier: DataLoader.__init__ only reads the dataset's class
    # (isinstance checks). If torch ever calls something here, move the checks to that call.
    touched: list[str] = []

    class Recording(IterableDataset[Any]):
        def __getattribute__(self, name: str) -> Any:
            touched.append(name)
            return object.__getattribute__(self, name)

        def __iter__(self) -> Any:
            return iter(())

    DataLoader(Recording())
    assert set(touched) <= {"__class__"}, touched


# -- the view argument ----------------------------------------------------------------------


def test_a_list_of_batches_is_refused_naming_its_type() -> None:
    batches = [Batch({"x": np.zeros((2, 3), "float32")}, np.arange(2))]
    with pytest.raises(TypeError, match=r"as_torch needs an insitu view .*got list"):
        as_torch(batches)


def test_a_batch_source_iterates_but_cannot_set_the_epoch() -> None:
    source = BatchSource(make_batches(2, 4, {"x": "float32"}, {"x": (3,)}), batch_size=4)
    dataset = as_torch(source)
    assert len(list(DataLoader(dataset, batch_size=None, num_workers=0))) == 2
    with pytest.raises(TypeError, match=r"InSituIterableDataset\.set_epoch needs .*lacks .*set_epoch"):
        dataset.set_epoch(1)
    with pytest.raises(TypeError, match=r"as_torch\(rank=\.\.\., world_size=\.\.\.\) needs"):
        as_torch(source, rank=0, world_size=2)


def test_an_explicit_rank_on_a_view_sharded_otherwise_is_refused(view: Any) -> None:
    with pytest.raises(insitu.ConfigError, match="already sharded as rank 0 of 2, but rank/world_size says"):
        as_torch(view.shard(0, 2), rank=1, world_size=2)


def test_other_datasets_still_batch_as_torch_does(view: Any) -> None:
    as_torch(view)  # installs the collate entry, which is keyed on TorchBatch only
    items = [{"x": torch.ones(3)}, {"x": torch.zeros(3)}]
    assert next(iter(DataLoader(items, batch_size=2)))["x"].shape == (2, 3)
