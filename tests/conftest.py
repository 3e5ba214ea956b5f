"""Shared test fixtures: a PoCL queue, fresh random inputs, the error measure of the seeds."""

import os
import secrets

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid.reference import relative_error  # noqa: F401  (the tests' accuracy measure)


@pytest.fixture
def rng(request):
    """A generator with a fresh seed each run; the seed is printed if the test fails."""
    seed = int(os.environ.get("CLGRID_TEST_SEED", secrets.randbits(32)))
    print(f"random seed {seed} (set CLGRID_TEST_SEED={seed} to repeat)")
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def queue():
    """The device under test: PoCL on the CPU (CI has no GPU), or $CLGRID_TEST_DEVICE."""
    return clgrid.runtime.get_queue(os.environ.get("CLGRID_TEST_DEVICE", "pocl"))


def random_visibilities(rng, n, grid_size, cell_size, w_max, npol=1, fill=0.8):
    """Uniform uvw filling ``fill`` of the grid's half-width, Gaussian complex visibilities."""
    du = 1.0 / (grid_size * cell_size)
    uv_max = fill * (grid_size // 2) * du
    uvw = np.column_stack([rng.uniform(-uv_max, uv_max, (n, 2)), rng.uniform(-w_max, w_max, n)])
    vis = rng.normal(size=(n, npol)) + 1j * rng.normal(size=(n, npol))
    return uvw, vis


def poison(gridder, npol):
    """Fill the device grid with NaN so a missed zeroing or a missed cell shows up."""
    buf = gridder.grid_buffer(npol)
    cl.enqueue_fill_buffer(gridder.queue, buf, np.array([np.nan], gridder.strategy.real_dtype),
                           0, buf.size).wait()
