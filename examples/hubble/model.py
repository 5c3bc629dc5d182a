"""The denoiser (a few convolutions, in torch), its training loop, and the held-out scores.

Training: noisy frame -> clean frame, pixel by pixel. The network sees the
normalised noisy frame and the good-pixel mask, and predicts the noise, which
is subtracted from its input (a residual denoiser). The loss is the mean
squared error over good pixels only: masked pixels have no trustworthy
target and count in no loss and no score.

Scores: PSNR in dB on each held-out frame, in e-/s over its good pixels,
with the frame's truth range (max - min) as the peak, averaged over frames.
The baseline is a median filter (``scipy.ndimage.median_filter``, 3x3) of
the same noisy input, with masked pixels at the sky level.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy.ndimage import median_filter  # type: ignore[import-untyped]  # scipy ships no type information
from torch import nn

MEDIAN_SIZE = 3


def build_denoiser(width: int = 16, depth: int = 5) -> nn.Sequential:
    """``depth`` 3x3 convolutions of ``width`` channels (ReLU between): 3 features in, the noise out.

    Used through :func:`denoise`. (A plain ``Sequential`` rather than a
    ``Module`` subclass: the types session checks the examples without torch.)
    """
    layers: list[nn.Module] = [nn.Conv2d(3, width, 3, padding=1), nn.ReLU()]
    for _ in range(depth - 2):
        layers += [nn.Conv2d(width, width, 3, padding=1), nn.ReLU()]
    layers.append(nn.Conv2d(width, 1, 3, padding=1))
    return nn.Sequential(*layers)


def denoise(net: nn.Sequential, x: torch.Tensor, good: torch.Tensor) -> torch.Tensor:
    """The denoised frames: ``x`` (B, H, W, normalised) minus the noise ``net`` predicts."""
    # Bright stars reach thousands of sigma: the network sees a clipped linear copy (faint
    # detail) and an asinh-compressed one (bright sources), which keep activations tame.
    features = torch.stack([x.clamp(-20.0, 20.0) / 4.0, torch.asinh(x / 8.0), good], dim=1)
    return x - net(features)[:, 0]


def masked_mse(prediction: torch.Tensor, target: torch.Tensor, good: torch.Tensor) -> torch.Tensor:
    return ((prediction - target) ** 2 * good).sum() / good.sum().clamp(min=1.0)


def _crops(
    tensors: list[torch.Tensor], size: int, per_frame: int, generator: torch.Generator
) -> list[torch.Tensor]:
    """``per_frame`` random ``size`` x ``size`` windows of every frame (the same ones in each tensor)."""
    b, h, w = tensors[0].shape
    if h <= size and w <= size:
        return tensors
    size_y, size_x = min(size, h), min(size, w)
    oy = torch.randint(0, h - size_y + 1, (b, per_frame), generator=generator)
    ox = torch.randint(0, w - size_x + 1, (b, per_frame), generator=generator)
    rows = (oy[..., None] + torch.arange(size_y))[..., :, None]  # (b, k, sy, 1)
    cols = (ox[..., None] + torch.arange(size_x))[..., None, :]  # (b, k, 1, sx)
    frame = torch.arange(b)[:, None, None, None]
    return [t[frame, rows, cols].reshape(b * per_frame, size_y, size_x) for t in tensors]


def _flip(tensors: list[torch.Tensor], generator: torch.Generator) -> list[torch.Tensor]:
    """One of the 8 flips / right-angle turns for the whole batch (the PSF is symmetric)."""
    k = int(torch.randint(0, 8, (1,), generator=generator))
    out = [torch.rot90(t, k % 4, dims=(1, 2)) for t in tensors]
    return [torch.flip(t, dims=(2,)) for t in out] if k >= 4 else out


@dataclass
class TrainLog:
    epochs: int = 0
    steps: int = 0
    last_loss: float = math.nan


def train(
    dataset: Any,
    model: nn.Sequential,
    *,
    epochs: int,
    lr: float,
    seed: int,
    crop: int,
    crops_per_frame: int,
) -> TrainLog:
    """Adam on the masked MSE, over ``dataset.train`` fed through ``insitu.as_torch``."""
    from torch.utils.data import DataLoader

    import insitu

    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    # insitu shuffles, batches and reads in parallel itself: no sampler, no worker processes.
    loader = DataLoader(insitu.as_torch(dataset.train), batch_size=None, num_workers=0)
    total_steps = max(1, epochs * len(loader))
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=lr, total_steps=total_steps)
    log = TrainLog()
    model.train()
    for epoch in range(epochs):
        dataset.set_epoch(epoch)
        for batch in loader:
            x, y, good = _crops([batch["x"], batch["y"], batch["good"]], crop, crops_per_frame, generator)
            x, y, good = _flip([x, y, good], generator)
            loss = masked_mse(denoise(model, x, good), y, good)
            optimizer.zero_grad()
            torch.autograd.backward(loss)
            optimizer.step()
            if log.steps < total_steps - 1:
                schedule.step()
            log.steps += 1
            log.last_loss = float(loss.item())
        log.epochs += 1
    return log


@dataclass
class Scores:
    """Mean PSNR (dB) over held-out frames: the model, the median filter, and the noisy input itself."""

    model: float
    median: float
    noisy: float
    frames: int


def psnr(estimate: np.ndarray, truth: np.ndarray, good: np.ndarray) -> float:
    """PSNR of one frame over its good pixels, with the truth's range as the peak."""
    t = truth[good]
    mse = float(np.mean((estimate[good] - t) ** 2))
    peak = float(t.max() - t.min())
    return 10.0 * math.log10(peak**2 / max(mse, 1e-30))


def median_baseline(x: np.ndarray) -> np.ndarray:
    """3x3 median filter of each frame (x: (B, H, W), masked pixels already at the sky level)."""
    return median_filter(x, size=(1, MEDIAN_SIZE, MEDIAN_SIZE), mode="reflect")


def evaluate(view: Iterable[Any], model: nn.Sequential) -> Scores:
    """Scores over every frame of ``view`` (an insitu view of DenoisingPairs batches, numpy)."""
    model.eval()
    scores: dict[str, list[float]] = {"model": [], "median": [], "noisy": []}
    with torch.no_grad():
        for batch in view:
            x, y, good = batch["x"], batch["y"], batch["good"] > 0
            sky, sigma = batch["sky"][:, None, None], batch["sigma"][:, None, None]
            denoised = denoise(model, torch.from_numpy(x), torch.from_numpy(batch["good"])).numpy()
            estimates = {"model": denoised, "median": median_baseline(x), "noisy": x}
            truth = y * sigma + sky
            for row in range(x.shape[0]):
                if not good[row].any():
                    continue
                for name, estimate in estimates.items():
                    scores[name].append(psnr(estimate[row] * sigma[row] + sky[row], truth[row], good[row]))
    means = {k: float(np.mean(v)) if v else math.nan for k, v in scores.items()}
    return Scores(
        model=means["model"], median=means["median"], noisy=means["noisy"], frames=len(scores["model"])
    )
