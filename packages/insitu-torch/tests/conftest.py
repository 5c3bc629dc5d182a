from __future__ import annotations

from collections.abc import Iterator

import pytest

import insitu
from insitu.testing import linear_regression_view


@pytest.fixture
def view() -> Iterator[insitu.DatasetView]:
    """The train split of a linear problem, ``y = x @ w + b``, read through a real InSituDataset."""
    with linear_regression_view() as train:
        yield train
