"""The FFT seam of the w-gridding operator: unnormalised 2-D transforms of a padded grid.

`HostFFT` runs scipy.fft with threads on host arrays, in the grid's own precision
(complex64 stays complex64).  A device FFT (pyvkfft) slots in as another class with the
same two methods; the operator calls nothing else.
"""

from __future__ import annotations

import os

import numpy as np

__all__ = ["HostFFT"]


class HostFFT:
    """``backward``: ``sum_g G[g] exp(+2 pi i g a / N)``; ``forward``: the same with ``-``.
    Both unscaled, in place where scipy can, over the last two axes."""

    def __init__(self, workers: int | None = None):
        self.workers = int(workers) if workers and workers > 0 else (os.cpu_count() or 1)

    def backward(self, grid: np.ndarray) -> np.ndarray:
        import scipy.fft

        return scipy.fft.ifft2(grid, norm="forward", overwrite_x=True, workers=self.workers)

    def forward(self, grid: np.ndarray) -> np.ndarray:
        import scipy.fft

        return scipy.fft.fft2(grid, norm="backward", overwrite_x=True, workers=self.workers)
