"""clgrid.tools.stack_accuracy: a W-projection stack's measured image error tells a good stack
from a bad one."""

import numpy as np
import pytest

import clgrid
from clgrid.tools.stack_accuracy import stack_image_error

GRID, CELL, W_MAX = 64, 4e-3, 120.0


def stack(oversample=8):
    return clgrid.KernelStack.w_projection(grid_size=GRID, cell_size=CELL, w_max=W_MAX, num_planes=16,
                                           oversample=oversample)


def test_error_is_what_the_table_says_and_wrong_w_is_caught():
    good = stack()
    error = stack_image_error(good, GRID, CELL, W_MAX, num_vis=600, num_pixels=1500, seed=1)
    assert error.inner_half < 0.12 and error.whole < 0.5 and error.num_pixels == 1500
    # the same kernels with the sign of w turned round defocus the image
    flipped = clgrid.KernelStack.from_arrays([np.conj(p) for p in good.planes], good.supports, good.oversample,
                                             good.w_scale, good.taper)
    wrong = stack_image_error(flipped, GRID, CELL, W_MAX, num_vis=600, num_pixels=1500, seed=1)
    assert wrong.inner_half > 3 * error.inner_half, (wrong, error)


def test_bad_w_max_is_refused():
    with pytest.raises(ValueError, match="w_max"):
        stack_image_error(stack(), GRID, CELL, w_max=float("nan"))
