"""Pinned staging carries host arrays to and from the device piece by piece, intact."""

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid import reference
from clgrid.transfer import Staging

from conftest import random_visibilities, relative_error


@pytest.mark.parametrize("nbytes", [1, 4095, 4096, 3 * 4096 + 17])
def test_staging_round_trips_every_byte(rng, queue, nbytes):
    staging = Staging(queue, piece=4096)                       # several pieces, both buffers in turn
    host = rng.integers(0, 256, nbytes, dtype=np.uint8)
    buffer = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE, nbytes)
    staging.upload(host, buffer)
    direct = np.empty_like(host)
    cl.enqueue_copy(queue, direct, buffer).wait()
    np.testing.assert_array_equal(direct, host)
    back = np.full(nbytes, 7, np.uint8)                        # poisoned
    staging.download(buffer, back)
    np.testing.assert_array_equal(back, host)


def test_operators_through_staging_match_the_reference(rng, queue):
    n, cell = 64, 4e-3
    stack = clgrid.KernelStack.w_projection(grid_size=n, cell_size=cell, w_max=50, num_planes=4, oversample=4,
                                            max_support=5)
    uvw, vis = random_visibilities(rng, 2000, n, cell, 50, npol=2)
    gridder = clgrid.Gridder(n, cell, stack, method="tiled", device=queue, precision="double")
    degridder = clgrid.Degridder(n, cell, stack, device=queue, precision="double")
    for operator in (gridder, degridder):       # as on a GPU, where staging is used (small pieces here)
        operator._staging = Staging(operator.transfer_queue, piece=5000)
    grid = gridder.grid(uvw, vis)
    assert relative_error(grid, reference.grid(uvw, vis, n, cell, stack)) < 1e-12
    got = degridder.degrid(grid, uvw)
    assert relative_error(got, reference.degrid(grid, uvw, n, cell, stack)) < 1e-12
