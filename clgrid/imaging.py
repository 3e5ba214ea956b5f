"""From a grid to a dirty image: the FFT convention and the grid correction.

The image is ``I(l, m) = sum_{u,v} G[v, u] exp(+2 pi i (u l + v m))`` on an N x N
pixel grid with ``l = (column - N // 2) * cell_size`` and ``m = (row - N // 2) *
cell_size``, divided by the normalisation ``norm`` and by the grid correction (the
image of the w = 0 kernel) so that a point source of flux S reads S at its pixel.
"""

from __future__ import annotations

import warnings

import numpy as np

from .errors import EmptyInputWarning
from .kernels import KernelStack

__all__ = ["grid_to_image", "grid_correction", "dirty_image"]


def grid_to_image(grid: np.ndarray) -> np.ndarray:
    """``sum G exp(+2 pi i (u l + v m))`` with both grid and image centred at N // 2."""
    n = grid.shape[-1]
    shifted = np.fft.ifftshift(grid, axes=(-2, -1))
    return np.fft.fftshift(np.fft.ifft2(shifted, axes=(-2, -1)), axes=(-2, -1)) * (n * n)


def grid_correction(kernels: KernelStack, grid_size: int) -> np.ndarray:
    """Image of the plane-0 kernel sampled on whole cells: what gridding multiplies a sky by."""
    s = int(kernels.supports[0])
    os = kernels.oversample
    full = kernels.full_plane(0)
    centre = full.shape[0] // 2
    taps = centre + np.arange(-s, s + 1) * os
    g = np.zeros((grid_size, grid_size), np.complex128)
    c = grid_size // 2
    g[c - s:c + s + 1, c - s:c + s + 1] = full[np.ix_(taps, taps)]
    return grid_to_image(g).real


def dirty_image(grid: np.ndarray, kernels: KernelStack, norm) -> np.ndarray:
    """Real part of the normalised, grid-corrected image of each polarisation's grid.

    A polarisation of norm 0 (everything flagged or of zero weight) has a zero image,
    with a warning, rather than NaN.
    """
    grid = np.asarray(grid)
    if grid.ndim == 2:
        grid = grid[None]
    norm = np.broadcast_to(np.asarray(norm, np.float64), (grid.shape[0],))
    empty = norm == 0
    if np.any(empty):
        warnings.warn(f"norm is 0 for polarisations {np.flatnonzero(empty).tolist()} (all flagged or of zero "
                      f"weight): their images are zero", EmptyInputWarning, stacklevel=2)
    image = grid_to_image(grid.astype(np.complex128)).real
    scale = np.where(empty, 0.0, 1.0 / np.where(empty, 1.0, norm))
    return image * scale[:, None, None] / grid_correction(kernels, grid.shape[-1])
