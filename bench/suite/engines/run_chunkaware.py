"""Runner for the careful user stack: chunk-grouped batches, each read with one zarr slice per run.

A batch sampler shuffles the order of the storage chunks along the sample axis
(seeded), walks the chunks in that order and cuts the resulting stream of
sample indices into batches of ``batch_size`` (so a batch covers one or a few
consecutive-in-the-walk chunks), shuffling the samples within each batch. The
Dataset's ``__getitem__`` takes a whole batch of indices, reads each contiguous
run of them with one zarr slice per variable (``array[start:stop]``, and
``array[start + window:stop + window]`` for windowed cases) and scatters the
rows into the batch's order; the DataLoader runs with ``batch_size=None`` so
the batches pass through as built, ``num_workers`` processes reading them.
Sharded stores are grouped by the inner chunk (``case.samples_per_chunk``).

Tuning: ``num_workers``, ``prefetch_factor`` (torch's default where absent,
only with workers). Works with every case and store kind.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
import torch.utils.data

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common import Spec, begin, cold_epoch, emit
from run_workers import ZarrSampleDataset, make_loader  # the shared Dataset opener and DataLoader set-up


class ChunkBatchSampler(torch.utils.data.Sampler[list[int]]):
    """Batches of sample indices drawn chunk by chunk in a seeded random chunk order."""

    def __init__(self, n: int, samples_per_chunk: int, batch_size: int, seed: int) -> None:
        self.n = n
        self.samples_per_chunk = samples_per_chunk
        self.batch_size = batch_size
        self.seed = seed

    def __len__(self) -> int:
        return -(-self.n // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        generator = torch.Generator().manual_seed(self.seed)
        n_chunks = -(-self.n // self.samples_per_chunk)
        pending: list[int] = []
        for chunk in torch.randperm(n_chunks, generator=generator).tolist():
            start = chunk * self.samples_per_chunk
            pending.extend(range(start, min(start + self.samples_per_chunk, self.n)))
            while len(pending) >= self.batch_size:
                yield self._shuffled(pending[: self.batch_size], generator)
                del pending[: self.batch_size]
        if pending:
            yield self._shuffled(pending, generator)

    @staticmethod
    def _shuffled(indices: list[int], generator: torch.Generator) -> list[int]:
        return [indices[k] for k in torch.randperm(len(indices), generator=generator).tolist()]


class ZarrBatchDataset(ZarrSampleDataset):
    """``dataset[indices]`` is the whole batch: one stacked array per field, rows in ``indices`` order."""

    def __getitem__(self, indices: list[int]) -> tuple[np.ndarray, ...]:
        arrays = self._open()
        runs = contiguous_runs(np.asarray(indices))
        shifts = [0, self.spec.case.window] if self.spec.case.window else [0]
        fields = []
        for shift in shifts:
            for a in arrays:
                out = np.empty((len(indices), *a.shape[1:]), dtype=a.dtype)
                for start, stop, positions in runs:
                    out[positions] = a[start + shift : stop + shift]
                fields.append(out)
        return tuple(fields)


def contiguous_runs(indices: np.ndarray) -> list[tuple[int, int, np.ndarray]]:
    """Split a batch's (distinct) indices into runs of consecutive values.

    Each run is ``(start, stop, positions)``: row ``k`` of ``[start, stop)``
    goes to ``positions[k]`` of the batch.
    """
    order = np.argsort(indices)
    breaks = np.flatnonzero(np.diff(indices[order]) != 1) + 1
    return [(int(indices[p[0]]), int(indices[p[-1]]) + 1, p) for p in np.split(order, breaks)]


def main() -> None:
    spec = Spec.load(sys.argv[1])
    case = spec.case
    floor, clock = begin()
    dataset = ZarrBatchDataset(spec)
    sampler = ChunkBatchSampler(case.samples_per_epoch, case.samples_per_chunk, spec.batch_size, spec.seed)
    loader = make_loader(spec, dataset, batch_size=None, sampler=sampler)
    result = cold_epoch(spec, clock, floor, loader)
    result.extra = {"num_workers": loader.num_workers}
    emit(result)


if __name__ == "__main__":
    main()
