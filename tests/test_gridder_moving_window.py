"""The moving-window gridder on PoCL against the float64 reference."""

import numpy as np
import pytest

import clgrid
from clgrid.tools import datasets
from clgrid.planning.baseline_order import baseline_of, hold_w, to_baseline_order
from clgrid.tools.benchsets import fixed_support_stack
from clgrid.planning.host import SPEED_OF_LIGHT, flatten_samples, plan_visibilities

from conftest import poison, relative_error

N, CELL = 128, 2e-3
DU = 1.0 / (N * CELL)                   # wavelengths per cell
TOLERANCE = {"single": 1e-5, "double": 1e-12}
FREQS = np.array([1.40e8, 1.45e8, 1.50e8])


@pytest.fixture(scope="module")
def stack():
    """Supports 3 .. 12 growing with |w|: tracks whose |w| changes cross supports."""
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=300, num_planes=8,
                                           oversample=8, max_support=12)


def arcs(rng, nbaseline, ntime, reach_cells=50, turn=1.2, w_max=300):
    """Elliptical arcs in wavelengths, like Earth-rotation tracks, with |w| swinging
    through the w-planes so a baseline's support changes along it."""
    angle = rng.uniform(0, 2 * np.pi, (nbaseline, 1)) + np.linspace(0, turn, ntime)
    radius = rng.uniform(0.15, 1.0, (nbaseline, 1)) * reach_cells * DU
    ratio = rng.uniform(0.3, 1.0, (nbaseline, 1))
    w = w_max * rng.uniform(0.3, 1.0, (nbaseline, 1)) * np.sin(angle + rng.uniform(0, np.pi, (nbaseline, 1)))
    return np.stack([radius * np.cos(angle), ratio * radius * np.sin(angle), w], axis=-1)


def noise(rng, shape):
    return rng.normal(size=shape) + 1j * rng.normal(size=shape)


def grid_both(queue, stack, uvw, vis, precision="single", tuning=None, grid_size=N, cell=CELL, **inputs):
    """The moving-window grid (device grid poisoned first) and the reference, with reports."""
    gridder = clgrid.Gridder(grid_size, cell, stack, method="moving_window", device=queue,
                             precision=precision, tuning=tuning, on_dropped="ignore")
    poison(gridder, vis.shape[-1])
    out, report = gridder.grid(uvw, vis, return_report=True, **inputs)
    ref, ref_report = clgrid.reference.grid(uvw, vis, grid_size, cell, stack, on_dropped="ignore",
                                            return_report=True, **inputs)
    assert np.all(np.isfinite(out)), "a cell was never written (NaN poison survived)"
    assert report["gridded"] == ref_report["gridded"] > 0
    assert report["off_grid"] == ref_report["off_grid"]
    return out, ref, report


def plan_of(uvw, vis, stack, grid_size=N, cell=CELL, **inputs):
    samples = flatten_samples(uvw, vis, **inputs)
    return samples, plan_visibilities(samples, grid_size, cell, stack, on_dropped="ignore")


def test_moving_window_is_a_method():
    assert "moving_window" in clgrid.Gridder.methods


@pytest.mark.parametrize("precision", ["single", pytest.param("double", marks=pytest.mark.slow)])
@pytest.mark.parametrize("npol", [1, pytest.param(2, marks=pytest.mark.slow), 4])
def test_matches_reference_with_channels_and_changing_support(queue, rng, stack, precision, npol):
    uvw = arcs(rng, 12, 40) * SPEED_OF_LIGHT / FREQS.max()      # metres
    vis = noise(rng, (12, 40, FREQS.size, npol))
    weights = rng.uniform(0.1, 3.0, vis.shape)
    flags = rng.random(vis.shape) < 0.1
    inputs = dict(weights=weights, flags=flags, freqs=FREQS)
    samples, plan = plan_of(uvw, vis, stack, **inputs)
    baseline = baseline_of(samples, plan.sample)
    changing = [np.unique(plan.support[baseline == b]).size > 1 for b in range(12)]
    assert sum(changing) >= 6, "the tracks must cross supports for this test to mean anything"

    out, ref, report = grid_both(queue, stack, uvw, vis, precision, **inputs)
    assert out.dtype == (np.complex64 if precision == "single" else np.complex128)
    assert relative_error(out, ref) <= TOLERANCE[precision]
    np.testing.assert_allclose(report["norm"], plan.norm, rtol=1e-12)


@pytest.mark.parametrize("support, grid_size, nbaseline, ntime", [
    (3, 128, 10, 30), (8, 128, 8, 20), (20, 128, 4, 12), pytest.param(64, 256, 2, 3, marks=pytest.mark.slow)])
def test_kernel_sizes_7_to_129(queue, rng, support, grid_size, nbaseline, ntime):
    """Fixed supports from 7^2 to 129^2: large windows need many tiles per chunk."""
    kernels = fixed_support_stack(support, oversample=8, num_planes=4, w_max=100)
    reach = grid_size // 2 - support - 2
    cell = 1.0 / (grid_size * DU)
    uvw = arcs(rng, nbaseline, ntime, reach_cells=reach, w_max=100)
    vis = noise(rng, (nbaseline, ntime, 2))
    out, ref, _ = grid_both(queue, kernels, uvw, vis, grid_size=grid_size, cell=cell)
    assert relative_error(out, ref) <= TOLERANCE["single"]


def test_tracks_that_jump_and_leave_the_grid(queue, rng, stack):
    """A track out over the grid edge and back, one that wraps from +u to -u, one of
    random jumps (a flush at every sample): exact, and the dropped ones counted."""
    ntime = 60
    s = np.linspace(0, 1, ntime)
    edge = np.stack([(30 + 80 * np.sin(np.pi * s)) * DU, 10 * DU + 0 * s, 250 * s - 125], axis=-1)
    u = 45 * DU * np.where(s < 0.5, 1, -1) + 10 * DU * s
    wrap = np.stack([u, -20 * DU + 30 * DU * s, 40 + 0 * s], axis=-1)
    jumps = np.column_stack([rng.uniform(-50, 50, (ntime, 2)) * DU, rng.uniform(-300, 300, ntime)])
    uvw = np.stack([edge, wrap, jumps])
    vis = noise(rng, (3, ntime, 4))
    out, ref, report = grid_both(queue, stack, uvw, vis)
    assert report["off_grid"] > 10
    assert relative_error(out, ref) <= TOLERANCE["single"]


def test_single_time_step(queue, rng, stack):
    uvw = arcs(rng, 40, 1) * SPEED_OF_LIGHT / FREQS.max()
    vis = noise(rng, (40, 1, FREQS.size, 2))
    out, ref, _ = grid_both(queue, stack, uvw, vis, freqs=FREQS)
    assert relative_error(out, ref) <= TOLERANCE["single"]


def lofar_observation(rng, nbaseline, ntime, integration_s, freqs, support):
    """uvw (metres) of random LOFAR HBA baselines, shrunk so that at the highest frequency
    the longest just fits the N^2 grid (with a kernel's support) of a 15 degree field:
    w keeps its proportion to u and v, so wide-field kernels of several supports are met."""
    layout = datasets.load_layout("lofar_hba")
    subset = np.sort(rng.choice(layout.num_baselines, nbaseline, replace=False))
    hour_angles = rng.uniform(-1, 1) + datasets.hour_angle_range(ntime * integration_s / 3600, integration_s)
    uvw = datasets.simulate_uvw(layout, declination=0.9, hour_angles=hour_angles, baseline_subset=subset)
    wavelengths = freqs.max() / SPEED_OF_LIGHT
    uvw *= (N // 2 - support - 2) * DU / (np.abs(uvw[..., :2]).max() * wavelengths)
    return uvw, np.abs(uvw[..., 2]).max() * wavelengths


def lofar_stack(w_max, num_planes=8):
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=w_max, num_planes=num_planes,
                                           oversample=8, max_support=12)


@pytest.mark.parametrize("precision", ["single", "double"])
def test_real_layout_tracks(queue, rng, precision):
    freqs = 1.5e8 + 1.2e4 * np.arange(4)
    uvw, w_max = lofar_observation(rng, 24, 40, 60.0, freqs, 12)
    vis = noise(rng, (24, 40, freqs.size, 4))
    out, ref, report = grid_both(queue, lofar_stack(w_max), uvw, vis, precision, freqs=freqs)
    assert report["off_grid"] == 0
    assert relative_error(out, ref) <= TOLERANCE[precision]


def test_reorder_helper_turns_rows_into_tracks(queue, rng, stack):
    nbaseline, ntime = 6, 9
    uvw = arcs(rng, nbaseline, ntime) * SPEED_OF_LIGHT / FREQS.max()
    vis = noise(rng, (nbaseline, ntime, FREQS.size, 2))
    weights = rng.uniform(0.5, 2.0, vis.shape)
    pairs = np.array([(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)])   # the sorted order
    times = 4.5e9 + 10.0 * np.arange(ntime)
    rows = rng.permutation(nbaseline * ntime)[:-5]            # shuffled, five rows missing
    b, t = np.divmod(rows, ntime)
    flat = lambda a: a.reshape((nbaseline * ntime,) + a.shape[2:])[rows]  # noqa: E731
    ordered = to_baseline_order(pairs[b, 0], pairs[b, 1], times[t], flat(uvw), flat(vis),
                                weights=flat(weights))

    assert ordered.uvw.shape == (nbaseline, ntime, 3) and ordered.vis.shape == vis.shape
    np.testing.assert_array_equal(ordered.antenna1, pairs[:, 0])
    np.testing.assert_array_equal(ordered.times, times)
    missing = ordered.row < 0
    assert missing.sum() == 5 and np.all(ordered.flags[missing])
    np.testing.assert_array_equal(ordered.uvw[~missing], uvw[~missing])
    np.testing.assert_array_equal(ordered.vis[~missing], vis[~missing])
    assert not ordered.flags[~missing].any()

    out, _, _ = grid_both(queue, stack, ordered.uvw, ordered.vis, weights=ordered.weights,
                          flags=ordered.flags, freqs=FREQS)
    ref = clgrid.reference.grid(flat(uvw), flat(vis), N, CELL, stack, weights=flat(weights),
                                freqs=FREQS, on_dropped="ignore")
    assert relative_error(out, ref) <= TOLERANCE["single"]


def test_reorder_helper_refuses_two_rows_for_one_slot():
    uvw, vis = np.zeros((3, 3)), np.ones((3, 1), complex)
    with pytest.raises(ValueError, match=r"2 rows for baseline \(0, 1\)"):
        to_baseline_order([0, 0, 1], [1, 1, 2], [5.0, 5.0, 5.0], uvw, vis)


def test_rows_without_a_baseline_axis_are_refused_with_the_way_out(queue, rng, stack):
    gridder = clgrid.Gridder(N, CELL, stack, method="moving_window", device=queue)
    uvw = arcs(rng, 1, 30)[0]
    with pytest.raises(ValueError, match="to_baseline_order"):
        gridder.grid(uvw, noise(rng, (30, 1)))


def dyadic_stack(rng):
    """Kernels of small multiples of 1/64 and variable support: every float32 sum of
    products with small integer visibilities is exact, whatever the order of additions."""
    supports = np.array([2, 3, 3, 5])
    planes = [(rng.integers(-64, 65, (q, q)) + 1j * rng.integers(-64, 65, (q, q))) / 64
              for q in (s * 4 + 3 for s in supports)]
    return clgrid.KernelStack.from_arrays(planes, supports, oversample=4, w_scale=3 ** 2 / 300)


def test_time_block_off_or_one_is_the_exact_path_to_the_bit(queue, rng):
    kernels = dyadic_stack(rng)
    uvw = arcs(rng, 10, 40)
    vis = rng.integers(-8, 9, (10, 40, 2)) + 1j * rng.integers(-8, 9, (10, 40, 2))
    samples = flatten_samples(uvw, vis)
    assert hold_w(samples, 1) is samples
    grids = [grid_both(queue, kernels, uvw, vis, tuning={"time_block": tb})[:2] for tb in (0, 1)]
    (off, ref), (one, _) = grids
    assert np.array_equal(off, ref) and np.array_equal(one, off)


# Seed 000 §8.1's approximation on fixed shrunk LOFAR tracks (`lofar_observation` with
# geometry seed 2: 30 baselines, 32 steps of 60 s, 8 w-planes, supports 3 to 5) and fresh
# visibilities: relative Frobenius error against the exact grid over 15 visibility draws
# 8e-4 / 2.2e-3 / 4.6e-3 (min / median / max) for time_block=2 and 4e-3 / 8.3e-3 / 1.3e-2
# for 8 (documented in clgrid/strategies/moving_window.py); asserted with headroom.
TIME_BLOCK_ERROR_BOUND = {2: 1e-2, 8: 3e-2}


@pytest.mark.parametrize("time_block", sorted(TIME_BLOCK_ERROR_BOUND))
def test_time_block_holds_w_and_its_error_is_bounded(queue, rng, time_block):
    freqs = 1.5e8 + 1.2e4 * np.arange(2)
    uvw, w_max = lofar_observation(np.random.default_rng(2), 30, 32, 60.0, freqs, 12)
    kernels = lofar_stack(w_max)
    vis = noise(rng, (30, 32, freqs.size, 1))
    out, exact, _ = grid_both(queue, kernels, uvw, vis, tuning={"time_block": time_block}, freqs=freqs)
    samples, _ = plan_of(uvw, vis, kernels, freqs=freqs)
    held = plan_visibilities(hold_w(samples, time_block), N, CELL, kernels, on_dropped="ignore")
    held_ref = clgrid.reference.grid_plan(held, samples.vis[held.sample], kernels)
    assert relative_error(out, held_ref) <= TOLERANCE["single"], "the held plan must be gridded exactly"
    error = relative_error(out, exact)
    print(f"time_block={time_block}: error vs exact {error:.3g}")
    assert 1e-4 < error <= TIME_BLOCK_ERROR_BOUND[time_block]


@pytest.mark.parametrize("tuning", [
    {"coarsen_u": 1, "coarsen_v": 1},
    {"coarsen_u": 3, "coarsen_v": 2, "work_group_size": 32},
    {"coarsen_u": 1, "coarsen_v": 4, "work_group_size": 16},
    {"batch": 5, "chunk_visibilities": 7},
])
def test_tuning_changes_the_launch_not_the_result(queue, rng, stack, tuning):
    uvw = arcs(rng, 8, 30) * SPEED_OF_LIGHT / FREQS.max()
    vis = noise(rng, (8, 30, FREQS.size, 2))
    out, ref, _ = grid_both(queue, stack, uvw, vis, tuning=tuning, freqs=FREQS)
    assert relative_error(out, ref) <= TOLERANCE["single"]


def test_plain_flush_warns_and_is_exact_for_one_chunk(queue, rng):
    """Without atomics only one work-group may own a grid point: one chunk, one baseline.
    w keeps one sign, since a track whose w changes sign is two chunks (the kernel is
    conjugated on one side), two work-groups whose plain adds race on a GPU."""
    kernels = fixed_support_stack(6, oversample=8, num_planes=4, w_max=100)
    uvw = arcs(rng, 1, 50, w_max=100)
    uvw[..., 2] = np.abs(uvw[..., 2])
    vis = noise(rng, (1, 50, 1))
    one_group = {"flush": "plain", "work_group_size": 64}     # the 13^2 window's 7 x 7 work-items
    with pytest.warns(UserWarning, match="wrong"):
        gridder = clgrid.Gridder(N, CELL, kernels, method="moving_window", device=queue, tuning=one_group)
    assert gridder.prepare(uvw, vis).device_plan.num_groups == 1
    with pytest.warns(UserWarning, match="wrong"):
        out, ref, _ = grid_both(queue, kernels, uvw, vis, tuning=one_group)
    assert relative_error(out, ref) <= TOLERANCE["single"]


@pytest.mark.parametrize("tuning, error", [
    ({"coarsen_u": 0}, "coarsen_u"), ({"time_block": -1}, "time_block"),
    ({"flush": "maybe"}, "flush"), ({"work_group_size": 1 << 20}, "work_group_size"),
    ({"batch": 1 << 24}, "local memory")])
def test_bad_tuning_is_refused(queue, stack, tuning, error):
    with pytest.raises(ValueError, match=error):
        clgrid.Gridder(N, CELL, stack, method="moving_window", device=queue, tuning=tuning)


def test_offset_rows_hold_the_quarter_samples_of_every_tap(rng):
    kernels = clgrid.KernelStack.w_projection(grid_size=64, cell_size=4e-3, w_max=100, num_planes=3,
                                              oversample=5, max_support=8)
    values, starts = kernels.offset_rows()
    r = 3
    for p, quarter in enumerate(kernels.planes):
        s = int(kernels.supports[p])
        iy, off, k = rng.integers(0, quarter.shape[0], 50), rng.integers(-r, r + 1, 50), rng.integers(-s, s + 1, 50)
        at = starts[p] + (iy * (2 * r + 1) + off + r) * (2 * s + 1) + k + s
        np.testing.assert_array_equal(values[at], quarter[iy, np.abs(off + k * 5)])
    assert starts[-1] + quarter.shape[0] * (2 * r + 1) * (2 * s + 1) == values.size
