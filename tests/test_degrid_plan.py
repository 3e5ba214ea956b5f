"""Planning for degridding: positions without visibilities, the orders the degridders use."""

import numpy as np
import pytest

import clgrid
from clgrid.plan import flatten_positions, plan_visibilities, sorted_by_cell, track_keys

N, CELL = 64, 4e-3


@pytest.fixture(scope="module")
def stack():
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=80, num_planes=5,
                                           oversample=4, max_support=6)


def planned(rng, stack, shape, nchan=None, npol=1):
    uvw = np.concatenate([rng.uniform(-4, 4, shape + (2,)), rng.uniform(-80, 80, shape + (1,))], axis=-1)
    freqs = None if nchan is None else np.linspace(1e8, 1.2e8, nchan)
    if freqs is not None:
        uvw *= clgrid.plan.SPEED_OF_LIGHT / 1.2e8
    samples = flatten_positions(uvw, npol, freqs=freqs)
    return samples, plan_visibilities(samples, N, CELL, stack)


@pytest.mark.parametrize("tile", [1, 5, 8, 64])
def test_sorted_by_cell_orders_plane_then_tiles_then_cells_stably(rng, stack, tile):
    samples, plan = planned(rng, stack, (3000,))
    ordered = sorted_by_cell(plan, tile)
    expected = np.lexsort((plan.grid_u % tile, plan.grid_v % tile, plan.grid_u // tile,
                           plan.grid_v // tile, plan.plane))          # stable, like the sort
    np.testing.assert_array_equal(ordered.sample, plan.sample[expected])
    for name in ("grid_u", "grid_v", "off_u", "off_v", "plane", "conj", "support"):
        np.testing.assert_array_equal(getattr(ordered, name), getattr(plan, name)[expected])
    assert ordered.num_kept == plan.num_kept > 2500 and ordered.norm is plan.norm
    with pytest.raises(ValueError, match="tile"):
        sorted_by_cell(plan, 0)


def test_track_keys_follow_baseline_and_channel(rng, stack):
    samples, plan = planned(rng, stack, (6, 7), nchan=3)
    keys = track_keys(plan, samples)
    baseline, rest = np.divmod(plan.sample, 7 * 3)
    np.testing.assert_array_equal(keys, baseline * 3 + rest % 3)
    samples, plan = planned(rng, stack, (20,), nchan=2)     # flat uvw: one track per channel
    np.testing.assert_array_equal(track_keys(plan, samples), plan.sample % 2)


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
