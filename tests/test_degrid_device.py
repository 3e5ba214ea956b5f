"""The gather and moving-window degridders on PoCL against the float64 reference and
as adjoints of every gridder of the same kernel interpolation (the texture strategies
against the interpolated reference: tests/test_texture.py)."""

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid.strategies import DEGRIDDING_METHODS, GRIDDING_METHODS, spelling
from clgrid.planning.host import SPEED_OF_LIGHT

from conftest import relative_error

N, CELL, W_MAX = 128, 2e-3, 300.0
TOLERANCE = {"single": 1e-5, "double": 1e-12}
DU = 1.0 / (N * CELL)
NEAREST = [m for m, strategy in DEGRIDDING_METHODS.items() if strategy.interpolation == "nearest"]
ADJOINT_PAIRS = [(g, d) for g, gs in GRIDDING_METHODS.items() for d, ds in DEGRIDDING_METHODS.items()
                 if gs.interpolation == ds.interpolation]


@pytest.fixture(scope="module")
def stack():
    """A generated w-projection stack whose supports grow with |w| (3 to 12 cells)."""
    stack = clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=W_MAX, num_planes=8,
                                            oversample=8, max_support=12)
    assert len(set(stack.supports.tolist())) >= 4
    return stack


@pytest.fixture(scope="module")
def small_stack():
    """Supports up to 5: an 11-wide window fits one moving-window work-group."""
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=40.0, num_planes=4,
                                           oversample=4, max_support=5)


def tracks(rng, nbl, ntime, w_max=W_MAX):
    """uvw (nbl, ntime, 3) in wavelengths: straight tracks of up to a cell per step, on
    the grid, whose w sweeps across planes so the support changes along each baseline."""
    start = rng.uniform(-1, 1, (nbl, 1, 2)) * (N // 2 - 12 - 15 - 2) * DU
    velocity = rng.uniform(-1, 1, (nbl, 1, 2)) * min(1.0, 30 / ntime) * DU
    t = np.arange(ntime)[None, :, None]
    uv = start + velocity * (t - ntime / 2)
    w = np.linspace(rng.uniform(-w_max, 0, nbl), rng.uniform(0, w_max, nbl), ntime).T[..., None]
    return np.concatenate([uv, w], axis=-1)


def fitted(cls, method, queue, stack, npol, **options):
    """``cls(N, CELL, stack, <method's spelling>, ...)``, an FPGA strategy's on-chip tile shrunk to
    what the device's local memory holds (on a GPU's 48 KiB the table's tile of 32 plus a
    halo of 12 fits one polarisation in single precision only)."""
    spelled = spelling("grid" if cls is clgrid.Gridder else "degrid", method)
    operator = cls(N, CELL, stack, **spelled, device=queue, **options)
    strategy = operator.strategy
    if method == "fpga":
        per_cell = strategy.on_chip_tiles() * npol * np.dtype(strategy.complex_dtype).itemsize
        side = int(np.sqrt(strategy.facts.local_memory // per_cell))
        if side < strategy.padded_side:
            operator = cls(N, CELL, stack, **spelled, device=queue, **options,
                           tuning={"tile": side - 2 * stack.max_support})
    return operator


def facts_of(queue):
    return clgrid.device.runtime.device_facts(queue.device)


def random_grid(rng, npol, dtype=np.complex128):
    return (rng.normal(size=(npol, N, N)) + 1j * rng.normal(size=(npol, N, N))).astype(dtype)


def degrid_poisoned(degridder, grid, uvw, flags=None, freqs=None):
    """Degrid with the device visibilities filled with NaN first: a missed write shows."""
    prepared = degridder.prepare(uvw, grid.shape[0], flags, freqs)
    if prepared.device_plan is not None:
        buf = prepared.device_plan.vis
        cl.enqueue_fill_buffer(degridder.queue, buf, np.array([np.nan], degridder.strategy.real_dtype),
                               0, buf.size).wait()
    events = degridder.execute(prepared, wait_for=[degridder.load_grid(grid)[2]])
    return degridder.fetch(prepared, wait_for=events), dict(prepared.plan.counts_report("degridded"),
                                                           grid_point_reads=prepared.grid_point_additions)


def check(vis, ref, precision):
    assert vis.shape == ref.shape
    assert vis.dtype == (np.complex64 if precision == "single" else np.complex128)
    assert np.all(np.isfinite(vis))
    assert relative_error(vis, ref) <= TOLERANCE[precision]


@pytest.mark.parametrize("method", NEAREST)
@pytest.mark.parametrize("precision", ["single", pytest.param("double", marks=pytest.mark.slow)])
@pytest.mark.parametrize("npol", [1, pytest.param(2, marks=pytest.mark.slow), pytest.param(4, marks=pytest.mark.slow)])
def test_degridder_matches_reference(queue, rng, stack, method, precision, npol):
    uvw = tracks(rng, 24, 40)
    uvw[3, 10:14, 0] = 0.99 * (N // 2) * DU           # off the grid in mid-track
    uvw[5, :3, 2] = 2 * W_MAX                         # beyond the last w-plane
    flags = rng.random(uvw.shape[:2] + (npol,)) < 0.1
    flags[7] = True
    flags[3, 10:14] = flags[5, :3] = False
    grid = random_grid(rng, npol)
    degridder = fitted(clgrid.Degridder, method, queue, stack, npol, precision=precision, on_dropped="ignore")
    vis, report = degrid_poisoned(degridder, grid, uvw, flags)
    ref, ref_report = clgrid.reference.degrid(grid, uvw, N, CELL, stack, flags=flags,
                                              on_dropped="ignore", return_report=True)
    check(vis, ref, precision)
    assert report == ref_report
    assert report["off_grid"] >= 4 and report["beyond_kernel_stack"] == 3 and report["flagged"] >= 40
    assert not np.any(vis[flags]) and not np.any(vis[3, 10:14])


@pytest.mark.parametrize("method", NEAREST)
def test_degridder_with_channels_in_metres(queue, rng, stack, method):
    freqs = np.array([1.0e8, 1.15e8, 1.3e8])
    uvw_m = tracks(rng, 12, 30, w_max=W_MAX / 1.3) * (SPEED_OF_LIGHT / 1.3e8)
    flags = rng.random((12, 30, 3, 2)) < 0.1
    grid = random_grid(rng, 2)
    degridder = fitted(clgrid.Degridder, method, queue, stack, 2)
    vis = degridder.degrid(grid, uvw_m, flags=flags, freqs=freqs)
    ref = clgrid.reference.degrid(grid, uvw_m, N, CELL, stack, flags=flags, freqs=freqs)
    check(vis, ref, "single")
    assert degridder.last_report["degridded"] > 900
    assert degridder.last_report["kernel_seconds"] > 0


@pytest.mark.parametrize("tuning", [
    {"sort": False},
    {"sort": True, "sort_tile": 1, "lanes_per_vis": 8, "teams_per_group": 3, "vis_per_batch": 5,
     "points_per_item": 3, "groups_per_cu": 1},
    {"sort": True, "lanes_per_vis": 64, "teams_per_group": 1, "vis_per_batch": 1, "points_per_item": 1},
])
def test_gather_tuning_and_order_change_nothing_but_speed(queue, rng, stack, tuning):
    uvw = rng.permutation(tracks(rng, 30, 20).reshape(-1, 3))      # any order at all
    grid = random_grid(rng, 4)
    if tuning.get("vis_per_batch") == 1 and clgrid.device.runtime.is_intel_cpu_runtime(facts_of(queue)):
        with pytest.raises(clgrid.DeviceCapabilityError, match="crashes Intel"):
            clgrid.Degridder(N, CELL, stack, device=queue, precision="double", tuning=tuning)
        tuning = dict(tuning, vis_per_batch=2)
    degridder = clgrid.Degridder(N, CELL, stack, device=queue, precision="double", tuning=tuning)
    vis, _ = degrid_poisoned(degridder, grid, uvw)
    check(vis, clgrid.reference.degrid(grid, uvw, N, CELL, stack), "double")
    arranged, tile = degridder.prepare(uvw, 4).device_plan, degridder.strategy.tuning["sort_tile"]
    packed = np.empty((arranged.num_vis, 4), np.int32)
    cl.enqueue_copy(queue, packed, arranged.packed).wait()
    key = ((packed[:, 3] & 0x7FFFFFFF).astype(np.int64) * N * N + (packed[:, 1] // tile) * N
           + packed[:, 0] // tile)                            # (w-plane, row of tiles, tile)
    assert bool(np.all(np.diff(key) >= 0)) == tuning["sort"]


def test_gather_with_subgroup_reductions_where_the_device_has_them(queue, rng, stack):
    if not facts_of(queue).subgroups:
        pytest.skip(f"{queue.device.name} ({queue.device.platform.name}) has no sub-groups")
    uvw = tracks(rng, 20, 20).reshape(-1, 3)
    grid = random_grid(rng, 2)
    degridder = clgrid.Degridder(N, CELL, stack, device=queue, tuning={"reduction": "subgroup"})
    vis, _ = degrid_poisoned(degridder, grid, uvw)
    check(vis, clgrid.reference.degrid(grid, uvw, N, CELL, stack), "single")


@pytest.mark.parametrize("tuning", [
    {},                                                     # one tile per window: plain stores
    {"group_u": 4, "group_items": 12, "steps_per_group": 7, "vis_per_batch": 3},   # tiles add atomically
])
@pytest.mark.parametrize("precision", ["single", "double"])
def test_moving_window_tiles_and_segments(queue, rng, small_stack, tuning, precision):
    uvw = tracks(rng, 10, 50, w_max=40.0)
    grid = random_grid(rng, 2)
    degridder = clgrid.Degridder(N, CELL, small_stack, method="moving_window", device=queue,
                                 precision=precision, tuning=tuning)
    prepared = degridder.prepare(uvw, 2)
    assert np.unique(prepared.plan.host().support).size >= 2   # supports change along baselines
    assert 2 * prepared.device_plan.supports.max() + 1 <= 11
    vis, _ = degrid_poisoned(degridder, grid, uvw)
    check(vis, clgrid.reference.degrid(grid, uvw, N, CELL, small_stack), precision)


def test_moving_window_supports_change_within_a_segment(queue, rng, stack):
    uvw = tracks(rng, 16, 60)
    degridder = clgrid.Degridder(N, CELL, stack, method="moving_window", device=queue,
                                 precision="double", tuning={"steps_per_group": 60})
    prepared = degridder.prepare(uvw, 1)
    positions = prepared.plan.host()
    plan = positions.take(degridder.strategy.chunker.on_host(positions, prepared.plan)[0])   # track by track
    first = np.flatnonzero(np.r_[True, np.diff(plan.sample // 60) != 0])
    changes = [np.unique(s).size for s in np.split(plan.support, first[1:])]
    assert max(changes) >= 3, "each track should cross several supports"
    grid = random_grid(rng, 1)
    vis, _ = degrid_poisoned(degridder, grid, uvw)
    check(vis, clgrid.reference.degrid(grid, uvw, N, CELL, stack), "double")


def test_moving_window_single_time_step_and_flat_uvw(queue, rng, stack):
    grid = random_grid(rng, 1)
    degridder = clgrid.Degridder(N, CELL, stack, method="moving_window", device=queue)
    for uvw in (tracks(rng, 40, 1), tracks(rng, 4, 25).reshape(-1, 3)):
        vis, _ = degrid_poisoned(degridder, grid, uvw)
        check(vis, clgrid.reference.degrid(grid, uvw, N, CELL, stack), "single")


def inner(x, y):
    return np.vdot(np.asarray(x, np.complex128).ravel(), np.asarray(y, np.complex128).ravel())


@pytest.mark.parametrize("gridding, degridding", ADJOINT_PAIRS)
def test_every_degridder_is_the_adjoint_of_every_gridder(queue, rng, stack, gridding, degridding):
    uvw = tracks(rng, 20, 30)
    flags = rng.random((20, 30, 2)) < 0.1
    grid = random_grid(rng, 2)
    vis = rng.normal(size=(20, 30, 2)) + 1j * rng.normal(size=(20, 30, 2))
    degridded = fitted(clgrid.Degridder, degridding, queue, stack, 2).degrid(grid, uvw, flags)
    gridded = fitted(clgrid.Gridder, gridding, queue, stack, 2).grid(uvw, vis, flags=flags)
    lhs, rhs = inner(degridded, vis), inner(grid, gridded)
    assert abs(rhs) > 0
    # against the sizes of the vectors: the inner product itself can cancel to far less
    # (a random seed gave |rhs| = 0.12 against norms of order 10^2)
    scale = np.linalg.norm(np.asarray(grid).ravel()) * np.linalg.norm(np.asarray(gridded).ravel())
    assert abs(lhs - rhs) <= 1e-6 * scale, (lhs, rhs, scale)


def test_nothing_to_degrid_gives_zeros_and_counts(queue, rng, stack):
    grid = random_grid(rng, 1)
    for method in DEGRIDDING_METHODS:
        degridder = clgrid.Degridder(N, CELL, stack, **spelling("degrid", method), device=queue, on_dropped="ignore")
        uvw = tracks(rng, 3, 5)
        vis, report = degridder.degrid(grid, uvw, flags=np.ones((3, 5, 1), bool), return_report=True)
        assert vis.shape == (3, 5, 1) and not np.any(vis)
        assert report["flagged"] == 15 and report["degridded"] == 0
        uvw[..., 0] = 1e9
        assert not np.any(degridder.degrid(grid, uvw))
        assert degridder.last_report["off_grid"] == 15


def test_degridder_refuses_bad_arguments(queue, rng, stack):
    with pytest.raises(ValueError, match="unknown method 'scatter'"):
        clgrid.Degridder(N, CELL, stack, method="scatter", device=queue)
    with pytest.raises(ValueError, match="unknown tuning parameter 'wg_u'"):
        clgrid.Degridder(N, CELL, stack, device=queue, tuning={"wg_u": 8})
    with pytest.raises(clgrid.device.tuning.TuningTableError, match="sort must be bool"):
        clgrid.Degridder(N, CELL, stack, device=queue, tuning={"sort": 1})
    with pytest.raises(ValueError, match="reduction"):
        clgrid.Degridder(N, CELL, stack, device=queue, tuning={"reduction": "tree"})
    with pytest.raises(ValueError, match="lanes_per_vis"):
        clgrid.Degridder(N, CELL, stack, device=queue, tuning={"lanes_per_vis": 0})
    with pytest.raises(ValueError, match="steps_per_group"):
        clgrid.Degridder(N, CELL, stack, method="moving_window", device=queue,
                         tuning={"steps_per_group": 0})
    if not facts_of(queue).subgroups:
        with pytest.raises(clgrid.DeviceCapabilityError, match="needs sub-groups"):
            clgrid.Degridder(N, CELL, stack, device=queue, tuning={"reduction": "subgroup"})
    limit = queue.device.max_work_group_size
    with pytest.raises(clgrid.DeviceCapabilityError, match="allows at most"):
        clgrid.Degridder(N, CELL, stack, device=queue, tuning={"lanes_per_vis": limit, "teams_per_group": 2})
    with pytest.raises(TypeError, match="kernels"):
        clgrid.Degridder(N, CELL, "kernels", device=queue)

    degridder = clgrid.Degridder(N, CELL, stack, device=queue)
    uvw = tracks(rng, 4, 4)
    grid = random_grid(rng, 1)
    for bad, error, words in [
        (grid.real, TypeError, "grid must be complex"),
        (grid[:, :64], ValueError, r"grid must have shape \(npol, 128, 128\)"),
        (np.concatenate([grid] * 3), ValueError, "grid must have 1, 2 or 4 polarisations"),
        (np.where(np.arange(N) == 1, np.inf, grid), ValueError, "grid contains NaN or inf"),
    ]:
        with pytest.raises(error, match=words):
            degridder.degrid(bad, uvw)
    with pytest.raises(ValueError, match="flags"):
        degridder.degrid(grid, uvw, flags=np.zeros((4, 3, 1), bool))
    with pytest.raises(ValueError, match="uvw"):
        degridder.degrid(grid, uvw[..., :2])
    with pytest.raises(ValueError, match="npol"):
        degridder.prepare(uvw, 3)
    greedy = clgrid.Degridder(N, CELL, stack, device=queue,
                              tuning={"lanes_per_vis": 512, "teams_per_group": 1, "vis_per_batch": 4096})
    if 512 * 4096 * 8 > queue.device.local_mem_size:
        with pytest.raises(clgrid.DeviceCapabilityError, match="local memory"):
            greedy.degrid(grid, uvw)


def test_kernels_by_offset_hold_every_tap_of_the_quarters(stack):
    values, starts = stack.by_offset()
    os, r = stack.oversample, clgrid.sources.tables.offset_range(stack.oversample)
    for p, plane in enumerate(stack.planes):
        s = int(stack.supports[p])
        width = 2 * s + 1
        end = starts[p + 1] if p + 1 < stack.num_planes else values.size
        assert end - starts[p] == (r + 1) ** 2 * width ** 2
        for off_v, off_u in [(0, 0), (-r, r), (r, -1), (-2, -3)]:
            # the index arithmetic of clgrid/cl_kernels/kernel_taps.cl
            centre = starts[p] + (abs(off_v) * (r + 1) + abs(off_u)) * width ** 2 + s * width + s
            row, col = (-width if off_v < 0 else width), (-1 if off_u < 0 else 1)
            j, k = np.mgrid[-s:s + 1, -s:s + 1]
            expected = plane[np.abs(off_v + j * os), np.abs(off_u + k * os)]
            np.testing.assert_array_equal(values[centre + j * row + k * col], expected)


@pytest.mark.parametrize("reduction", ["local", "subgroup"])
def test_gather_reductions_are_exact_on_small_integers(queue, rng, reduction):
    """Integer kernel values and grid: every product and partial sum is an integer below 2^24,
    so any reduction order gives the float64 reference exactly, and a lost or doubled
    partial (a sub-group or barrier slip) shows as a difference, not as rounding."""
    if reduction == "subgroup" and not facts_of(queue).subgroups:
        pytest.skip(f"{queue.device.name} ({queue.device.platform.name}) has no sub-groups")
    supports, oversample = [2, 4, 7], 4
    planes = [rng.integers(-3, 4, (q, q)) + 1j * rng.integers(-3, 4, (q, q))
              for q in (clgrid.sources.tables.quarter_size(s, oversample) for s in supports)]
    stack = clgrid.KernelStack.from_arrays(planes, supports, oversample, w_scale=4 / W_MAX)
    grid = rng.integers(-8, 9, (2, N, N)) + 1j * rng.integers(-8, 9, (2, N, N))
    uvw = tracks(rng, 20, 20).reshape(-1, 3)
    degridder = clgrid.Degridder(N, CELL, stack, device=queue, tuning={"reduction": reduction})
    vis, _ = degrid_poisoned(degridder, grid, uvw)
    ref = clgrid.reference.degrid(grid, uvw, N, CELL, stack)
    assert np.count_nonzero(ref) > 300
    np.testing.assert_array_equal(vis, ref)
