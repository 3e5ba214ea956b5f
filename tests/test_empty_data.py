"""Empty data (no rows, or nothing kept) found by tests/test_properties.py: each gives
zeros of the right shape, or a clear error naming a wrong argument; none crashes.

- flags shaped like the visibilities, (0, npol), were refused as "not broadcasting";
- `Degridder.degrid` of no rows raised "enqueue_copy cannot perform host-to-host transfers";
- `vis2dirty` / `dirty2vis` of no rows with a mask raised pyopencl's INVALID_BUFFER_SIZE;
- `WGridder` took a ``wgt`` of any shape when nothing was kept.
"""

import warnings

import numpy as np
import pytest

import clgrid

N, CELL = 64, 4e-3


@pytest.fixture(scope="module")
def stack():
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=100, num_planes=4, oversample=4,
                                           max_support=8)


@pytest.mark.parametrize("npol", [1, 2])
def test_no_rows_with_per_visibility_flags(queue, stack, npol):
    flags = np.zeros((0, npol), bool)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grid = clgrid.Gridder(N, CELL, stack, device=queue).grid(np.zeros((0, 3)), np.zeros((0, npol), np.complex64),
                                                                 flags=flags)
        vis = clgrid.Degridder(N, CELL, stack, device=queue).degrid(np.ones((npol, N, N), np.complex64),
                                                                    np.zeros((0, 3)), flags=flags)
    assert grid.shape == (npol, N, N) and not np.any(grid)
    assert vis.shape == (0, npol)


def test_degrid_of_no_rows_gives_an_empty_array(queue, stack):
    degridder = clgrid.Degridder(N, CELL, stack, device=queue)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vis = degridder.degrid(np.ones((2, N, N), np.complex64), np.zeros((0, 4, 3)), freqs=[1e8, 2e8])
        out = np.zeros((0, 4, 2, 2), np.complex64)
        assert degridder.degrid(np.ones((2, N, N), np.complex64), np.zeros((0, 4, 3)), freqs=[1e8, 2e8],
                                out=out) is out
    assert vis.shape == (0, 4, 2, 2) and vis.dtype == np.complex64


@pytest.mark.parametrize("mask", [None, "given"])
def test_imaging_no_rows(device_name, mask):
    mask = None if mask is None else np.zeros((0, 2), np.uint8)
    args = dict(uvw=np.zeros((0, 3)), freq=[1e8, 1.2e8], mask=mask, pixsize_x=1e-3, pixsize_y=1e-3, epsilon=1e-6,
                device=device_name)
    with pytest.warns(UserWarning, match="zero"):
        image = clgrid.vis2dirty(vis=np.zeros((0, 2), complex), npix_x=16, npix_y=20, **args)
    assert image.shape == (16, 20) and not np.any(image)
    with pytest.warns(UserWarning, match="zero"):
        vis = clgrid.dirty2vis(dirty=np.ones((16, 20)), **args)
    assert vis.shape == (0, 2)


@pytest.mark.parametrize("rows", [0, 5])
def test_wgridder_checks_wgt_when_nothing_is_kept(device_name, rows):
    op = clgrid.WGridder(np.ones((rows, 3)), 1e8, 16, 16, 1e-3, 1e-3, 1e-6, mask=np.zeros((rows, 1)),
                         device=device_name)
    with pytest.raises(ValueError, match=r"wgt must have shape"):
        op.vis2dirty(np.zeros((rows, 1), complex), wgt=np.ones((rows + 1, 1)))
    with pytest.raises(ValueError, match=r"wgt must have shape"):
        op.dirty2vis(np.zeros((16, 16)), wgt=np.ones((rows, 2)))
