"""The host imaging step: the image of a point, single precision kept, the correction kept."""

import numpy as np

import clgrid
from clgrid import imaging

N, CELL = 64, 1e-2


def test_dirty_image_of_one_visibility_in_both_precisions(rng):
    """A visibility 1 at (u, v) images to cos(2 pi (u l + v m)) / correction; a complex64
    grid gives a float32 image within float32 rounding of the complex128 one."""
    stack = clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=0.0, num_planes=1, oversample=8)
    grid = np.zeros((1, N, N), np.complex128)
    grid[0, N // 2 + 3, N // 2 - 5] = 1.0                   # v = 3 cells, u = -5 cells
    l = (np.arange(N) - N // 2) * CELL
    du = 1.0 / (N * CELL)
    expected = np.cos(2 * np.pi * (-5 * du * l[None, :] + 3 * du * l[:, None]))
    double = imaging.dirty_image(grid, stack, 2.0)
    assert double.dtype == np.float64
    np.testing.assert_allclose(double[0] * imaging.grid_correction(stack, N) * 2.0, expected, atol=1e-12)
    single = imaging.dirty_image(grid.astype(np.complex64), stack, 2.0)
    assert single.dtype == np.float32
    assert np.abs(single - double).max() <= 1e-5 * np.abs(double).max()


def test_grid_correction_is_made_once_per_stack_and_size():
    stack = clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=0.0, num_planes=1, oversample=8)
    first = imaging.grid_correction(stack, N)
    assert imaging.grid_correction(stack, N) is first and not first.flags.writeable
    assert imaging.grid_correction(stack, 2 * N).shape == (2 * N, 2 * N)
    assert first.max() == first[N // 2, N // 2]            # the taper peaks at the centre
