"""The tiled gridder on PoCL: each device stage against numpy, the grid against the reference."""

import sys
from pathlib import Path

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid.tools.oclgrind import run_under_oclgrind
from clgrid.strategies.tiled import TiledGridding
from clgrid.device.tuning import TuningTableError

from conftest import poison, random_visibilities, relative_error
from fpga_case import CELL as CASE_CELL, N as CASE_N, small_stack

N, CELL = 128, 2e-3
TOLERANCE = {"single": 1e-5, "double": 1e-12}
SMALL_TILES = {"tile_u": 16, "tile_v": 16, "regsz": 4, "shmsz": 4, "central_radius": 1, "chunk": 8,
               "central_chunk": 24, "window_support": -1}   # windows only where a test asks for them


@pytest.fixture(scope="module", params=[8, pytest.param(4, marks=pytest.mark.slow)], ids=["os8", "os4"])
def stack(request):
    """Supports growing with |w| from 2 to 12 cells (kernels up to 25 cells wide)."""
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=300, num_planes=8,
                                           oversample=request.param, max_support=12)


def random_stack(rng, supports, oversample):
    """Random complex quarters: any layout or index slip changes the grid."""
    planes = [rng.normal(size=(q, q)) + 1j * rng.normal(size=(q, q))
              for q in (clgrid.sources.tables.quarter_size(s, oversample) for s in supports)]
    return clgrid.KernelStack.from_arrays(planes, supports, oversample, w_scale=(len(supports) - 1) ** 2 / 300)


@pytest.fixture(params=["rows", "footprint", "cells"])
def mapping(request):
    """How work-items share a tile's cells (grid_tiled.cl): each must give the reference's grid."""
    return request.param


def grid_and_compare(queue, stack, uvw, vis, precision="single", tuning=None, grid_size=N, weights=None,
                     flags=None, mapping="rows"):
    """Grid on a NaN-poisoned device grid; check against the float64 reference; return the gridder."""
    gridder = clgrid.Gridder(grid_size, CELL, stack, method="tiled", device=queue, precision=precision,
                             tuning=dict(tuning or {}, mapping=mapping))
    poison(gridder, vis.shape[-1])
    out = gridder.grid(uvw, vis, weights=weights, flags=flags)
    ref = clgrid.reference.grid(uvw, vis, grid_size, CELL, stack, weights=weights, flags=flags)
    assert np.all(np.isfinite(out))
    assert relative_error(out, ref) <= TOLERANCE[precision]
    return gridder


def on_cells(cells_u, cells_v, w, grid_size=N):
    """uvw (wavelengths) that land exactly on the given grid cells."""
    du = 1.0 / (grid_size * CELL)
    return np.column_stack([(np.asarray(cells_u) - grid_size // 2) * du,
                            (np.asarray(cells_v) - grid_size // 2) * du, np.broadcast_to(w, np.shape(cells_u))])


def read(queue, buffer, dtype, count):
    out = np.empty(count, dtype)
    cl.enqueue_copy(queue, out, buffer).wait()
    return out


# -- the grid against the reference ------------------------------------------

@pytest.mark.parametrize("precision", ["single", "double"])
@pytest.mark.parametrize("npol", [1, pytest.param(4, marks=pytest.mark.slow)])
def test_random_order_matches_reference(queue, rng, stack, precision, npol, mapping):
    uvw, vis = random_visibilities(rng, 1200, N, CELL, 300, npol=npol)
    weights = rng.uniform(0.1, 3.0, vis.shape)
    flags = rng.random(vis.shape) < 0.1
    gridder = grid_and_compare(queue, stack, uvw, vis, precision, SMALL_TILES, weights=weights, flags=flags,
                               mapping=mapping)
    assert gridder.last_report["gridded"] > 1000
    assert set(gridder.strategy.stages) == {"bounding box", "count", "prefix sum", "sort", "tiles", "central box"}


def test_same_grid_in_any_order_and_repeated_execution(queue, rng, stack):
    uvw, vis = random_visibilities(rng, 800, N, CELL, 300, fill=0.4)
    order = rng.permutation(len(uvw))
    grids = []
    for plane_order in (True, False):
        gridder = clgrid.Gridder(N, CELL, stack, method="tiled", device=queue,
                                 tuning=dict(SMALL_TILES, plane_order=plane_order))
        grids.append(gridder.grid(uvw, vis))
        grids.append(gridder.grid(uvw[order], vis[order]))
        prepared = gridder.prepare(uvw, vis)
        for _ in range(2):   # counters, tallies and the grid start again from zero
            poison(gridder, 1)
            events = gridder.execute(prepared)
            got = np.empty_like(grids[0])
            cl.enqueue_copy(queue, got, gridder.grid_buffer(1), wait_for=events[-1:]).wait()
            grids.append(got)
    ref = clgrid.reference.grid(uvw, vis, N, CELL, stack)
    for got in grids:
        assert relative_error(got, ref) <= 1e-5


def test_dense_centre_goes_through_the_central_box(queue, rng, stack, mapping):
    uvw, vis = random_visibilities(rng, 1500, N, CELL, 300, fill=0.8)
    uvw[:1200, :2] *= 0.03    # a crowded core, as in the SKA layouts
    gridder = grid_and_compare(queue, stack, uvw, vis, tuning=SMALL_TILES, mapping=mapping)
    strategy, plan = gridder.strategy, gridder.prepare(uvw, vis).device_plan
    strategy.grid(plan, 1, gridder.grid_buffer(1))
    offsets = read(queue, plan.offsets, np.int32, strategy.num_buckets + 1)
    central = offsets[-1] - offsets[strategy.max_tiles]
    assert central >= 1200 and offsets[strategy.max_tiles] > 0   # both passes have work


@pytest.mark.parametrize("tiles_per_vis", [2, 4])
def test_footprints_across_tile_borders(queue, rng, tiles_per_vis, mapping):
    stack = random_stack(rng, [3], 4)
    tuning = {"tile_u": 16, "tile_v": 16, "regsz": 8, "shmsz": 8, "central_radius": -1, "window_support": -1}
    borders = N // 2 - 8 + 16 * rng.integers(-3, 4, 60)          # first cells of tiles
    inside = N // 2 + 16 * rng.integers(-3, 4, 60)               # tile middles
    cells_v = borders + rng.integers(-3, 3, 60) if tiles_per_vis == 4 else inside
    uvw = on_cells(borders + rng.integers(-3, 3, 60), cells_v, 0.0)
    vis = rng.normal(size=(60, 1)) + 1j * rng.normal(size=(60, 1))
    gridder = grid_and_compare(queue, stack, uvw, vis, tuning=tuning, mapping=mapping)
    plan = gridder.prepare(uvw, vis).device_plan
    assert plan.max_entries == tiles_per_vis * 60
    gridder.strategy.grid(plan, 1, gridder.grid_buffer(1))
    assert read(queue, plan.offsets, np.int32, gridder.strategy.num_buckets + 1)[-1] == tiles_per_vis * 60


def test_single_tile_and_empty_tiles(queue, rng, mapping):
    stack = random_stack(rng, [2, 3, 5], 8)
    # 64 x 64 tiles of one polarisation fit in the 48 KiB of local memory of NVIDIA GPUs
    one_tile = {"tile_u": 64, "tile_v": 64, "regsz": 8, "shmsz": 8, "central_radius": -1, "window_support": -1}
    uvw = on_cells(rng.integers(N // 2 - 20, N // 2 + 20, 300), rng.integers(N // 2 - 20, N // 2 + 20, 300),
                   rng.uniform(-300, 300, 300))
    uvw[:, :2] += rng.uniform(-0.4, 0.4, (300, 2)) / (N * CELL)   # off the cell centres: every oversample offset
    vis = rng.normal(size=(300, 1)) + 1j * rng.normal(size=(300, 1))
    gridder = grid_and_compare(queue, stack, uvw, vis, tuning=one_tile, mapping=mapping)
    assert gridder.prepare(uvw, vis).device_plan.max_entries == 300     # all in the centre tile
    # two far-apart clusters: the tiles between them are empty buckets
    uvw[:, :2] *= 0.5
    uvw[:150, :2] += 30 / (N * CELL)
    uvw[150:, :2] -= 30 / (N * CELL)
    gridder = grid_and_compare(queue, stack, uvw, vis, tuning=dict(one_tile, tile_u=8, tile_v=8, regsz=4, shmsz=4),
                               mapping=mapping)
    plan = gridder.prepare(uvw, vis).device_plan
    gridder.strategy.grid(plan, 1, gridder.grid_buffer(1))
    counts = np.diff(read(queue, plan.offsets, np.int32, gridder.strategy.num_buckets + 1))
    box = read(queue, plan.box, np.int32, 4)
    first = N // 2 - 4
    active_tiles = np.prod([(box[2 * a + 1] - first) // 8 - (box[2 * a] - first) // 8 + 1 for a in (0, 1)])
    assert counts[:active_tiles].sum() == counts.sum() > 300
    assert np.count_nonzero(counts[:active_tiles] == 0) > active_tiles // 4


@pytest.mark.parametrize("tile_factor", [pytest.param(0.0, marks=pytest.mark.slow), 0.5,
                                         pytest.param(1.0, marks=pytest.mark.slow)])
def test_tile_factor_splits_between_tiles_and_atomics(queue, rng, stack, tile_factor, mapping):
    uvw, vis = random_visibilities(rng, 1000, N, CELL, 300, npol=2)
    gridder = grid_and_compare(queue, stack, uvw, vis, tuning=dict(SMALL_TILES, tile_factor=tile_factor),
                               mapping=mapping)
    plan = gridder.prepare(uvw, vis).device_plan
    gridder.strategy.grid(plan, 2, gridder.grid_buffer(2))
    untiled = read(queue, plan.untiled_tally, np.int32, 1)[0]
    tiled_entries = read(queue, plan.offsets, np.int32, gridder.strategy.num_buckets + 1)[-1]
    if tile_factor == 0.0:
        assert untiled == plan.num_vis and tiled_entries == 0
    elif tile_factor == 1.0:
        assert untiled == 0 and "untiled" not in gridder.strategy.stages
        assert tiled_entries == plan.max_entries
    else:
        assert 0 < untiled < plan.num_vis and 0 < tiled_entries < plan.max_entries
        assert gridder.strategy.stages["untiled"]


@pytest.mark.parametrize("precision", ["single", pytest.param("double", marks=pytest.mark.slow)])
def test_supports_4_to_72_on_tiles_smaller_than_the_kernels(queue, rng, precision, mapping):
    """Kernels up to 145 cells wide on 8 x 16 tiles: a visibility lands in up to 190 buckets."""
    n = 256
    stack = random_stack(rng, [4, 9, 30, 72], 4)
    uvw = on_cells(rng.integers(80, n - 80, 150), rng.integers(80, n - 80, 150), rng.uniform(-300, 300, 150),
                   grid_size=n)
    uvw[:, :2] += rng.uniform(-0.5, 0.5, (150, 2)) / (n * CELL)
    vis = rng.normal(size=(150, 1)) + 1j * rng.normal(size=(150, 1))
    tuning = {"tile_u": 8, "tile_v": 16, "regsz": 2, "shmsz": 2, "central_radius": 2, "window_support": -1}
    grid_and_compare(queue, stack, uvw, vis, precision, tuning, grid_size=n, mapping=mapping)


@pytest.mark.oclgrind
@pytest.mark.parametrize("plan_copies", [1, 0])
def test_oclgrind_finds_no_races_or_memory_errors(rng, mapping, plan_copies, tmp_path):
    """Out-of-bounds accesses and data races (local memory and the grid) on a small case.
    Without --uninitialized: Oclgrind 1.x treats clEnqueueFillBuffer's zeros (the tallies)
    as uninitialised and stops at LLVM's ``freeze`` instruction."""
    case_script = Path(__file__).with_name("tiled_case.py")
    run = run_under_oclgrind([sys.executable, case_script, tmp_path / "case.npz", "--seed",
                              int(rng.integers(1 << 31)), "--mapping", mapping, "--plan-copies", plan_copies],
                             timeout=300,
                             checks=("--data-races",))
    assert run.returncode == 0, run.output[-3000:]
    assert run.diagnostics == []
    case = np.load(tmp_path / "case.npz")
    ref = clgrid.reference.grid(case["uvw"], case["vis"], CASE_N, CASE_CELL, small_stack())
    assert relative_error(case["gridded"], ref) <= 1e-5


@pytest.mark.parametrize("precision", ["single", pytest.param("double", marks=pytest.mark.slow)])
def test_entries_without_plan_copies(queue, rng, stack, mapping, precision):
    """sort_copies_plan = false: the tile kernel reads each entry's plan by its index."""
    uvw, vis = random_visibilities(rng, 900, N, CELL, 300, npol=2)
    uvw[:500, :2] *= 0.1
    grid_and_compare(queue, stack, uvw, vis, precision, dict(SMALL_TILES, sort_copies_plan=False), mapping=mapping)


@pytest.mark.parametrize("window_support", [3, pytest.param(7, marks=pytest.mark.slow)])
def test_small_supports_go_whole_into_windows(queue, rng, stack, mapping, window_support):
    """Footprints up to 2 window_support + 1 wide are one entry each, in the window that
    holds them; wider ones go to every tile they touch (the stack's supports are 3..12)."""
    uvw, vis = random_visibilities(rng, 1000, N, CELL, 300, npol=2)
    uvw[:400, :2] *= 0.1
    tuning = dict(SMALL_TILES, window_support=window_support)
    gridder = grid_and_compare(queue, stack, uvw, vis, tuning=tuning, mapping=mapping)
    prepared = gridder.prepare(uvw, vis)
    support = prepared.plan.support
    assert 0 < np.count_nonzero(support <= window_support) < len(support)
    gridder.strategy.grid(prepared.device_plan, 2, gridder.grid_buffer(2))
    counts = np.diff(read(queue, prepared.device_plan.offsets, np.int32, gridder.strategy.num_buckets + 1))
    assert counts[gridder.strategy.windows_base:].sum() == np.count_nonzero(support <= window_support)
    assert gridder.strategy.stages["windows"]


@pytest.mark.parametrize("footprint_wg", [pytest.param(16, marks=pytest.mark.slow), 48,
                                          pytest.param(256, marks=pytest.mark.slow)])
def test_footprint_mapping_with_any_work_group(queue, rng, stack, footprint_wg):
    """As many work-items as tile columns (a footprint row per pass), a count that divides
    no footprint width, and more than a tile has cells."""
    uvw, vis = random_visibilities(rng, 600, N, CELL, 300, npol=2)
    gridder = grid_and_compare(queue, stack, uvw, vis, tuning=dict(SMALL_TILES, footprint_wg=footprint_wg),
                               mapping="footprint")
    assert gridder.strategy.local_size() == (footprint_wg, 1)


@pytest.mark.parametrize("unroll", [1, 3])
def test_footprint_mapping_on_tracks(queue, rng, stack, unroll):
    """Time steps of a baseline that stay on one cell follow each other without a barrier
    (grid_tiled.cl, same_work_items); those that move on need one."""
    cells = N // 2 + rng.integers(-40, 40, (60, 2))
    steps = np.repeat(cells, rng.integers(1, 6, 60), axis=0)            # runs on the same cell
    uvw = on_cells(steps[:, 0], steps[:, 1], rng.uniform(-300, 300))
    uvw[:, :2] += rng.uniform(-0.4, 0.4, (len(uvw), 2)) / (N * CELL)
    vis = rng.normal(size=(len(uvw), 2)) + 1j * rng.normal(size=(len(uvw), 2))
    grid_and_compare(queue, stack, uvw, vis, tuning=dict(SMALL_TILES, footprint_unroll=unroll, plane_order=False),
                     mapping="footprint")


# -- each device stage against numpy ------------------------------------------

def numpy_buckets(packed, supports, strategy):
    """The bounding box, per-visibility buckets and tiled mask, computed on the host."""
    t, n = strategy.tuning, strategy.grid_size
    gu, gv, plane = packed[:, 0], packed[:, 1], packed[:, 3] & 0x7FFFFFFF
    s = supports[plane]
    box = np.array([(gu - s).min(), (gu + s).max(), (gv - s).min(), (gv + s).max()])
    u0, v0 = n // 2 - t["tile_u"] // 2, n // 2 - t["tile_v"] // 2
    tu0, tv0 = (box[0] - u0) // t["tile_u"], (box[2] - v0) // t["tile_v"]
    nu = (box[1] - u0) // t["tile_u"] - tu0 + 1
    f = round(t["tile_factor"] * 4096)
    reach = lambda extent: -(-max(extent, 0) * f // 4096)   # noqa: E731
    c = n // 2
    tiled = ((c - reach(c - box[0]) <= gu) & (gu <= c + reach(box[1] - c))
             & (c - reach(c - box[2]) <= gv) & (gv <= c + reach(box[3] - c)) & (f > 0))
    r = t["central_radius"]
    ws = t["window_support"]
    step_u, step_v = t["tile_u"] - 2 * ws, t["tile_v"] - 2 * ws
    wu0, wv0 = (box[0] - u0) // step_u if ws >= 0 else 0, (box[2] - v0) // step_v if ws >= 0 else 0
    nwu = (box[1] - u0) // step_u - wu0 + 1 if ws >= 0 else 0
    buckets = []
    for i in np.flatnonzero(tiled):
        if s[i] <= ws:   # the one window that holds the footprint
            wu, wv = (gu[i] - s[i] - u0) // step_u, (gv[i] - s[i] - v0) // step_v
            buckets.append((i, strategy.windows_base + (wv - wv0) * nwu + wu - wu0))
            continue
        for tv in range((gv[i] - s[i] - v0) // t["tile_v"], (gv[i] + s[i] - v0) // t["tile_v"] + 1):
            for tu in range((gu[i] - s[i] - u0) // t["tile_u"], (gu[i] + s[i] - u0) // t["tile_u"] + 1):
                if max(abs(tu), abs(tv)) <= r:
                    buckets.append((i, strategy.max_tiles + (tv + r) * (2 * r + 1) + tu + r))
                else:
                    buckets.append((i, (tv - tv0) * nu + tu - tu0))
    return box, np.array(buckets).reshape(-1, 2), tiled


@pytest.mark.parametrize("tuning", [
    dict(SMALL_TILES, sort_run=4),
    {"tile_u": 8, "tile_v": 32, "regsz": 8, "shmsz": 0, "central_radius": -1, "tile_factor": 0.6,
     "sort_run": 1, "plane_order": False, "window_support": -1},
    dict(SMALL_TILES, sort_copies_plan=False),
    dict(SMALL_TILES, window_support=5, tile_factor=0.8),
])
def test_count_scan_and_sort_stages_equal_numpy(queue, rng, stack, tuning):
    uvw, vis = random_visibilities(rng, 700, N, CELL, 300, npol=2, fill=0.7)
    uvw[:300, :2] *= 0.05
    ha = np.linspace(-1, 1, 40)    # runs of neighbouring visibilities, as tracks make
    uvw[300:700] = np.column_stack([np.repeat(uvw[300:310, 0], 40) * np.cos(np.tile(ha, 10)),
                                    np.repeat(uvw[300:310, 1], 40), np.repeat(uvw[300:310, 2], 40)])
    gridder = clgrid.Gridder(N, CELL, stack, method="tiled", device=queue, tuning=tuning)
    strategy = gridder.strategy
    plan = gridder.prepare(uvw, vis).device_plan
    nb = strategy.num_buckets
    packed = read(queue, plan.packed, np.int32, 4 * plan.num_vis).reshape(-1, 4)
    dvis = read(queue, plan.vis, np.complex64, 2 * plan.num_vis).reshape(-1, 2)
    box, buckets, tiled = numpy_buckets(packed, stack.supports, strategy)

    cl.wait_for_events(strategy.enqueue_bounding_box(plan, 2))
    np.testing.assert_array_equal(read(queue, plan.box, np.int32, 4), box)

    cl.wait_for_events(strategy.enqueue_count(plan, 2))
    counts = np.bincount(buckets[:, 1], minlength=nb + 1)
    assert counts.size == nb + 1 and counts.sum() > plan.num_vis
    np.testing.assert_array_equal(read(queue, plan.tally, np.int32, nb + 1), counts)
    assert read(queue, plan.untiled_tally, np.int32, 1)[0] == np.count_nonzero(~tiled)

    cl.wait_for_events(strategy.enqueue_prefix_sum(plan))
    offsets = read(queue, plan.offsets, np.int32, nb + 1)
    np.testing.assert_array_equal(offsets, np.concatenate([[0], np.cumsum(counts)[:-1]]))

    cl.wait_for_events(strategy.enqueue_sort(plan, 2))
    total = offsets[-1]
    vis_bucket = read(queue, plan.entry_vis_bucket, np.int32, 2 * plan.max_entries).reshape(-1, 2)[:total]
    assert np.all(np.repeat(np.arange(nb + 1), counts) == vis_bucket[:, 1])   # each entry in its bucket
    if strategy.tuning["sort_copies_plan"]:                                   # carrying its plan
        entries = read(queue, plan.entries, np.int32, 4 * plan.max_entries).reshape(-1, 4)[:total]
        np.testing.assert_array_equal(entries, packed[vis_bucket[:, 0]])
    else:
        assert plan.entries.size == 4
    got = vis_bucket[np.lexsort(vis_bucket.T[::-1])]
    np.testing.assert_array_equal(got, buckets[np.lexsort(buckets.T[::-1])])  # and nothing else
    untiled = np.count_nonzero(~tiled)
    if untiled:
        untiled_plan = read(queue, plan.untiled_plan, np.int32, 4 * plan.num_vis).reshape(-1, 4)[:untiled]
        untiled_vis = read(queue, plan.untiled_vis, np.complex64, 2 * plan.num_vis).reshape(-1, 2)[:untiled]
        # the same (plan, visibility) rows in any order: sort both by every column, since
        # the atomic slot claims order them differently on every device
        def rows(plan_rows, vis_rows):
            both = np.column_stack([plan_rows, vis_rows.view(np.int32)])
            return both[np.lexsort(both.T[::-1])]
        np.testing.assert_array_equal(rows(untiled_plan, untiled_vis), rows(packed[~tiled], dvis[~tiled]))


# -- parameters ----------------------------------------------------------------

@pytest.mark.parametrize("tuning", [{}, {"regsz": 4, "shmsz": 4, "tile_u": 16, "tile_v": 16},
                                    {"mapping": "footprint", "tile_u": 32, "tile_v": 32, "footprint_wg": 32},
                                    {"mapping": "cells", "tile_u": 32, "tile_v": 16, "footprint_wg": 64}])
@pytest.mark.parametrize("npol, precision", [(1, "single"), (4, "double")])
@pytest.mark.parametrize("analytic", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_local_memory_known_before_the_build_is_what_the_kernel_takes(queue, stack, tuning, npol, precision,
                                                                       analytic):
    """local_memory counts tile_visibility's words by hand: it must follow the struct.  It
    counts grid_tiles' __local variables (the batch, the chunk's first entry, the tile or
    its shm rows) laid end to end.  A device whose compiler reports a probe's variables that
    way (PoCL) must report exactly that; another (Intel's CPU runtime reports the probe's
    44 bytes as 48, NVIDIA aligns each variable) may differ by alignment padding, at most 16 bytes a variable, far less than
    a forgotten struct field costs (4 bytes for each of the work-group's 32+ entries)."""
    if analytic:   # its tile_visibility holds two distances instead of a table row
        stack = clgrid.KernelStack.analytic(1e-5, precision)
    gridder = clgrid.Gridder(N, CELL, stack, method="tiled", device=queue, tuning=tuning, precision=precision)
    strategy = gridder.strategy
    predicted = strategy.local_memory(npol)
    if predicted > strategy.facts.local_memory:     # 32 x 32 tiles of 4 double pols: 64 KiB (a GPU: 48)
        uvw, vis = random_visibilities(np.random.default_rng(0), 10, N, CELL, 300, npol=npol)
        with pytest.raises(clgrid.DeviceCapabilityError, match="use smaller tiles"):
            gridder.grid(uvw, vis)
        return
    kernel = strategy.kernel("grid_tiles", npol)
    built = kernel.get_work_group_info(cl.kernel_work_group_info.LOCAL_MEM_SIZE, queue.device)
    variables = 2 + (strategy.tuning["mapping"] != "rows" or strategy.tuning["shmsz"] > 0)
    slack = 0 if local_variables_packed(queue) else 16 * variables
    assert slack < 4 * np.prod(strategy.local_size())          # less than a forgotten field
    assert abs(built - predicted) <= slack, (f"{queue.device.name} reports {built} bytes of local memory, "
                                             f"local_memory() says {predicted} (allowed: +-{slack})")


def local_variables_packed(queue) -> bool:
    """Whether the device reports a kernel's __local variables laid end to end, as asked of a
    probe whose variables need padding between them (a float2 array after an int)."""
    source = """__kernel void probe(__global float2 *out, __global const int *in) {
        __local float2 a[3]; __local int b; __local float2 c[2];   /* stored from inputs: not folded away */
        const int i = get_local_id(0);
        if (i < 3) a[i] = (float2)(in[i], 1);
        if (i == 0) b = in[3];
        if (i < 2) c[i] = (float2)(in[i + 4], 2);
        barrier(CLK_LOCAL_MEM_FENCE);
        out[i] = a[i % 3] + c[i % 2] + (float2)(b, 0);
    }"""
    kernel = cl.Program(queue.context, source).build().probe
    reported = kernel.get_work_group_info(cl.kernel_work_group_info.LOCAL_MEM_SIZE, queue.device)
    return reported == 3 * 8 + 4 + 2 * 8


def test_work_group_follows_tile_and_row_split(queue, stack):
    gridder = clgrid.Gridder(N, CELL, stack, method="tiled", device=queue,
                             tuning={"tile_u": 16, "tile_v": 32, "regsz": 4, "shmsz": 4})
    assert gridder.strategy.local_size() == (16, 4)
    rows = {"mapping": "rows", "tile_u": 32, "tile_v": 16, "regsz": 16, "shmsz": 0, "footprint_wg": 64}
    assert TiledGridding.work_group_shape(rows) == (32, 1)
    assert TiledGridding.work_group_shape(dict(rows, mapping="footprint")) == (64, 1)


@pytest.mark.parametrize("tuning, words", [
    ({"tile_v": 24, "regsz": 8, "shmsz": 8}, "multiple of"),
    ({"regsz": 0, "shmsz": 0}, "multiple of"),
    ({"tile_factor": 1.5}, "tile_factor"),
    ({"sort_wg": 96}, "power of two"),
    ({"chunk": 0}, "chunk = 0"),
    ({"mapping": "columns"}, "choose one of"),
    ({"window_support": 16, "tile_u": 32, "tile_v": 32}, "leaves no room"),
    ({"mapping": "footprint", "tile_u": 32, "footprint_wg": 16}, "footprint_wg = 16 must be >= tile_u"),
])
def test_bad_parameters_are_refused_by_name(queue, stack, tuning, words):
    with pytest.raises(TuningTableError, match=words):
        clgrid.Gridder(N, CELL, stack, method="tiled", device=queue, tuning=tuning)


def test_tuner_prunes_tiled_candidates_by_their_work_group(queue):
    from clgrid.device import runtime
    from clgrid.tools import tuner

    facts = runtime.device_facts(queue.device)
    h100 = type(facts)(**{**facts.__dict__, "platform": "NVIDIA CUDA", "name": "NVIDIA H100 80GB HBM3",
                          "max_work_group_size": 1024})
    space = {"tile_u": [16, 32], "tile_v": [16], "regsz": [8, 16], "shmsz": [0, 8]}
    shapes = {(c["tile_u"], c["regsz"], c["shmsz"]) for c in tuner.candidates("tiled", h100, space)}
    assert shapes == {(16, 8, 0), (32, 8, 0), (32, 16, 0), (32, 8, 8)}   # warps of 32, rows dividing 16
    pocl = type(facts)(**{**facts.__dict__, "platform": "Portable Computing Language"})
    assert len(tuner.candidates("tiled", pocl, space)) == 6                # any width


@pytest.mark.slow
def test_tuner_runs_the_tiled_strategy(queue, tmp_path, monkeypatch):
    from clgrid.tools import bench
    from clgrid.tools import tuner

    monkeypatch.setenv("CLGRID_TUNING", str(tmp_path / "tuning.toml"))
    work = bench.make_workload("tracks", 3000, 128, 3, oversample=4, num_planes=4)
    space = {"tile_u": [16, 32], "tile_factor": [0.5, 1.0]}   # work-groups of 32+ on any device
    result = tuner.tune(work, device=queue, strategy="tiled", repeats=1, progress=False, space=space)
    facts = clgrid.device.runtime.device_facts(queue.device)
    assert len(result.timings) == len(tuner.candidates("tiled", facts, space)) >= 2 and not result.skipped
    assert result.error <= 1e-5 and result.best["tile_u"] in (16, 32)


def test_table_defaults_grid_correctly_and_nvidia_flushes_with_ptx(queue, rng, stack):
    from clgrid.device import runtime
    from clgrid.device import tuning

    uvw, vis = random_visibilities(rng, 1000, N, CELL, 300, npol=2)
    gridder = grid_and_compare(queue, stack, uvw, vis)
    facts = runtime.device_facts(queue.device)
    if "Portable" in facts.platform:       # PoCL's table entry: 32 x 32 tiles
        assert gridder.strategy.local_size() == (32, 2)
    h100 = type(facts)(**{**facts.__dict__, "platform": "NVIDIA CUDA", "vendor": "NVIDIA Corporation",
                          "type": "ALL | GPU", "name": "NVIDIA H100 80GB HBM3"})
    assert tuning.resolve_tuning("tiled", None, h100)["atomic"] == "ptx"
