"""Points on the unit sphere: the common ground for nearest-neighbour searches and distances."""

from __future__ import annotations

import numpy as np


def unit_vectors(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """``(n, 3)`` unit vectors of points given in degrees. Chord distances between them order
    points exactly as great-circle distances do, so a k-d tree on them finds spherical neighbours
    without caring about the seam or the poles."""
    phi = np.radians(np.asarray(lat, dtype=np.float64).ravel())
    lam = np.radians(np.asarray(lon, dtype=np.float64).ravel())
    cos_phi = np.cos(phi)
    return np.stack([cos_phi * np.cos(lam), cos_phi * np.sin(lam), np.sin(phi)], axis=-1)


def chord_to_degrees(chord: np.ndarray) -> np.ndarray:
    """Great-circle angle, in degrees, of a chord length on the unit sphere."""
    return np.degrees(2.0 * np.arcsin(np.clip(np.asarray(chord) / 2.0, 0.0, 1.0)))
