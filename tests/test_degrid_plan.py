"""Planning for degridding: positions without visibilities, the orders the degridders use."""

import numpy as np
import pytest

import clgrid
from clgrid.planning.baseline_order import baseline_length
from clgrid.planning.host import flatten_positions, plan_visibilities

N, CELL = 64, 4e-3


@pytest.fixture(scope="module")
def stack():
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=80, num_planes=5,
                                           oversample=4, max_support=6)


def planned(rng, stack, shape, nchan=None, npol=1):
    uvw = np.concatenate([rng.uniform(-4, 4, shape + (2,)), rng.uniform(-80, 80, shape + (1,))], axis=-1)
    freqs = None if nchan is None else np.linspace(1e8, 1.2e8, nchan)
    if freqs is not None:
        uvw *= clgrid.planning.host.SPEED_OF_LIGHT / 1.2e8
    samples = flatten_positions(uvw, npol, freqs=freqs)
    return samples, plan_visibilities(samples, N, CELL, stack)


def test_a_baseline_is_its_time_steps_times_channels(rng, stack):
    samples, _ = planned(rng, stack, (6, 7), nchan=3)
    assert baseline_length(samples) == 7 * 3
    samples, _ = planned(rng, stack, (20,), nchan=2)     # flat uvw: one baseline, a track per channel
    assert baseline_length(samples) == 20 * 2


def test_one_track_definition_for_gridding_and_degridding(rng, stack):
    """(2, 3, 7) uvw: six baselines of seven time steps for both directions."""
    samples, plan = planned(rng, stack, (2, 3, 7), nchan=2)
    baseline = clgrid.planning.baseline_order.baseline_of(samples, plan.sample)
    np.testing.assert_array_equal(baseline, plan.sample // (7 * 2))
    assert baseline_length(samples) == 7 * 2
    assert clgrid.planning.baseline_order.track_shape(samples) == (6, 7, 2)


def test_positions_and_unflatten_give_the_callers_shape(rng, stack):
    flags = np.zeros((5, 4, 3, 2), bool)
    flags[1, 2, 0, 1] = True
    flags[2, :, 1] = True
    uvw = rng.uniform(-3, 3, (5, 4, 3))
    samples = flatten_positions(uvw, 2, flags=flags, freqs=np.array([1e8, 1.1e8, 1.2e8]))
    assert samples.shape == (5, 4, 3, 2) and samples.vis is None and samples.npol == 2
    assert samples.usable.sum() == 60 - 4
    values = np.arange(1, 61 * 2 - 1, dtype=float).reshape(-1, 2)[:60] + 0j
    out = samples.unflatten(np.arange(60), values)
    assert out.shape == (5, 4, 3, 2) and not np.any(out[flags]) and np.all(out[~flags])
    np.testing.assert_array_equal(out.reshape(-1, 2)[~flags.reshape(-1, 2)], values[~flags.reshape(-1, 2)])
