"""The plan as the pivot: planned once on the device (bit-identical to the host's float64
arithmetic), shared by gridders and degridders of one geometry, values per call."""

import threading

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import clgrid
from clgrid import reference
from clgrid.tools.datasets import hour_angle_range, load_layout, simulate_uvw
from clgrid.planning.host import flatten_positions, plan_visibilities
from clgrid.strategies import spelling
from clgrid.device.transfer import Staging

from conftest import random_visibilities, relative_error

N, CELL, W_MAX = 96, 3e-3, 60.0
GRIDDERS = ["atomic", "tiled", "moving_window", "texture", "texture_moving_window", "fpga"]
DEGRIDDERS = ["gather", "moving_window", "texture", "fpga"]
TRACKS = ("moving_window", "texture_moving_window")


@pytest.fixture(scope="module")
def stack():
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=W_MAX, num_planes=6,
                                           oversample=8, max_support=6)


def meerkat_uvw(rng, nbaseline=40, ntime=30):
    """Real-array tracks (MeerKAT), scaled to fill the test grid, in wavelengths: (nbl, ntime, 3)."""
    layout = load_layout("meerkat")
    subset = rng.choice(len(layout.station_names) * (len(layout.station_names) - 1) // 2, nbaseline,
                        replace=False)
    uvw = simulate_uvw(layout, declination=-0.6, hour_angles=hour_angle_range(2.0, 240.0)[:ntime],
                       baseline_subset=np.sort(subset))
    uv_max = 0.8 * (N // 2) / (N * CELL)
    uvw[..., :2] *= uv_max / np.abs(uvw[..., :2]).max()
    uvw[..., 2] *= 0.9 * W_MAX / np.abs(uvw[..., 2]).max()
    return uvw


def host_positions(uvw, stack, freqs=None, flags=None):
    samples = flatten_positions(uvw, 1, flags, freqs)
    return plan_visibilities(samples, N, CELL, stack, on_dropped="ignore")


def assert_same_positions(plan, host):
    device = plan.host()
    for name in ("sample", "grid_u", "grid_v", "off_u", "off_v", "plane", "conj", "support"):
        np.testing.assert_array_equal(getattr(device, name), getattr(host, name), err_msg=name)
    np.testing.assert_allclose(device.weight_sum, host.weight_sum, rtol=1e-15)
    assert (device.num_flagged, device.num_off_grid, device.num_beyond_stack) == \
        (host.num_flagged, host.num_off_grid, host.num_beyond_stack)


def test_device_planning_is_bit_identical_to_the_host(rng, stack, queue):
    gridder = clgrid.Gridder(N, CELL, stack, device=queue, precision="double", on_dropped="ignore")
    du = 1.0 / (N * CELL)
    os = stack.oversample
    # random, off the grid, beyond the stack
    uvw, _ = random_visibilities(rng, 4000, N, CELL, 1.5 * W_MAX, fill=1.1)
    # exactly on the rounding boundaries: half cells, half oversample steps, half plane steps
    k = rng.integers(-30, 30, 500)
    m = rng.integers(-os // 2, os // 2, 500)
    p = rng.integers(0, stack.num_planes, 500)
    boundary = np.column_stack([(k + 0.5) * du, (k + (m + 0.5) / os) * du,
                                (p + 0.5) ** 2 / stack.w_scale * rng.choice([-1, 1], 500)])
    tracks = meerkat_uvw(rng).reshape(-1, 3)
    for case in (uvw, boundary, tracks, np.concatenate([uvw, boundary, tracks])):
        flags = rng.random(case.shape[0]) < 0.1
        plan = gridder.plan(case, flags=flags)
        assert plan.planned_on == "device"
        assert_same_positions(plan, host_positions(case, stack, flags=flags[:, None]))
    # metres and channels
    freqs = np.array([1.0e9, 1.3e9, 1.7e9])
    metres = tracks * (clgrid.planning.host.SPEED_OF_LIGHT / 1.7e9)
    assert_same_positions(gridder.plan(metres, freqs=freqs), host_positions(metres, stack, freqs=freqs))


def test_planning_refuses_non_finite_uvw_unless_flagged(rng, stack, queue):
    gridder = clgrid.Gridder(N, CELL, stack, device=queue)
    uvw, _ = random_visibilities(rng, 50, N, CELL, W_MAX)
    uvw[7, 2] = np.nan
    with pytest.raises(ValueError, match="uvw"):
        gridder.plan(uvw)
    flags = np.zeros(50, bool)
    flags[7] = True
    assert gridder.plan(uvw, flags=flags).num_flagged == 1


# software sampling for the texture path (an image sampler's weights have 8 bits on GPUs), and
# FPGA tiles small enough for a GPU's 48 KiB of local memory in double precision
SMALL_DEVICE_TUNING = {"texture": {"sampler": "software"}, "texture_moving_window": {"sampler": "software"},
                       "fpga": {"tile": 8}}


def make(kind, method, stack, queue, **kw):
    cls = clgrid.Gridder if kind == "grid" else clgrid.Degridder
    kw.setdefault("tuning", SMALL_DEVICE_TUNING.get(method))
    return cls(N, CELL, stack, **spelling(kind, method), device=queue, precision="double", on_dropped="ignore",
               **kw)


def interpolation_of(method):
    return "linear" if method.startswith("texture") else "nearest"


def tolerance(method):
    """Texture weights are float32 (images, or software sampling in float), even in double."""
    return 1e-6 if method.startswith("texture") else 1e-12


@pytest.mark.parametrize("method", GRIDDERS)
def test_one_plan_grids_several_value_sets(rng, stack, queue, method):
    uvw = meerkat_uvw(rng)
    gridder = make("grid", method, stack, queue)
    plan = gridder.plan(uvw)
    for _ in range(3):
        vis = rng.normal(size=uvw.shape[:2] + (2,)) + 1j * rng.normal(size=uvw.shape[:2] + (2,))
        weights = rng.uniform(0.1, 2.0, uvw.shape[:2])          # one per sample, as ducc0's wgt
        grid, report = gridder.grid(plan, vis, weights, return_report=True)
        ref, ref_report = reference.grid(uvw, vis, N, CELL, stack, weights=weights[..., None],
                                         interpolation=interpolation_of(method), return_report=True,
                                         on_dropped="ignore")
        assert relative_error(grid, ref) < tolerance(method)
        np.testing.assert_allclose(report["norm"], ref_report["norm"], rtol=1e-12)


@pytest.mark.parametrize("method", DEGRIDDERS)
def test_one_plan_degrids_several_grids_and_serves_a_gridder(rng, stack, queue, method):
    uvw = meerkat_uvw(rng)
    grid_method = {"gather": "atomic", "moving_window": "moving_window", "texture": "texture",
                   "fpga": "fpga"}[method]
    gridder, degridder = make("grid", grid_method, stack, queue), make("degrid", method, stack, queue)
    plan = degridder.plan(uvw)
    for _ in range(2):
        grid = rng.normal(size=(1, N, N)) + 1j * rng.normal(size=(1, N, N))
        vis = degridder.degrid(grid, plan)
        ref = reference.degrid(grid, uvw, N, CELL, stack, interpolation=interpolation_of(method),
                               on_dropped="ignore")
        assert relative_error(vis, ref) < tolerance(method)
    # the same plan grids: <degrid(G), V> == <G, grid(V)>
    values = rng.normal(size=uvw.shape[:2] + (1,)) + 1j * rng.normal(size=uvw.shape[:2] + (1,))
    lhs = np.vdot(degridder.degrid(grid, plan), values)
    rhs = np.vdot(grid, gridder.grid(plan, values))
    assert abs(lhs - rhs) < 1e-10 * abs(rhs)


def test_a_plan_of_another_geometry_is_refused(rng, stack, queue):
    uvw, vis = random_visibilities(rng, 100, N, CELL, W_MAX)
    plan = clgrid.Gridder(N, CELL, stack, device=queue).plan(uvw)
    other_stack = clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=W_MAX, num_planes=6,
                                                  oversample=8, max_support=6)
    for other, what in ((clgrid.Gridder(N + 2, CELL, stack, device=queue), "grid_size"),
                        (clgrid.Gridder(N, CELL * 1.01, stack, device=queue), "cell_size"),
                        (clgrid.Gridder(N, CELL, other_stack, device=queue), "KernelStack"),
                        (clgrid.Gridder(N, CELL, stack, method="atomic", interpolation="linear", device=queue), "interpolation"),
                        (clgrid.Gridder(N, CELL, stack, device=cl.Context([queue.device])), "context")):
        with pytest.raises(ValueError, match=what):
            other.grid(plan, vis)
    with pytest.raises(ValueError, match="flags"):
        clgrid.Gridder(N, CELL, stack, device=queue).grid(plan, vis, flags=np.zeros(100, bool))


def test_weights_and_flags_shaped_like_the_samples_or_the_visibilities(rng, stack, queue):
    uvw, vis = random_visibilities(rng, 300, N, CELL, W_MAX, npol=4)
    gridder = make("grid", "atomic", stack, queue)
    per_sample = rng.uniform(0.5, 1.5, 300)
    per_pol_flags = rng.random((300, 4)) < 0.3
    one = gridder.grid(uvw, vis, per_sample, flags=per_pol_flags)
    full = gridder.grid(uvw, vis, np.repeat(per_sample[:, None], 4, axis=1), flags=per_pol_flags)
    assert relative_error(one, full) < 1e-14                       # the same up to atomics' order
    ref = reference.grid(uvw, vis, N, CELL, stack, weights=per_sample[:, None], flags=per_pol_flags,
                         on_dropped="ignore")
    assert relative_error(one, ref) < 1e-12
    mask = rng.random(300) < 0.2                                   # ducc0's mask, negated: all pols
    assert relative_error(gridder.grid(uvw, vis, flags=mask),
                          reference.grid(uvw, vis, N, CELL, stack, flags=mask[:, None],
                                         on_dropped="ignore")) < 1e-12
    with pytest.raises(ValueError, match=r"\(300,\).*\(300, 4\)|samples.*visibilities"):
        gridder.grid(uvw, vis, np.ones(7))
    with pytest.raises(ValueError, match="weights"):
        gridder.grid(uvw, vis, -per_sample)


def test_device_arrays_in_and_out_accumulate(rng, stack, queue):
    uvw, vis = random_visibilities(rng, 500, N, CELL, W_MAX, npol=2)
    gridder = make("grid", "tiled", stack, queue)
    degridder = make("degrid", "gather", stack, queue)
    plan = gridder.plan(cla.to_device(queue, uvw))
    ref = reference.grid(uvw, vis, N, CELL, stack, on_dropped="ignore")
    out = cla.empty(queue, (2, N, N), np.complex128)
    out.fill(np.nan)                                      # poisoned: every cell must be written
    assert gridder.grid(plan, cla.to_device(queue, vis), out=out) is out
    assert relative_error(out.get(), ref) < 1e-12
    gridder.grid(plan, vis, out=out, accumulate=True)
    assert relative_error(out.get(), 2 * ref) < 1e-12
    host_out = np.array(ref)
    assert gridder.grid(plan, vis, out=host_out, accumulate=True) is host_out
    assert relative_error(host_out, 2 * ref) < 1e-12
    vis_out = cla.empty(queue, (500, 2), np.complex128)
    vis_out.fill(np.nan)
    degridder.degrid(out, plan, out=vis_out)
    ref_vis = reference.degrid(out.get(), uvw, N, CELL, stack, on_dropped="ignore")
    assert relative_error(vis_out.get(), ref_vis) < 1e-12


def test_a_queue_without_profiling_works(rng, stack, queue):
    plain = cl.CommandQueue(queue.context)
    uvw, vis = random_visibilities(rng, 200, N, CELL, W_MAX)
    gridder = clgrid.Gridder(N, CELL, stack, method="tiled", device=plain, precision="double")
    grid, report = gridder.grid(uvw, vis, return_report=True)
    assert report["kernel_seconds"] is None
    assert relative_error(grid, reference.grid(uvw, vis, N, CELL, stack)) < 1e-12


@pytest.mark.parametrize("kind,method", [("grid", m) for m in GRIDDERS] + [("degrid", m) for m in DEGRIDDERS])
def test_threads_sharing_one_operator_get_their_own_results(rng, stack, queue, kind, method):
    uvw = meerkat_uvw(rng, nbaseline=12, ntime=20)
    operator = make(kind, method, stack, queue)
    plan = operator.plan(uvw)
    inputs, expected = [], []
    for _ in range(2):
        if kind == "grid":
            values = rng.normal(size=uvw.shape[:2] + (1,)) + 1j * rng.normal(size=uvw.shape[:2] + (1,))
            expected.append(operator.grid(plan, values))
        else:
            values = rng.normal(size=(1, N, N)) + 1j * rng.normal(size=(1, N, N))
            expected.append(operator.degrid(values, plan))
        inputs.append(values)
    wrong = []

    def hammer(i):
        for _ in range(6):
            result = operator.grid(plan, inputs[i]) if kind == "grid" else operator.degrid(inputs[i], plan)
            if relative_error(result, expected[i]) > 1e-12:
                wrong.append(i)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


@pytest.mark.parametrize("staged", [False, True], ids=["direct", "staged"])
@pytest.mark.parametrize("method", ["tiled", pytest.param("moving_window", marks=pytest.mark.slow)])
def test_data_larger_than_the_device_stream_through_it_in_chunks(rng, stack, queue, method, staged):
    """Streamed in chunks of rows, as one pass; ``staged``: through pinned staging as on a
    GPU (the values of each chunk uploaded in the background while it is planned)."""
    uvw = meerkat_uvw(rng, nbaseline=30, ntime=20)
    freqs = np.array([1.0e9, 1.1e9])
    metres = uvw * (clgrid.planning.host.SPEED_OF_LIGHT / 1.1e9)
    vis = rng.normal(size=(30, 20, 2, 2)) + 1j * rng.normal(size=(30, 20, 2, 2))
    weights = rng.uniform(0.5, 2.0, (30, 20, 2))
    flags = rng.random((30, 20, 2, 2)) < 0.1
    gridder = make("grid", method, stack, queue)
    degridder = make("degrid", "gather" if method == "tiled" else "moving_window", stack, queue)
    if staged:
        for operator in (gridder, degridder):
            operator._staging = Staging(operator.transfer_queue, piece=4096)
    whole, whole_report = gridder.grid(metres, vis, weights, flags, freqs, return_report=True)
    gridder.chunk_samples = 7 * 20 * 2                            # 7 baselines at a time: 5 chunks
    assert len(gridder.row_chunks(metres.shape, 2, 2)) == 5
    with pytest.raises(ValueError, match="do not fit"):
        gridder.plan(metres, freqs)
    streamed, report = gridder.grid(metres, vis, weights, flags, freqs, return_report=True)
    assert relative_error(streamed, whole) < 1e-13
    for key in ("samples", "gridded", "flagged", "off_grid", "beyond_kernel_stack", "grid_point_additions"):
        assert report[key] == whole_report[key], key
    np.testing.assert_allclose(report["norm"], whole_report["norm"], rtol=1e-13)

    grid = rng.normal(size=(2, N, N)) + 1j * rng.normal(size=(2, N, N))
    whole, whole_report = degridder.degrid(grid, metres, flags, freqs, return_report=True)
    degridder.chunk_samples = 7 * 20 * 2
    streamed, report = degridder.degrid(grid, metres, flags, freqs, return_report=True)
    np.testing.assert_array_equal(streamed, whole)               # each visibility on its own: identical
    for key in ("samples", "degridded", "flagged", "off_grid", "beyond_kernel_stack", "grid_point_reads"):
        assert report[key] == whole_report[key], key


def test_deterministic_streams_are_bit_identical(rng, stack, queue):
    uvw = meerkat_uvw(rng, nbaseline=20, ntime=20)
    vis = rng.normal(size=(20, 20, 1)) + 1j * rng.normal(size=(20, 20, 1))
    gridder = clgrid.Gridder(N, CELL, stack, method="atomic", device=queue, deterministic=True, on_dropped="ignore")
    gridder.chunk_samples = 6 * 20                                # 4 chunks, each with its own scale
    first = gridder.grid(uvw, vis)
    assert all(np.array_equal(first, gridder.grid(uvw, vis)) for _ in range(3))
    ref = reference.grid(uvw, vis, N, CELL, stack, on_dropped="ignore")
    assert relative_error(first, ref) < 1e-6


def test_methods_are_distributions_and_interpolation_a_parameter(stack, queue):
    for kind, old, new in (("grid", "texture", "method='atomic', interpolation='linear'"),
                           ("grid", "texture_moving_window", "method='moving_window', interpolation='linear'"),
                           ("degrid", "texture", "method='gather', interpolation='linear'")):
        operator = clgrid.Gridder if kind == "grid" else clgrid.Degridder
        with pytest.raises(ValueError, match=new):
            operator(N, CELL, stack, method=old, device=queue)
    with pytest.raises(ValueError, match="linear interpolation works with"):
        clgrid.Gridder(N, CELL, stack, method="tiled", interpolation="linear", device=queue)
    with pytest.raises(ValueError, match="interpolation must be one of"):
        clgrid.Gridder(N, CELL, stack, interpolation="cubic", device=queue)
    table = clgrid.device.tuning.resolve_tuning("auto", None, clgrid.device.runtime.device_facts(queue.device))
    assert clgrid.Gridder(N, CELL, stack, device=queue).method == table["grid"]
    assert clgrid.Degridder(N, CELL, stack, device=queue).method == table["degrid"]
    linear = clgrid.Gridder(N, CELL, stack, interpolation="linear", device=queue)
    assert (linear.method, linear.strategy.name) == ("atomic", "texture")


def test_threads_with_their_own_operators_on_one_queue(rng, stack, queue):
    """Operators of one context share programs (values, sums): each launch has its own
    kernel arguments, so concurrent calls stay correct."""
    uvw = meerkat_uvw(rng, nbaseline=12, ntime=20)
    jobs = []
    for method in ("atomic", "tiled"):
        gridder = make("grid", method, stack, queue)
        vis = rng.normal(size=uvw.shape[:2] + (1,)) + 1j * rng.normal(size=uvw.shape[:2] + (1,))
        weights = rng.uniform(0.5, 2.0, uvw.shape[:2])
        jobs.append((gridder, vis, weights, reference.grid(uvw, vis, N, CELL, stack, weights=weights[..., None],
                                                            on_dropped="ignore")))
    wrong = []

    def hammer(gridder, vis, weights, ref):
        for _ in range(6):
            if relative_error(gridder.grid(uvw, vis, weights), ref) > 1e-12:
                wrong.append(gridder.method)

    threads = [threading.Thread(target=hammer, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
