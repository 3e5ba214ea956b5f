"""Benchmark data sets: the SKA-like set of seed 000 Table 2 (scaled down) and the uniform set."""

import numpy as np
import pytest

from clgrid.tools import benchsets
from clgrid.planning.host import flatten_samples, plan_visibilities


def test_ska_like_supports_grow_with_w_from_4_to_72():
    supports = benchsets.ska_like_supports()
    assert supports.size == 601 and supports[0] == 4 and supports[-1] == 72
    assert np.all(np.diff(supports) >= 0)
    assert supports[300] == 21   # linear in w = p^2 / w_scale: a quarter of the way at the middle plane


def test_scaled_ska_like_set_keeps_the_full_geometry():
    small = benchsets.ska_like(scale=1 / 2000, time_steps=24, grid_size=18000)
    assert small.uvw.shape == (round(130816 / 2000) * 24, 3) and small.vis.shape == (small.uvw.shape[0], 1)
    k = small.kernels
    assert (k.num_planes, k.oversample, k.max_support, int(k.supports.min())) == (601, 4, 72, 4)
    samples = flatten_samples(small.uvw, small.vis)
    plan = plan_visibilities(samples, small.grid_size, small.cell_size, k, on_dropped="raise")
    # the active grid is about a third of the grid (seed 000: 5000 x 5500 of 18000^2), centred on it
    extent = [plan.grid_u.max() - plan.grid_u.min(), plan.grid_v.max() - plan.grid_v.min()]
    assert 2000 < min(extent) and max(extent) < 6500
    assert np.abs(np.median(plan.grid_u) - 9000) < 1500
    assert plan.plane.max() > 300           # long baselines reach the large kernels
    # the dense core: 224 of the 512 stations are within 1 km, so a third or so of the
    # visibilities sit within 1% of the grid around the centre
    near = (np.abs(plan.grid_u - 9000) < 90) & (np.abs(plan.grid_v - 9000) < 90)
    assert 0.2 < near.mean() < 0.6
    again = benchsets.ska_like(scale=1 / 2000, time_steps=24, grid_size=18000)
    np.testing.assert_array_equal(again.uvw, small.uvw)


def test_uniform_set_fills_the_same_region_without_a_core():
    uniform = benchsets.uniform_like(5000, grid_size=4096)
    samples = flatten_samples(uniform.uvw, uniform.vis)
    plan = plan_visibilities(samples, uniform.grid_size, uniform.cell_size, uniform.kernels, on_dropped="raise")
    assert plan.num_kept == 5000
    near = (np.abs(plan.grid_u - 2048) < 20) & (np.abs(plan.grid_v - 2048) < 20)
    assert near.mean() < 0.01
    with pytest.raises(ValueError, match="scale"):
        benchsets.ska_like(scale=0)
