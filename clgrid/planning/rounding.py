"""The reference's rounding: C's round(), which planning (host and device) must match."""

from __future__ import annotations

import numpy as np

__all__ = ["round_half_away"]


def round_half_away(x: np.ndarray) -> np.ndarray:
    """C's round(): nearest integer, halves away from zero (numpy rounds halves to even)."""
    x = np.asarray(x, np.float64)
    nearest = np.rint(x)                          # halves to even
    half = np.abs(x - nearest) == 0.5             # exact in binary floating point
    return np.where(half, x + np.copysign(0.5, x), nearest)
