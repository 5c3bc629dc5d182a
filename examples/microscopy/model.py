"""The segmenter (a small U-Net) and its baseline (Otsu's threshold), with the IoU that scores both."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


def otsu_threshold(values: np.ndarray, bins: int = 256) -> float:
    """Otsu's threshold of ``values``: the histogram cut that maximises the between-class variance.

    With ``w0, w1`` the fractions of values below and above a cut and ``m0,
    m1`` their means, the between-class variance is ``w0 * w1 * (m0 - m1)**2``;
    it is evaluated at every bin edge at once from cumulative sums.
    """
    flat = np.asarray(values, dtype=np.float64).ravel()
    lo, hi = float(flat.min()), float(flat.max())
    if hi <= lo:
        return lo
    counts, edges = np.histogram(flat, bins=bins, range=(lo, hi))
    centres = (edges[:-1] + edges[1:]) / 2
    below = np.cumsum(counts)[:-1].astype(np.float64)  # cut after bin i: values in bins 0..i
    total = float(counts.sum())
    above = total - below
    sum_below = np.cumsum(counts * centres)[:-1]
    sum_all = float((counts * centres).sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        between = below * above * (sum_below / below - (sum_all - sum_below) / above) ** 2
    between[~np.isfinite(between)] = -1.0
    return float(edges[1 + int(np.argmax(between))])


def otsu_segment(planes: np.ndarray) -> np.ndarray:
    """Foreground of each plane of ``planes`` (N, Y, X) by its own Otsu threshold."""
    return np.stack([p > otsu_threshold(p) for p in planes]) if len(planes) else planes.astype(bool)


class IoU:
    """Intersection over union of the foreground, accumulated over every plane scored."""

    def __init__(self) -> None:
        self.intersection = 0
        self.union = 0

    def add(self, predicted: np.ndarray, truth: np.ndarray) -> None:
        predicted, truth = predicted.astype(bool), truth.astype(bool)
        self.intersection += int((predicted & truth).sum())
        self.union += int((predicted | truth).sum())

    @property
    def value(self) -> float:
        return self.intersection / self.union if self.union else 1.0


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    """A two-level U-Net: (B, C, Y, X) planes to (B, Y, X) foreground logits.

    Fully convolutional, so it trains on patches and predicts whole planes;
    a plane whose sides are not multiples of 4 is padded (reflecting) and
    the logits cropped back. Batch normalisation (not group or instance
    normalisation, whose statistics would come from a patch in training and
    from a whole plane at test time) uses its running statistics in eval mode."""

    def __init__(self, channels: int = 1, width: int = 16) -> None:
        super().__init__()
        self.down1 = _block(channels, width)
        self.down2 = _block(width, 2 * width)
        self.bottom = _block(2 * width, 4 * width)
        self.up2 = nn.ConvTranspose2d(4 * width, 2 * width, 2, stride=2)
        self.dec2 = _block(4 * width, 2 * width)
        self.up1 = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.dec1 = _block(2 * width, width)
        self.head = nn.Conv2d(width, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, xx = x.shape[-2:]
        pad_y, pad_x = -y % 4, -xx % 4
        if pad_y or pad_x:
            x = F.pad(x, (0, pad_x, 0, pad_y), mode="reflect")
        d1 = self.down1(x)
        d2 = self.down2(F.max_pool2d(d1, 2))
        b = self.bottom(F.max_pool2d(d2, 2))
        u2 = self.dec2(torch.cat([self.up2(b), d2], dim=1))
        u1 = self.dec1(torch.cat([self.up1(u2), d1], dim=1))
        return self.head(u1)[:, 0, :y, :xx]
