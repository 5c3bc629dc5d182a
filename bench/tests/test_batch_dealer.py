"""The whole-block runners' batch dealing: every row of every block once, in full batches but the last."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "suite"))

from common import BatchDealer


def test_rows_of_successive_blocks_fill_batches_across_block_ends() -> None:
    rng = np.random.default_rng(0)
    blocks = [np.arange(start, start + n, dtype="f4") for start, n in ((0, 7), (7, 5), (12, 9))]
    twins = [2 * b for b in blocks]  # a second variable: its rows must travel with the first's
    dealer = BatchDealer([np.empty(4, "f4"), np.empty(4, "f4")])
    sizes, seen = [], []
    for block, twin in zip(blocks, twins, strict=True):
        for a, b in dealer.deal([block, twin], rng.permutation(len(block))):
            sizes.append(len(a))
            seen += a.tolist()
            assert np.array_equal(b, 2 * a)
    for a, b in dealer.rest():
        sizes.append(len(a))
        seen += a.tolist()
        assert np.array_equal(b, 2 * a)
    assert sizes == [4, 4, 4, 4, 4, 1]
    assert sorted(seen) == list(range(21))


def test_an_exact_fit_leaves_no_short_batch() -> None:
    dealer = BatchDealer([np.empty(3, "i8")])
    full = list(dealer.deal([np.arange(6)], np.arange(6)))
    assert len(full) == 2
    assert list(dealer.rest()) == []
