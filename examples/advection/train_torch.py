"""Forecast the 24 h temperature change with a small CNN in PyTorch, trained in place through insitu.

    python -m examples.advection.train_torch --smoke      # synthetic, seconds
    python -m examples.advection.train_torch              # synthetic, 4 years, a few minutes
    python -m examples.advection.train_torch --store gs://weatherbench2/datasets/era5/1959-2023_01_10-6h-64x32_equiangular_conservative.zarr

insitu shuffles, batches and reads in parallel itself, so the DataLoader
takes its batches as they come (``batch_size=None``) with no worker
processes (``num_workers=0``). The data definition is
:mod:`examples.advection.data`; the run (normalisation, scoring against
persistence) is :mod:`examples.advection.shared`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

import insitu
from examples.advection import shared
from examples.common import run


class Torch:
    name = "torch"
    layout = "NCHW"  # torch's convolutions take channels first

    def setup(self, seed: int, learning_rate: float, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        torch.manual_seed(seed)
        layers: list[Any] = []
        channels = shared.N_INPUTS
        for kernel, width in shared.CONV_LAYERS:
            layers += [torch.nn.Conv2d(channels, width, kernel, padding="same"), torch.nn.ReLU()]
            channels = width
        layers.append(torch.nn.Conv2d(channels, 1, 1))
        self.torch: Any = torch  # typed as Any: the examples are checked without torch's stubs in mind
        self.model = torch.nn.Sequential(*layers)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=learning_rate)

    def loader(self, view: insitu.DatasetView) -> Any:
        from torch.utils.data import DataLoader

        return DataLoader(insitu.as_torch(view), batch_size=None, num_workers=0)

    def train_epoch(self, view: insitu.DatasetView, max_batches: int | None) -> float:
        self.model.train()
        total, count = 0.0, 0
        for i, batch in enumerate(self.loader(view)):
            if max_batches is not None and i == max_batches:
                break
            loss = self.torch.nn.functional.mse_loss(self.model(batch["x"]), batch["y"])
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            total += loss.item() * len(batch["x"])
            count += len(batch["x"])
        return total / max(count, 1)

    def predict(self, view: insitu.DatasetView) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        self.model.eval()
        with self.torch.no_grad():
            for batch in self.loader(view):
                yield self.model(batch["x"]).numpy(), batch["dt"].numpy()


def main(argv: Sequence[str] | None = None) -> int:
    return shared.main(Torch(), argv, __doc__ or "")


if __name__ == "__main__":
    run(main)
