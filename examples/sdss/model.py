"""The spectrum autoencoder, its PCA baseline, and the chi² that scores both.

Spectra arrive scaled to unit RMS (see ``train.Normalize``), flux ``x`` with
inverse variance ``w`` (0 where a pixel is masked). Both models reconstruct
``x`` from ``k`` numbers per spectrum; the score is the reduced chi² over
good pixels, ``sum(w * (x - x_hat)**2) / count(w > 0)``: 1 is a
reconstruction as good as the noise allows.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def chi2_terms(x: np.ndarray, x_hat: np.ndarray, w: np.ndarray) -> tuple[float, int]:
    """``(sum of w * residual**2, good pixels)`` for a batch: summed over batches, then divided."""
    return float((w * (x - x_hat) ** 2).sum(dtype=np.float64)), int((w > 0).sum())


class Moments:
    """Per-wavelength mean and spread of the training spectra, masked pixels left out, in one pass."""

    def __init__(self, n_wave: int) -> None:
        self.n = np.zeros(n_wave)
        self.total = np.zeros(n_wave)
        self.squares = np.zeros(n_wave)

    def add(self, x: np.ndarray, w: np.ndarray) -> None:
        good = w > 0
        self.n += good.sum(axis=0)
        self.total += np.where(good, x, 0).sum(axis=0, dtype=np.float64)
        self.squares += np.where(good, x.astype(np.float64) ** 2, 0).sum(axis=0)

    @property
    def mean(self) -> np.ndarray:
        return self.total / np.maximum(self.n, 1)

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(np.maximum(self.squares / np.maximum(self.n, 1) - self.mean**2, 1e-12))


class PCA:
    """Principal components of the training spectra (masked pixels filled with the mean spectrum),
    from numpy's SVD; a spectrum is reconstructed by the inverse-variance-weighted least-squares fit
    of its good pixels by the mean plus ``k`` components (the best any ``k``-component linear
    model of these components can do for the chi²)."""

    def __init__(self, spectra: np.ndarray, weights: np.ndarray, k: int) -> None:
        good = weights > 0
        count = np.maximum(good.sum(axis=0), 1)
        self.mean = np.where(good, spectra, 0).sum(axis=0) / count
        filled = np.where(good, spectra, self.mean) - self.mean
        _, _, vt = np.linalg.svd(filled.astype(np.float64), full_matrices=False)
        self.components = vt[:k]  # (k, n_wave), orthonormal

    def reconstruct(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        v = self.components
        k = len(v)
        normal = np.einsum("kp,np,jp->nkj", v, w, v) + 1e-9 * np.eye(k)
        rhs = np.einsum("kp,np->nk", v, w * (x - self.mean))
        coeffs = np.linalg.solve(normal, rhs[..., None])[..., 0]
        return (self.mean + coeffs @ v).astype(np.float32)


class SpectrumAutoencoder(nn.Module):
    """An MLP autoencoder with a ``k``-number bottleneck.

    Works on standardised spectra (``(x - mean) / std`` per wavelength, from
    the training set); masked pixels are filled with the mean before
    encoding, and the output is mapped back to flux units."""

    mean: torch.Tensor  # buffers: saved with the model, moved with it
    std: torch.Tensor

    def __init__(self, mean: np.ndarray, std: np.ndarray, k: int, hidden: int = 256) -> None:
        super().__init__()
        n_wave = len(mean)
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))
        self.register_buffer("std", torch.as_tensor(std, dtype=torch.float32))
        self.encoder = nn.Sequential(
            nn.Linear(n_wave, hidden), nn.GELU(), nn.Linear(hidden, 64), nn.GELU(), nn.Linear(64, k)
        )
        self.decoder = nn.Sequential(
            nn.Linear(k, 64), nn.GELU(), nn.Linear(64, hidden), nn.GELU(), nn.Linear(hidden, n_wave)
        )

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        mean, std = self.mean, self.std
        standard = (torch.where(w > 0, x, mean) - mean) / std
        return self.decoder(self.encoder(standard)) * std + mean


def chi2_loss(x_hat: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Reduced chi² of a batch: the training loss, and the score."""
    return (w * (x_hat - x) ** 2).sum() / (w > 0).sum().clamp(min=1)
