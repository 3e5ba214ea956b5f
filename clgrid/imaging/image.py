"""From a grid to a dirty image: the FFT convention and the grid correction.

The image is ``I(l, m) = sum_{u,v} G[v, u] exp(+2 pi i (u l + v m))`` on an N x N
pixel grid with ``l = (column - N // 2) * cell_size`` and ``m = (row - N // 2) *
cell_size``, divided by the normalisation ``norm`` and by the grid correction (the
image of the w = 0 kernel) so that a point source of flux S reads S at its pixel.

The FFT runs on the host (the grid is a host array here) with scipy's threads, in the
grid's own precision: a complex64 grid is transformed in complex64 (its rounding, ~1e-7
per pass, is far below a float32 grid's), at a fraction of the time of a single-threaded
complex128 transform.  The grid correction depends on the kernel stack and the grid
size alone, so it is computed once per pair and kept with the stack.  For an analytic
kernel source (`clgrid.sources.analytic`) it is the kernel's exact Fourier transform, not
the image of its samples: visibilities sit anywhere between cells, and only the
continuous transform describes what their footprints multiply the sky by (then the
image is accurate to the kernel's ``accuracy`` over its central ``grid_size / sigma``
pixels).
"""

from __future__ import annotations

import weakref

import numpy as np

from ..call_warnings import warn
from ..errors import EmptyInputWarning
from ..sources.base import KernelSource, grid_to_image

__all__ = ["grid_to_image", "grid_correction", "dirty_image"]


def grid_correction(kernels: KernelSource, grid_size: int) -> np.ndarray:
    """What gridding multiplies a sky by (the source's `grid_correction`: the image of the
    plane-0 kernel sampled on whole cells, or an analytic kernel's exact transform).

    Made once per stack and grid size (float64, read-only) and kept while the stack lives.
    """
    corrections = _CORRECTIONS.setdefault(kernels, {})
    if grid_size in corrections:
        return corrections[grid_size]
    correction = np.array(kernels.grid_correction(grid_size), np.float64)
    correction.flags.writeable = False
    corrections[grid_size] = correction
    return correction


# `grid_correction` per stack (gone with it) and grid size.
_CORRECTIONS: "weakref.WeakKeyDictionary[KernelSource, dict]" = weakref.WeakKeyDictionary()


def dirty_image(grid: np.ndarray, kernels: KernelSource, norm) -> np.ndarray:
    """Real part of the normalised, grid-corrected image of each polarisation's grid:
    float32 for a complex64 grid, float64 for complex128.

    A polarisation of norm 0 (everything flagged or of zero weight) has a zero image,
    with a warning, rather than NaN.
    """
    grid = np.asarray(grid)
    if grid.ndim == 2:
        grid = grid[None]
    if grid.dtype not in (np.complex64, np.complex128):
        grid = grid.astype(np.complex128)
    norm = np.broadcast_to(np.asarray(norm, np.float64), (grid.shape[0],))
    empty = norm == 0
    if np.any(empty):
        warn(f"norm is 0 for polarisations {np.flatnonzero(empty).tolist()} (all flagged or of zero "
             f"weight): their images are zero", EmptyInputWarning, stacklevel=None)
    image = grid_to_image(grid).real.copy()
    real = image.dtype
    scale = np.where(empty, 0.0, 1.0 / np.where(empty, 1.0, norm)).astype(real)
    image *= scale[:, None, None]
    image /= grid_correction(kernels, grid.shape[-1]).astype(real)
    return image
