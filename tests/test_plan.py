"""Planning: bad input is refused by name, dropped visibilities are counted, packing round-trips."""

import warnings

import numpy as np
import pytest

import clgrid
from clgrid.planning.host import flatten_samples, plan_visibilities

from conftest import random_visibilities

N, CELL = 64, 4e-3


@pytest.fixture(scope="module")
def stack():
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=80, num_planes=5,
                                           oversample=4, max_support=8)


def test_bad_inputs_name_the_argument(rng, stack):
    uvw, vis = random_visibilities(rng, 10, N, CELL, 80)
    grid = lambda *a, **kw: clgrid.reference.grid(*a, **kw)  # noqa: E731
    cases = [
        (dict(uvw=uvw[:, :2]), ValueError, "uvw"),
        (dict(uvw=uvw.astype(complex)), TypeError, "uvw"),
        (dict(vis=vis.real), TypeError, "vis"),
        (dict(vis=vis[:5]), ValueError, "vis"),
        (dict(vis=np.concatenate([vis] * 3, axis=1)), ValueError, "polarisations"),
        (dict(uvw=np.where(np.arange(10)[:, None] == 3, np.nan, uvw)), ValueError, "uvw"),
        (dict(vis=np.where(np.arange(10)[:, None] == 3, np.inf, vis)), ValueError, "vis"),
        (dict(weights=-np.ones(10)[:, None]), ValueError, "weights"),
        (dict(weights=np.full((10, 1), np.nan)), ValueError, "weights"),
        (dict(weights=np.ones(7)), ValueError, "weights"),
        (dict(flags=np.zeros((10, 1))), TypeError, "flags"),
        (dict(freqs=np.array([-1.0])), ValueError, "freqs"),
        (dict(grid_size=63), ValueError, "grid_size"),
        (dict(grid_size=64.0), TypeError, "grid_size"),
        (dict(cell_size=-1.0), ValueError, "cell_size"),
        (dict(on_dropped="maybe"), ValueError, "on_dropped"),
    ]
    for change, error, word in cases:
        args = dict(uvw=uvw, vis=vis, grid_size=N, cell_size=CELL, kernels=stack)
        args.update(change)
        with pytest.raises(error, match=word):
            grid(**args)


def test_dropped_visibilities_are_counted_warned_or_raised(rng, stack):
    uvw, vis = random_visibilities(rng, 200, N, CELL, 60)
    du = 1 / (N * CELL)
    uvw[:7, 0] = (N // 2 - 1) * du              # footprint crosses the right edge
    uvw[7:10, 1] = -(N // 2 + 5) * du           # centre off the grid
    uvw[10:14, 2] = 500.0                       # beyond the last w-plane
    samples = flatten_samples(uvw, vis)
    with pytest.warns(UserWarning, match="14 of 200 visibilities not gridded: 10 off"):
        plan = plan_visibilities(samples, N, CELL, stack)
    assert (plan.num_off_grid, plan.num_beyond_stack, plan.num_kept) == (10, 4, 186)
    with pytest.raises(clgrid.DroppedVisibilitiesError, match="4 beyond"):
        plan_visibilities(samples, N, CELL, stack, on_dropped="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert plan_visibilities(samples, N, CELL, stack, on_dropped="ignore").num_dropped == 14


def test_packed_plan_round_trips(rng, stack):
    uvw, vis = random_visibilities(rng, 500, N, CELL, 80)
    plan = plan_visibilities(flatten_samples(uvw, vis), N, CELL, stack, on_dropped="ignore")
    packed = plan.packed().reshape(-1, 4)
    # the decoding of clgrid/cl_kernels/plan.cl, in numpy
    z, w = packed[:, 2], packed[:, 3]
    off_u = (z.astype(np.uint32) << 16).view(np.int32) >> 16
    off_v = z >> 16
    np.testing.assert_array_equal(packed[:, 0], plan.grid_u)
    np.testing.assert_array_equal(packed[:, 1], plan.grid_v)
    np.testing.assert_array_equal(off_u, plan.off_u)
    np.testing.assert_array_equal(off_v, plan.off_v)
    np.testing.assert_array_equal(w & 0x7FFFFFFF, plan.plane)
    np.testing.assert_array_equal(w < 0, plan.conj)
    assert set(np.unique(plan.off_u)) == set(range(-2, 3))
    assert plan.conj.any() and not plan.conj.all()
