"""What accuracy a W-projection `KernelStack` gives, measured: the image it makes against a
direct Fourier transform.

`clgrid.vis2dirty` takes an ``epsilon`` and chooses its kernel to meet it
(`clgrid.sources.accuracy`); a W-projection stack (the seeds' semantics: nearest oversampled
table entry, nearest w-plane, a grid the size of the image) has no such parameter,
and its error depends on its oversampling, its planes, its taper and on where in the
image one looks (aliasing grows towards the edges: there is no padding).  So it is
measured, the way `benchmarks/image_errors.py` makes the table in docs/benchmarks/imaging.md:
random visibilities over 80 % of the grid's uv range with w up to ``w_max``, gridded by
the float64 reference gridder (`clgrid.reference`, which every device strategy matches
to rounding), made into an image (`clgrid.imaging.dirty_image`) and compared at
sampled pixels with the direct sum

    dft[l, m] = Re sum_k V_k exp(+2 pi i (u_k l + v_k m - w_k (n - 1)))

(the convention of vis2dirty and of data read through `clgrid.io`; tests/test_conventions.py).
An analytic kernel source (`KernelStack.analytic`) states its accuracy instead
(``accuracy``, for the image's central ``grid_size / sigma`` pixels); measured here, its
inner half agrees where ``sigma < 2`` (tests/test_analytic_kernel.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..imaging.image import dirty_image
from ..sources.tables import KernelStack
from ..reference import grid as reference_grid

__all__ = ["StackError", "stack_image_error"]


@dataclass(frozen=True)
class StackError:
    """Relative L2 errors of a stack's image at the sampled pixels: over the whole image and
    over its inner half (each axis halved), with what was measured."""

    whole: float
    inner_half: float
    num_vis: int
    num_pixels: int
    w_max: float


def stack_image_error(kernels: KernelStack, grid_size: int, cell_size: float, w_max: float | None = None,
                      num_vis: int = 2000, num_pixels: int = 4096, seed: int = 0) -> StackError:
    """Measure the image error of ``kernels`` on a ``grid_size``^2 grid of ``cell_size``
    radians, for w up to ``w_max`` wavelengths (default: the largest w the stack holds).
    Costs a reference gridding of ``num_vis`` visibilities, one FFT of the grid and
    ``num_vis * num_pixels`` complex exponentials."""
    if w_max is None:
        w_max = (kernels.num_planes - 0.5) ** 2 / kernels.w_scale if kernels.w_scale > 0 else 0.0
    if not (np.isfinite(w_max) and w_max >= 0):
        raise ValueError(f"w_max must be a non-negative number of wavelengths, got {w_max!r}")
    rng = np.random.default_rng(seed)
    uv_max = 0.4 / cell_size
    u, v = rng.uniform(-uv_max, uv_max, (2, num_vis))
    w = rng.uniform(-w_max, w_max, num_vis)
    vis = rng.normal(size=num_vis) + 1j * rng.normal(size=num_vis)
    uvw = np.column_stack([u, v, w])
    grid = reference_grid(uvw, vis[:, None], grid_size=grid_size, cell_size=cell_size, kernels=kernels)
    image = dirty_image(grid, kernels, 1.0)[0]                      # [m, l]
    count = min(num_pixels, grid_size * grid_size)
    pixels = rng.choice(grid_size * grid_size, count, replace=False)
    im, il = np.divmod(pixels, grid_size)
    l = (il - grid_size // 2) * cell_size
    m = (im - grid_size // 2) * cell_size
    n = np.sqrt(1.0 - l * l - m * m)
    dft = np.zeros(count)
    for s in range(0, num_vis, 256):
        k = slice(s, s + 256)
        phase = u[k, None] * l[None] + v[k, None] * m[None] - w[k, None] * (n - 1.0)[None]
        dft += (vis[k] @ np.exp(2j * np.pi * phase)).real
    got = image[im, il]
    quarter = grid_size // 4
    inner = (np.abs(il - grid_size // 2) < quarter) & (np.abs(im - grid_size // 2) < quarter)

    def rel(mask):
        return float(np.linalg.norm(got[mask] - dft[mask]) / np.linalg.norm(dft[mask]))

    return StackError(rel(np.ones(count, bool)), rel(inner), num_vis, count, float(w_max))
