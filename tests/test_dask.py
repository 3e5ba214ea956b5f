"""`clgrid.dask` on a 2-worker `distributed.LocalCluster` (processes) against the
single-process operators: gridding to 1e-5 relative in single precision, bit-identical
from run to run with ``deterministic=True``, degridding equal, a failing task raised in
the caller (within a time limit, not a hang); `vis2dirty` / `dirty2vis` with rows and
channels chunked against `clgrid.vis2dirty` / `dirty2vis` and ducc0, and their adjointness.

One cluster serves the module (starting one takes seconds); its workers get the device
under test through ``CLGRID_DEVICE`` in their environment, the way the user guide (docs/user-guide/dask.md) says to assign
devices, and every call passes ``device=None``.
"""

import concurrent.futures
import contextlib
import gc
import os
import warnings

import numpy as np
import pytest

import clgrid
from clgrid.planning.host import SPEED_OF_LIGHT
from conftest import held_until, optional, random_visibilities, relative_error, warning_places, \
    warnings_of_two_threads, wide_field

dask = optional("dask", "dask")
distributed = optional("distributed", "dask")
da = optional("dask.array", "dask")
import clgrid.dask as cd  # noqa: E402  (needs dask)
import clgrid.dask.chunks  # noqa: E402

N, CELL, W_MAX = 64, 2e-3, 40.0
FREQS = np.array([1.0e8, 1.1e8, 1.2e8])
ROWS = 1500          # x 3 channels x 2 polarisations
CHUNK = 340          # 5 chunks, the last one short


@pytest.fixture(scope="module")
def client():
    device = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
    # Dask's active memory manager drops scattered copies no task waits for yet (every 2 s):
    # the tests that count a model's copies per worker would see that at random under load.
    with dask.config.set({"distributed.scheduler.active-memory-manager.start": False}):
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=None, env={"CLGRID_DEVICE": device})
    client = distributed.Client(cluster)
    yield client
    cd.clear_cache()          # releases the kernel stack scattered to the workers
    client.close()
    cluster.close()


@pytest.fixture(scope="module")
def kernels():
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=W_MAX, num_planes=4, oversample=4)


def observation(rng, npol=2):
    """uvw in metres (wavelengths up to 0.7 of the grid's half-width at the highest
    frequency), visibilities, weights per sample and flags per visibility, about 5% set."""
    uvw, _ = random_visibilities(rng, ROWS, N, CELL, W_MAX * 0.9, fill=0.7)
    uvw *= SPEED_OF_LIGHT / FREQS.max()
    shape = (ROWS, FREQS.size, npol)
    vis = (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(np.complex64)
    weights = rng.uniform(0.5, 2.0, shape[:-1]).astype(np.float32)
    flags = rng.random(shape) < 0.05
    return uvw, vis, weights, flags


def chunked(a, rows=CHUNK):
    return da.from_array(a, chunks=(rows,) + a.shape[1:])


def test_tree_sum_is_pairwise_by_index():
    assert cd.tree_sum(list("01234"), lambda a, b: f"({a}+{b})") == "(((0+1)+(2+3))+4)"
    assert cd.tree_sum(["0"], None) == "0"


def test_grid_equals_single_process(client, queue, kernels, rng):
    uvw, vis, weights, flags = observation(rng)
    single = clgrid.Gridder(N, CELL, kernels, device=queue)
    expected, expected_report = single.grid(uvw, vis, weights, flags, FREQS, return_report=True)
    # vis chunked along channels too (2 + 1): each task grids one row block's channels of one channel block
    vis_chunks = da.from_array(vis, chunks=(500, 2, 2))
    grid, report = cd.grid(chunked(uvw), vis_chunks, chunked(weights), chunked(flags), FREQS, grid_size=N,
                           cell_size=CELL, kernels=kernels, return_report=True)
    assert grid.dtype == np.complex64 and grid.shape == (2, N, N)
    assert relative_error(grid, expected) <= 1e-5
    for key in ("samples", "gridded", "flagged", "off_grid", "beyond_kernel_stack", "grid_point_additions"):
        assert report[key] == expected_report[key], key
    np.testing.assert_allclose(report["norm"], expected_report["norm"], rtol=1e-6)
    # the tasks ran in the workers, on the device their environment names
    names = {op[3] for ops in client.run(cd.cached_operators).values() for op in ops if op[0] == "Gridder"}
    assert names == {queue.device.name.strip()}
    assert not cd.cached_operators()
    # weights per channel broadcast to every row, cut to each task's channels
    per_channel = rng.uniform(0.5, 2.0, FREQS.size).astype(np.float32)
    expected = single.grid(uvw, vis, per_channel, flags, FREQS)
    assert relative_error(cd.grid(chunked(uvw), vis, per_channel, flags, FREQS, grid_size=N, cell_size=CELL,
                                  kernels=kernels, channel_chunks=1), expected) <= 1e-5


def test_deterministic_is_bit_identical_run_to_run(client, queue, kernels, rng):
    uvw, vis, weights, flags = observation(rng, npol=1)
    expected = clgrid.Gridder(N, CELL, kernels, device=queue, deterministic=True).grid(uvw, vis, weights, flags,
                                                                                         FREQS)

    def run(rows=CHUNK):
        return cd.grid(chunked(uvw, rows), chunked(vis, rows), chunked(weights, rows), flags, FREQS, grid_size=N,
                       cell_size=CELL, kernels=kernels, deterministic=True)

    first, second = run(), run()
    assert np.array_equal(first.view(np.uint32), second.view(np.uint32))
    assert relative_error(first, expected) <= 1e-5
    assert relative_error(run(rows=611), expected) <= 1e-5       # other chunks: another tree, same sum


def test_degrid_equals_single_process_and_sends_the_model_once(client, queue, kernels, rng):
    uvw, _, _, flags = observation(rng)
    model = (rng.normal(size=(2, N, N)) + 1j * rng.normal(size=(2, N, N))).astype(np.complex64)
    expected = clgrid.Degridder(N, CELL, kernels, device=queue).degrid(model, uvw, flags, FREQS)
    vis = cd.degrid(model, chunked(uvw), chunked(flags), FREQS, grid_size=N, cell_size=CELL, kernels=kernels,
                    channel_chunks=2)
    assert vis.shape == expected.shape and vis.chunks == (chunked(uvw).chunks[0], (2, 1), (2,))
    held = {worker: [key for key in keys if str(key).startswith("clgrid-model-")]
            for worker, keys in client.has_what().items()}
    assert len(held) == 2 and all(len(keys) == 1 for keys in held.values())
    assert len({keys[0] for keys in held.values()}) == 1          # one scattered copy per worker
    result = vis.compute()
    assert result.dtype == np.complex64
    np.testing.assert_array_equal(result, expected)
    assert np.count_nonzero(result == 0) >= np.count_nonzero(flags)


def test_failing_task_raises_in_the_caller(client, kernels, rng):
    uvw, vis, weights, _ = observation(rng, npol=1)
    vis[2 * CHUNK + 7, 1, 0] = np.nan                             # unflagged NaN in chunk 2 only
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        call = pool.submit(cd.grid, chunked(uvw), chunked(vis), weights, None, FREQS, grid_size=N, cell_size=CELL,
                           kernels=kernels)
        with pytest.raises(ValueError, match="vis contains NaN or inf") as caught:
            call.result(timeout=120)                              # raises, not hangs
    assert f"chunk 2, rows {2 * CHUNK}:{3 * CHUNK}" in "".join(getattr(caught.value, "__notes__", []))
    vis[2 * CHUNK + 7, 1, 0] = 1.0                                # the cluster still works after it
    assert np.abs(cd.grid(chunked(uvw), chunked(vis), weights, None, FREQS, grid_size=N, cell_size=CELL,
                          kernels=kernels)).max() > 0


def test_without_a_cluster_on_dask_threads(monkeypatch, queue, kernels, rng, device_name):
    """No distributed Client: the kernel stack and model are nodes of the graph."""
    monkeypatch.setattr(clgrid.dask.chunks, "client", lambda: None)
    uvw, vis, weights, flags = observation(rng, npol=1)
    with dask.config.set(scheduler="threads"):
        grid = cd.grid(chunked(uvw), chunked(vis), weights, flags, FREQS, grid_size=N, cell_size=CELL,
                       kernels=kernels, device=device_name)
        assert relative_error(grid, clgrid.Gridder(N, CELL, kernels, device=queue).grid(
            uvw, vis, weights, flags, FREQS)) <= 1e-5
        vis_out = cd.degrid(grid, chunked(uvw), None, FREQS, grid_size=N, cell_size=CELL, kernels=kernels,
                            device=device_name).compute()
    np.testing.assert_array_equal(vis_out, clgrid.Degridder(N, CELL, kernels, device=queue).degrid(grid, uvw,
                                                                                                   None, FREQS))
    # dirty2vis: the image one node of the graph, chunks from uvw and channel_chunks
    wide_uvw, _, _, wgt, _ = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single")
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    geometry = dict(freq=WIDE_FREQS, wgt=wgt, pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"],
                    epsilon=1e-4, do_wgridding=True, device=device_name)
    with dask.config.set(scheduler="threads"):
        predicted = cd.dirty2vis(uvw=blocks(wide_uvw), dirty=dirty, channel_chunks=CHANNEL_CHUNK, **geometry)
        assert predicted.numblocks == (3, 2)
        expected = clgrid.dirty2vis(uvw=wide_uvw, dirty=dirty, **geometry)
        assert relative_error(predicted.compute(), expected) <= 2e-4      # each within epsilon of the truth
    cd.clear_cache()


def test_arguments_are_refused_by_name(kernels, queue, rng):
    uvw, vis, _, _ = observation(rng, npol=1)
    common = dict(grid_size=N, cell_size=CELL, kernels=kernels)
    with pytest.raises(TypeError, match="uvw must be a dask array"):
        cd.grid(uvw, vis, **common)
    with pytest.raises(TypeError, match="device must be None, a device name"):
        cd.grid(chunked(uvw), vis, device=queue.device, **common)
    with pytest.raises(ValueError, match="does not match uvw"):
        cd.grid(chunked(uvw), vis[:-1], **common)
    with pytest.raises(ValueError, match="grid must be a complex array"):
        cd.degrid(np.zeros((1, N, N)), chunked(uvw), **common)


def test_assign_devices_gives_each_worker_a_device_by_index(client, queue, kernels, rng):
    device = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
    count = len(clgrid.device.runtime.matching_devices(device))
    try:
        with pytest.warns(UserWarning, match="workers share") if count < 2 else contextlib.nullcontext() as said:
            assigned = cd.assign_devices(client, device)
        if count < 2:                                     # at the caller's line
            assert [w.filename for w in said if "workers share" in str(w.message)] == [__file__]
        assert sorted(spec for spec, _ in assigned.values()) == [f"{device} #{k % count}" for k in range(2)]
        environment = client.run(lambda: os.environ.get("CLGRID_DEVICE"))
        assert set(environment.values()) == {spec for spec, _ in assigned.values()}
        uvw, vis, _, _ = observation(rng, npol=1)
        cd.grid(chunked(uvw), vis, None, None, FREQS, grid_size=N, cell_size=CELL, kernels=kernels)
        used = {op[3] for ops in client.run(cd.cached_operators).values() for op in ops}
        assert used <= {name for _, name in assigned.values()} and used
    finally:
        client.run(lambda: os.environ.update(CLGRID_DEVICE=device))


def test_kept_plans_serve_later_calls_and_the_degridder(client, queue, kernels, rng):
    """A chunk is planned at most once per worker, by gridders and degridders alike (Dask
    may move a chunk to the other worker, so at most twice here), and the results are
    those of planning in each call."""
    uvw, vis, weights, flags = observation(rng)
    model = (rng.normal(size=(2, N, N)) + 1j * rng.normal(size=(2, N, N))).astype(np.complex64)
    client.run(cd.clear_cache)
    rest = (chunked(weights), chunked(flags), FREQS)
    common = dict(grid_size=N, cell_size=CELL, kernels=kernels, keep_plans=True)
    expected = clgrid.Gridder(N, CELL, kernels, device=queue).grid(uvw, vis, weights, flags, FREQS)
    first = cd.grid(chunked(uvw), chunked(vis), *rest, **common)
    second = cd.grid(chunked(uvw), chunked(2 * vis), *rest, **common)        # new values, same positions
    predicted = cd.degrid(model, chunked(uvw), chunked(flags), FREQS, **common).compute()
    counts = list(client.run(cd.cached_plans).values())
    made, reused = sum(c["made"] for c in counts), sum(c["reused"] for c in counts)
    assert made + reused == 15 and 5 <= made <= 10 and sum(c["kept"] for c in counts) == made
    assert relative_error(first, expected) <= 1e-5 and relative_error(second, 2 * expected) <= 1e-5
    np.testing.assert_array_equal(predicted, clgrid.Degridder(N, CELL, kernels, device=queue).degrid(
        model, uvw, flags, FREQS))


# -- vis2dirty / dirty2vis ----------------------------------------------------------------

IMAGE = dict(npix_x=64, npix_y=48, pixsize_x=5e-3, pixsize_y=6e-3)
WIDE_ROWS, WIDE_FREQS = 1100, np.array([1.0e8, 1.1e8, 1.2e8, 1.3e8])   # wide_field's: about 20 degrees on IMAGE
ROW_CHUNK, CHANNEL_CHUNK = 400, 2      # 3 row blocks (the last short) x 2 channel blocks: 6 tasks


def blocks(a):
    return da.from_array(a, chunks=(ROW_CHUNK, CHANNEL_CHUNK) if a.ndim == 2 and a.shape[1] != 3 else (ROW_CHUNK, 3))


def test_an_output_that_shares_memory_with_a_numpy_input_is_refused(rng):
    """`clgrid.dask.dirty2vis(vis=)` and `clgrid.dask.vis2dirty(dirty=)` refuse an output
    that shares memory with a numpy input, naming both, before any task is made (the rule
    of `clgrid.dirty2vis`: `clgrid.operators.checks.check_apart`); dask inputs are left
    alone."""
    uvw, _, vis, wgt, _ = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single")
    image = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    points = dict(uvw=uvw, freq=WIDE_FREQS, epsilon=1e-4, do_wgridding=True, pixsize_x=IMAGE["pixsize_x"],
                  pixsize_y=IMAGE["pixsize_y"])
    out = np.zeros(vis.shape, np.complex64)
    with pytest.raises(ValueError, match="vis shares memory with wgt"):
        cd.dirty2vis(dirty=image, wgt=out.real, vis=out, **points)
    with pytest.raises(ValueError, match="vis shares memory with dirty"):
        cd.dirty2vis(dirty=out.view(np.float32).reshape(-1)[:image.size].reshape(image.shape), vis=out, **points)
    dirty = vis.view(np.float32).reshape(-1)[:image.size].reshape(image.shape)
    with pytest.raises(ValueError, match="dirty shares memory with vis"):
        cd.vis2dirty(vis=vis, dirty=dirty, npix_x=IMAGE["npix_x"], npix_y=IMAGE["npix_y"], **points)


EPSILON = {"single": 1e-5, "double": 1e-10}


@pytest.mark.parametrize("split", ["auto", "rows"])          # auto: planes here (w, 2 workers)
@pytest.mark.parametrize("precision", ["single", pytest.param("double", marks=pytest.mark.slow)])
def test_vis2dirty_and_dirty2vis_equal_single_process_and_are_adjoint(client, rng, device_name, precision, split):
    """Rows and channels chunked: the image within 1e-5 (single) or 2 epsilon (double) of
    `clgrid.vis2dirty`'s by chunks of rows, to rounding by slabs of planes (the same
    geometry), and within epsilon of ducc0's at 1e-12; the visibilities likewise;
    <dirty2vis(d), v> == <d, vis2dirty(v)>; the image went to the workers once (one file in
    shared memory where they share the client's host)."""
    wgridder = optional("ducc0.wgridder", "test")
    eps = EPSILON[precision]
    tolerance = (1e-5 if precision == "single" else 2 * eps) if split == "rows" else \
        (1e-6 if precision == "single" else 1e-12)
    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision=precision, masked=0.1)
    common = dict(uvw=uvw, freq=WIDE_FREQS, wgt=wgt, mask=mask, epsilon=eps, do_wgridding=True, **IMAGE)
    single = clgrid.vis2dirty(vis=vis, device=device_name, **common)
    oracle = wgridder.vis2dirty(vis=vis.astype(np.complex128), **dict(common, wgt=wgt.astype(np.float64),
                                                                       epsilon=1e-12))
    # vis and mask as chunked dask arrays, uvw and wgt as numpy: split the same way
    image = cd.vis2dirty(vis=blocks(vis), split=split, **dict(common, mask=blocks(mask)))
    assert image.dtype == single.dtype and image.shape == (IMAGE["npix_x"], IMAGE["npix_y"])
    assert relative_error(image, single) <= tolerance
    assert relative_error(image, oracle) <= eps

    # the image plus noise: <dirty, image> is then about |image|^2, not a sum of random
    # terms that can cancel below what the adjointness check below can resolve
    dirty = (image + np.std(image) * rng.normal(size=image.shape)).astype(image.dtype)
    geometry = {k: v for k, v in common.items() if k not in ("npix_x", "npix_y")}
    predicted = cd.dirty2vis(dirty=dirty, split=split, **dict(geometry, uvw=blocks(uvw), wgt=blocks(wgt)))
    assert predicted.chunks == ((ROW_CHUNK, ROW_CHUNK, WIDE_ROWS - 2 * ROW_CHUNK), (CHANNEL_CHUNK, CHANNEL_CHUNK))
    held = [[key for key in keys if str(key).startswith("clgrid-dirty-")] for keys in client.has_what().values()]
    if os.path.isdir("/dev/shm"):             # workers on this host: written once into a file there, not scattered
        mine = f"clgrid-x-{os.getpid()}-"
        assert not any(held) and any(f.startswith(mine) and f.endswith("-d") for f in os.listdir("/dev/shm"))
    else:
        assert len(held) == 2 and all(len(keys) == 1 for keys in held)    # scattered once, one copy each
    predicted = predicted.compute()
    assert predicted.dtype == vis.dtype
    expected = clgrid.dirty2vis(dirty=dirty, device=device_name, **geometry)
    assert relative_error(predicted, expected) <= tolerance
    assert not np.any(predicted[mask == 0])
    # adjoint, weights and mask applied once each way: Re <dirty2vis(d), v> = <d, vis2dirty(v)>, to what
    # each side's error allows (Cauchy-Schwarz); a wrong sign or conjugation misses by about |lhs|
    lhs, rhs = np.vdot(predicted, vis).real, np.vdot(dirty, image)
    allowed = eps * (np.linalg.norm(dirty) * np.linalg.norm(image) + np.linalg.norm(predicted) * np.linalg.norm(vis))
    assert abs(lhs - rhs) <= allowed < 0.01 * abs(lhs)


def test_every_call_sees_every_worker_whenever_the_client_refreshes_its_cached_identity(client, monkeypatch):
    """The workers a call prefers, and those the watch sees, are asked of the scheduler
    each time.  (`distributed.Client.scheduler_info` fetches into the client's cached
    identity and returns that, which the client's own refresh, every
    ``scheduler-info-interval``, with no workers in it, may overwrite in between: a call
    then saw no workers, so its image was scattered instead of published into shared
    memory, at random, about once in the suite's history: the adjoint test above.)  A
    second client refreshing every millisecond, 500 questions of each: before, about
    one in seven came back without workers here."""
    from clgrid.dask import watch

    expected = sorted(client.nthreads())
    assert len(expected) == 2
    with dask.config.set({"distributed.client.scheduler-info-interval": "1ms"}):
        eager = distributed.Client(client.scheduler.address, set_as_default=False)
    try:
        monkeypatch.setattr(clgrid.dask.chunks, "client", lambda: eager)
        seen = [clgrid.dask.chunks.workers_to_prefer(True) for _ in range(500)]
        assert seen.count(expected) == len(seen), f"{len(seen) - seen.count(expected)} of {len(seen)} saw other workers"
        watching = watch._Watch(eager, 60)
        for _ in range(500):
            watching.check()
        assert sorted(watching.seen) == expected and not watching.left, (watching.seen, watching.left)
    finally:
        eager.close()


@pytest.mark.parametrize("split,tasks", [("rows", 6), ("planes", 2)])
def test_wgridders_are_kept_for_later_calls(client, rng, split, tasks):
    """A major cycle: the second call on the same data finds each task's operator on the
    worker that made it (chunk or slab i prefers worker i mod n); keep_operators=0 keeps
    none.  6 chunks, or 2 slabs (one per worker), each one task (slab_samples: all)."""
    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single", masked=0.1)
    common = dict(uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt), mask=blocks(mask), epsilon=1e-4,
                  do_wgridding=True, split=split, slab_samples=vis.size, **IMAGE)
    client.run(cd.clear_cache)
    first = cd.vis2dirty(vis=blocks(vis), **common)
    second = cd.vis2dirty(vis=blocks(2 * vis), **common)         # new values, same points
    counts = list(client.run(cd.cached_wgridders).values())
    made, reused = sum(c["made"] for c in counts), sum(c["reused"] for c in counts)
    assert made + reused == 2 * tasks and reused >= tasks // 2, counts
    assert relative_error(second, 2 * first) <= 1e-6
    client.run(cd.clear_cache)
    cd.vis2dirty(vis=blocks(vis), keep_operators=0, **common)
    assert sum(c["kept"] for c in client.run(cd.cached_wgridders).values()) == 0


def test_a_major_cycle_moves_only_values_and_rebuilds_lost_operators_from_kept_points(client, rng):
    """The planes split, 2 slabs: a second vis2dirty and a dirty2vis on the same points
    run no first pass, selection or planning (the task stream holds values, imaging and
    sums only) and find their operators; operators dropped on the workers are built again
    there from the points the workers keep; the results equal fresh calls'."""
    from dask.utils import key_split
    from distributed import get_task_stream

    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single", masked=0.1)
    points = dict(uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt), mask=blocks(mask), epsilon=1e-4,
                  do_wgridding=True, slab_samples=vis.size, pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"])
    size = dict(npix_x=IMAGE["npix_x"], npix_y=IMAGE["npix_y"])
    cd.clear_cache()
    client.run(cd.clear_cache)
    first = cd.vis2dirty(vis=blocks(vis), **points, **size)
    dirty = first + np.std(first) * rng.normal(size=first.shape).astype(first.dtype)
    with get_task_stream(client) as stream:
        second = cd.vis2dirty(vis=blocks(2 * vis), **points, **size)
    imaging = {key_split(t["key"]) for t in stream.data}
    if os.path.isdir("/dev/shm"):
        # every image in shared memory: the sums take the imaging tasks' outputs whole (no
        # node per facet), and the first task's image is written straight into the result
        assert imaging - {"array"} == {"chunk_values", "image_slab", "sum_facet", "warnings_union"}, imaging
    with get_task_stream(client) as stream:
        predicted = cd.dirty2vis(dirty=dirty, **points).compute()
    names = imaging | {key_split(t["key"]) for t in stream.data}
    assert not names & {"chunk_extent", "chunk_counts", "geometry_of", "chunk_selection", "chunk_parts",
                        "slab_points"}, names
    assert {"chunk_values", "image_slab", "vis_slab"} <= names and any("chunk_assemble" in n for n in names), names
    counts = list(client.run(cd.cached_wgridders).values())
    # each of the 3 calls looks up the 2 slabs' operators: the first makes them, the others
    # find them (a slab task Dask moves to the other worker under load makes one there)
    made, reused = (sum(c[k] for c in counts) for k in ("made", "reused"))
    assert made + reused == 6 and 2 <= made <= 4, counts
    assert relative_error(second, 2 * first) <= 1e-6
    fresh = cd.dirty2vis(dirty=dirty, keep_operators=0, **points).compute()
    assert relative_error(predicted, fresh) <= 1e-6
    client.run(cd.clear_wgridders)                   # the workers' operators go; the client's record stays
    third = cd.vis2dirty(vis=blocks(vis), **points, **size)
    assert relative_error(third, first) <= 1e-6
    assert 2 <= sum(c["made"] for c in client.run(cd.cached_wgridders).values()) <= 4


def test_images_come_back_through_shared_memory_or_as_rows(client, rng, tmp_path):
    """A worker on the client's host writes its facet into the client's file in /dev/shm,
    the values and partial images pass through files there too (`clgrid.dask.exchange`),
    kept for the next call on the same points and removed by `clear_cache`; a task that
    does not find the file (another host) returns its rows, and the client joins both."""
    from clgrid.dask import delivery

    def ours() -> set:                 # this process's files (other processes may use /dev/shm meanwhile)
        return {f for f in os.listdir(delivery.SHARED_MEMORY) if f.startswith(f"clgrid-x-{os.getpid()}-")}

    cd.clear_cache()                   # (the box pool its own: an earlier test's free box would be taken or counted)
    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single", masked=0.1)
    # single precision, the slabs' images summed against one engine's planes: about 1e-6
    # apart, at times a little more (1.03e-6 for seed 2901240634, on PoCL and Intel alike,
    # at the session's start too); the transport's own faults would be whole facets
    REORDERED = 2e-6
    common = dict(uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt), mask=blocks(mask), epsilon=1e-4,
                  do_wgridding=True, **IMAGE)
    image = cd.vis2dirty(vis=blocks(vis), **common)
    expected = clgrid.vis2dirty(vis=vis, uvw=uvw, freq=WIDE_FREQS, wgt=wgt, mask=mask, epsilon=1e-4,
                                do_wgridding=True, **IMAGE)
    assert relative_error(image, expected) <= REORDERED
    if os.path.isdir(delivery.SHARED_MEMORY):
        made = ours()
        assert made                                                       # values and partial images
        other = rng.normal(size=vis.shape) + 1j * rng.normal(size=vis.shape)
        again = cd.vis2dirty(vis=blocks(other.astype(np.complex64)), **common)      # the same files, new values
        assert ours() == made
        assert relative_error(again, clgrid.vis2dirty(vis=other.astype(np.complex64), uvw=uvw, freq=WIDE_FREQS,
                                                      wgt=wgt, mask=mask, epsilon=1e-4, do_wgridding=True,
                                                      **IMAGE)) <= REORDERED
        assert relative_error(image, expected) <= REORDERED                    # the first image is the caller's
        # each result is the mapping of a kept box of the client's: none is free while the
        # caller holds both; dropping one frees its box, which the next call takes (its
        # image, not the one still held, written there)
        def free() -> list:
            return [box.path for boxes in delivery._boxes.free_blocks().values() for box in boxes]

        held = set(delivery._made)
        assert len(held) >= 2 and all(os.path.exists(path) for path in held) and not free()
        del again
        gc.collect()
        assert len(free()) == 1 and set(free()) <= held
        third = cd.vis2dirty(vis=blocks(2 * vis), **common)
        assert not free() and set(delivery._made) == held
        assert relative_error(third, 2 * expected) <= REORDERED and relative_error(image, expected) <= REORDERED
        client.run(cd.clear_cache)
        cd.clear_cache()
        assert not ours() and not any(os.path.exists(path) for path in held)
        assert relative_error(image, expected) <= REORDERED and relative_error(third, 2 * expected) <= REORDERED
        del third
        gc.collect()
        assert not free()                    # (its file removed: not given back)
    whole = rng.normal(size=(10, 4)).astype(np.float32)
    box = delivery.open_box(whole.shape, whole.dtype)
    if box is None:
        pytest.skip("no room in /dev/shm for the delivery's own test")
    assert delivery.deliver(whole[:6], box, 0) is None
    elsewhere = delivery.DropBox(str(tmp_path / "on-another-host"), box.shape, box.dtype)
    rows = delivery.deliver(whole[6:], elsewhere, 6)
    assert rows is not None
    assert np.array_equal(delivery.collect(box, [None, rows], [0, 6]), whole) and not os.path.exists(box.path)


def test_a_result_its_caller_dropped_gives_its_box_back_at_once_however_long_the_call(client, rng, monkeypatch):
    """A vis2dirty result is a kept box's mapping, given back to the pool when the caller
    drops it (`clgrid.dask.delivery`): at once, with the garbage collector off, though
    the call outlasted many polls of the stall watch (`clgrid.dask.watch`, every 1 ms
    here).  Before, each poll's TimeoutError (``distributed.wait``'s) held the frames it
    went through in a reference cycle, the caller's among them, and the result with its
    box lived on until the collector ran: `test_images_come_back_...` then found the
    boxes of the test before it given back in its middle."""
    from clgrid.dask import delivery, watch

    if not os.path.isdir(delivery.SHARED_MEMORY):
        pytest.skip("no /dev/shm: no box")
    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single", masked=0.1)
    common = dict(uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt), mask=blocks(mask), epsilon=1e-4,
                  do_wgridding=True, **IMAGE)
    polls, check = [], watch._Watch.check
    monkeypatch.setattr(watch, "POLL_SECONDS", 1e-3)
    monkeypatch.setattr(watch._Watch, "check", lambda self: (polls.append(None), check(self))[1])

    def free() -> set:
        return {box.path for boxes in delivery._boxes.free_blocks().values() for box in boxes}

    def caller() -> set:
        image = cd.vis2dirty(vis=blocks(vis), **common)
        assert np.any(image) and not free()
        return set(delivery._made)                  # (its box alone: the pool was emptied)

    cd.clear_cache()
    gc.collect()
    gc.disable()
    try:
        boxes = caller()
        assert polls and len(boxes) == 1           # (the watch polled while the call ran)
        assert free() == boxes, "the dropped result's box was not given back when its caller returned"
    finally:
        gc.enable()
        cd.clear_cache()


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_a_facet_sum_writes_the_box_in_the_trees_order_and_again_the_same(rng, tmp_path, count):
    """`clgrid.dask.tasks.sum_facet`: the parts (arrays, `Shared` regions of files, or a
    whole task output) added on two threads, the same bits as the tree of `add_images`
    (`tree_sum`), written into the box at the facet's rows without touching the others,
    and the same when the sum runs again (as Dask runs a task again after its worker
    died: nothing added in place); a single part may be the box's own rows (a call's only
    imaging task wrote it there: counted only), never one of several; returned where the
    box is elsewhere; non-finite pixels and non-zero ones counted (all zero, and summing
    to zero)."""
    from clgrid.dask import delivery, exchange, tasks
    from clgrid.dask.chunks import tree_sum

    rows, cols, start = 300, 1000, 100
    parts = [rng.normal(size=(rows, cols)).astype(np.float32) for _ in range(count)]
    parts[-1][7, 3], parts[0][299, 999] = np.inf, np.nan
    expected = tree_sum(parts, tasks.add_images)
    box = delivery.kept_box((rows + 150, cols), np.float32)
    if box is None:
        pytest.skip("no room in /dev/shm for a box")
    try:
        whole = delivery.region(box, 0, (rows + 150, cols))
        whole[...] = -1
        in_box = exchange.Shared(box.path, start * cols, rows * cols, "<f4", (rows, cols))
        given = []
        for i, p in enumerate(parts):
            path = str(tmp_path / f"part{i}")
            exchange.room_of(path, p.shape, p.dtype)[...] = p
            shared = exchange.Shared(path, 0, p.size, "<f4", p.shape)
            given.append((None, shared) if i % 2 else shared)            # a whole output, or the facet
        if count == 1:
            whole[start:start + rows] = parts[0]                          # the only task wrote the box
            given = [in_box]
        for _ in range(2):                                                # (run again: the same)
            got, bad, nonzero = tasks.sum_facet(box, start, 2, 1, *given)
            assert got is None and nonzero and bad == 2
            assert np.array_equal(whole[start:start + rows], expected, equal_nan=True)
            assert np.all(whole[:start] == -1) and np.all(whole[start + rows:] == -1)
        if count > 1:
            with pytest.raises(RuntimeError, match="internal error: a facet sum of"):
                tasks.sum_facet(box, start, 2, 1, in_box, *given[1:])
        elsewhere = delivery.DropBox(str(tmp_path / "on-another-host"), box.shape, box.dtype)
        got, bad, nonzero = tasks.sum_facet(elsewhere, start, 2, 0, *parts)
        assert np.array_equal(got, expected, equal_nan=True) and nonzero
        zeros = [np.zeros((rows, cols), np.float32)] * count
        assert tasks.sum_facet(elsewhere, start, 2, 0, *zeros)[1:] == (0, False)
        cancelling = np.zeros((rows, cols), np.float32)
        cancelling[5, :2] = (1.0, -1.0)                       # a non-zero image whose sum is zero
        assert tasks.sum_facet(elsewhere, start, 2, 0, *([cancelling] + zeros[1:]))[1:] == (0, True)
    finally:
        delivery.discard(box)


def test_changed_points_are_imaged_anew_and_deterministic_calls_repeat_their_bits(client, rng):
    """Operators, selections and shared-memory files are kept per set of points: uvw changed
    in place in the caller's numpy array and a new mask make the next call image the new
    points (equal to a fresh single-process call), not the kept ones; with
    ``deterministic=True`` calls on the same points repeat their bits through the kept
    files, and equal the single process to 1e-6 (single precision)."""
    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single", masked=0.1)
    common = dict(freq=WIDE_FREQS, epsilon=1e-4, do_wgridding=True, slab_samples=vis.size, row_chunks=ROW_CHUNK,
                  channel_chunks=CHANNEL_CHUNK, **IMAGE)
    single = dict(freq=WIDE_FREQS, epsilon=1e-4, do_wgridding=True, **IMAGE)
    first = cd.vis2dirty(uvw=uvw, vis=vis, wgt=wgt, mask=mask, **common)
    assert relative_error(first, clgrid.vis2dirty(uvw=uvw, vis=vis, wgt=wgt, mask=mask, **single)) <= 1e-6
    uvw[:, :2] *= 0.8                                   # the same array, new points
    uvw[:, 2] *= 1.3
    changed = mask.copy()
    changed[:300] = 0
    for m in (mask, changed):
        image = cd.vis2dirty(uvw=uvw, vis=vis, wgt=wgt, mask=m, **common)
        expected = clgrid.vis2dirty(uvw=uvw, vis=vis, wgt=wgt, mask=m, **single)
        assert relative_error(image, expected) <= 1e-6 and relative_error(image, first) > 1e-2
    runs = [cd.vis2dirty(uvw=uvw, vis=v, wgt=wgt, mask=changed, deterministic=True, **common)
            for v in (vis, 3 * vis, vis)]
    assert np.array_equal(runs[0].view(np.uint32), runs[2].view(np.uint32))
    # 3 * vis is rounded to single before gridding: 1e-6 is a few ulps, past which sums of many
    # rounded terms go (1.02e-6 at seed 1301192514); values kept from the last call would give 2/3
    assert relative_error(runs[1], 3 * runs[0]) <= 1e-5


def test_a_prediction_whose_image_a_later_call_replaced_is_refused(client, rng):
    """dirty2vis's image goes to the workers through one kept file per set of points, and
    each slab's prediction to its chunks through another: a second prediction made on the
    same points before the first was computed replaces them, and the first then refuses
    to compute (naming why) instead of predicting the second image; the second equals the
    single process's.  The first's predictions start at its call (`chunks.started`): they
    may read its image before the second call replaces it, or not (the first refuses for
    its image replaced); once they have (waited for here), the first refuses for its
    slabs' predictions written again."""
    from distributed import futures_of, wait

    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm: the image is scattered, each call its own")
    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single", masked=0.1)
    points = dict(uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt), mask=blocks(mask), epsilon=1e-4,
                  do_wgridding=True, pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"])
    models = [rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32) for _ in range(2)]
    expected = clgrid.dirty2vis(dirty=models[1], uvw=uvw, freq=WIDE_FREQS, wgt=wgt, mask=mask, epsilon=1e-4,
                                do_wgridding=True, pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"])
    first, second = (cd.dirty2vis(dirty=m, **points) for m in models)
    assert relative_error(second.compute(), expected) <= 1e-6
    with pytest.raises(RuntimeError, match="replaced by a later dirty2vis|written again by another dirty2vis"):
        first.compute()
    first = cd.dirty2vis(dirty=models[0], **points)
    predictions = futures_of(first)
    assert predictions                                  # started at the call
    wait(predictions)
    second = cd.dirty2vis(dirty=models[1], **points)
    assert relative_error(second.compute(), expected) <= 1e-6
    with pytest.raises(RuntimeError, match="written again by another dirty2vis"):
        first.compute()


def test_a_nan_image_is_refused_as_it_is_published_and_left_unstamped(client, rng):
    """dirty2vis's image is checked for NaN and inf as the client writes it into shared
    memory (one pass, `clgrid.dask.exchange.publish`): a NaN or infinite entry anywhere
    is refused with the single process's message, and the file is left without a stamp
    (nothing published: a prediction of the image written there before refuses, as once
    a later call replaced it); without shared memory (``keep_operators=0``) the client
    counts them as before.  A finite image is then predicted as one process does."""
    from clgrid.dask import exchange

    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single", masked=0.1)
    points = dict(uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt), mask=blocks(mask), epsilon=1e-4,
                  do_wgridding=True, pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"])
    model = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    earlier = cd.dirty2vis(dirty=model, **points)
    for where, value in (((0, 0), np.nan), ((IMAGE["npix_x"] - 1, 7), -np.inf), ((31, 20), np.nan)):
        bad = model.copy()
        bad[where] = value
        for keep in ({"keep_operators": 0}, {}):
            with pytest.raises(ValueError, match="^dirty has NaN or infinite entries$"):
                cd.dirty2vis(dirty=bad, **keep, **points)
    if os.path.isdir("/dev/shm"):
        with exchange.using(next(reversed(exchange._prefixes))) as files:   # this call's points' files
            path = exchange.place(files, "d")
        with open(path, "rb") as f:
            assert f.read(exchange.STAMP) == bytes(exchange.STAMP)            # refused before it is stamped
        with pytest.raises(RuntimeError, match="replaced by a later dirty2vis"):
            earlier.compute()
    expected = clgrid.dirty2vis(dirty=model, uvw=uvw, freq=WIDE_FREQS, wgt=wgt, mask=mask, epsilon=1e-4,
                                do_wgridding=True, pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"])
    assert relative_error(cd.dirty2vis(dirty=model, **points).compute(), expected) <= 1e-6


def _inputs_by_name(array, name: str) -> list:
    """For each node of ``array``'s graph named ``name``, the names of the nodes it takes."""
    from dask.utils import key_split

    graph = array.__dask_graph__()
    dependencies = graph.get_all_dependencies()
    return [sorted(key_split(d) for d in dependencies[k]) for k in graph if key_split(k) == name]


def test_chunks_take_the_slab_predictions_from_shared_memory_without_a_task_between(client, rng):
    """A reused dirty2vis, planes split, workers on the client's host: each chunk's
    `chunk_assemble` takes the slab tasks' whole outputs (a `Shared` per chunk) and picks
    its own, with no getitem node between (one scheduler hop per chunk fewer), and its
    task is the result's block itself (no alias after it, optimized or not); without
    shared memory (``keep_operators=0``) each chunk's share is still picked where its
    slab's task ran (a getitem), so only it travels.  Both predict what one process does."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm: the shares are arrays, picked by getitem nodes by design")
    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single", masked=0.1)
    points = dict(uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt), mask=blocks(mask), epsilon=1e-4,
                  do_wgridding=True, split="planes", slab_samples=vis.size, pixsize_x=IMAGE["pixsize_x"],
                  pixsize_y=IMAGE["pixsize_y"])
    from dask.core import flatten
    from dask.utils import key_split

    model = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    expected = clgrid.dirty2vis(dirty=model, uvw=uvw, freq=WIDE_FREQS, wgt=wgt, mask=mask, epsilon=1e-4,
                                do_wgridding=True, pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"])
    cd.dirty2vis(dirty=model, **points).compute()                     # points selected and kept
    reused = cd.dirty2vis(dirty=model, **points)
    taken = _inputs_by_name(reused, "chunk_assemble")
    assert len(taken) == 6 and all("vis_slab" in t and "getitem" not in t for t in taken), taken
    # the array's blocks are the chunks' tasks: no alias (from_delayed, concatenate) after them
    (optimized,) = dask.optimize(reused)
    assert {key_split(k) for k in flatten(optimized.__dask_keys__())} == {"chunk_assemble"}
    assert not {key_split(k) for k in optimized.__dask_graph__()} & {"concatenate", "from-value", "getitem"}
    assert relative_error(reused.compute(), expected) <= 1e-6
    assert relative_error(reused[::3, 1:].sum().compute(), expected[::3, 1:].sum()) <= 1e-5
    apart = cd.dirty2vis(dirty=model, keep_operators=0, **points)
    taken = _inputs_by_name(apart, "chunk_assemble")
    assert len(taken) == 6 and all("getitem" in t and "vis_slab" not in t for t in taken), taken
    assert relative_error(apart.compute(), expected) <= 1e-6


def test_without_room_in_shared_memory_everything_goes_through_dask(client, rng):
    """Where no file can be made in /dev/shm (full, or too small a tmpfs), the values,
    facets, image and model go through Dask as before, with the same results."""
    from clgrid.dask import exchange

    def full(on: bool):
        import errno
        import os as os_module

        if on:
            os_module._clgrid_fallocate = os_module.posix_fallocate

            def no_room(*args):
                raise OSError(errno.ENOSPC, "No space left on device")

            os_module.posix_fallocate = no_room
        elif hasattr(os_module, "_clgrid_fallocate"):
            os_module.posix_fallocate = os_module.__dict__.pop("_clgrid_fallocate")
        from clgrid.dask import exchange as kept
        kept.release()

    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single", masked=0.1)
    points = dict(uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt), mask=blocks(mask), epsilon=1e-4,
                  do_wgridding=True, slab_samples=vis.size)
    image_size = dict(npix_x=IMAGE["npix_x"], npix_y=IMAGE["npix_y"])
    pixels = dict(pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"])
    cd.clear_cache()
    client.run(cd.clear_cache)
    try:
        client.run(full, True)
        full(True)
        image = cd.vis2dirty(vis=blocks(vis), **points, **image_size, **pixels)
        predicted = cd.dirty2vis(dirty=image, **points, **pixels).compute()
        mine = f"clgrid-x-{os.getpid()}-"           # (not another process's: tests may run beside this one)
        made = [f for f in os.listdir(exchange.SHARED_MEMORY) if f.startswith(mine)] \
            if os.path.isdir(exchange.SHARED_MEMORY) else []
        assert all(os.path.getsize(os.path.join(exchange.SHARED_MEMORY, f)) == 0 for f in made)
    finally:
        client.run(full, False)
        full(False)
        client.run(cd.clear_cache)
        cd.clear_cache()
    single = dict(uvw=uvw, freq=WIDE_FREQS, wgt=wgt, mask=mask, epsilon=1e-4, do_wgridding=True, **pixels)
    assert relative_error(image, clgrid.vis2dirty(vis=vis, **single, **image_size)) <= 1e-6
    assert relative_error(predicted, clgrid.dirty2vis(dirty=image, **single)) <= 1e-6


def test_large_regions_are_read_through_registered_read_only_views(rng, tmp_path, monkeypatch):
    """`exchange.read` and `exchange.taken`: a region of `REGISTERED_BYTES` or more is
    mapped writable, so that it is registered with the devices, and seen read-only; a
    smaller one is mapped read-only and not registered.  The values are the writer's."""
    from clgrid.device import registered
    from clgrid.dask import exchange

    monkeypatch.setattr(exchange, "REGISTERED_BYTES", 4096)
    exchange.release()
    try:
        for n, large in ((100, False), (5000, True)):
            values = rng.normal(size=n).astype(np.float32)
            shared = exchange.write_into(str(tmp_path / f"v{n}"), 3, values.shape, values.dtype,
                                         lambda out, v=values: out.__setitem__(..., v))
            published = exchange.publish(str(tmp_path / f"calls{n}"), "d", values)
            got = exchange.read(shared)
            with exchange.taken(published) as image:
                for array in (got, image):
                    np.testing.assert_array_equal(array, values)
                    assert not array.flags.writeable
                    with pytest.raises(ValueError):
                        array[0] = 0
                    at = array.__array_interface__["data"][0]
                    assert any(r.start <= at < r.start + r.nbytes for r in registered._regions.values()) == large
    finally:
        exchange.release()


def test_an_image_is_checked_as_it_is_published(rng, tmp_path):
    """`clgrid.dask.exchange.publish` with ``refuse``: the image copied block by block on
    threads (block edges anywhere, C- or Fortran-ordered, float or complex) is the
    caller's, its NaN and inf entries counted exactly over every block, and a file with
    any is left unstamped, its earlier image's readers refusing."""
    from clgrid.dask import exchange

    prefix = str(tmp_path / "calls")                # any file system: the mapping is the same
    for dtype in (np.float32, np.float64, np.complex64):
        image = rng.normal(size=(300, 257)).astype(dtype)
        for order in ("C", "F"):
            published = exchange.publish(prefix, "d", np.asarray(image, order=order), 16, refuse="no")
            with exchange.taken(published) as got:
                assert np.array_equal(got, image)
        flat = rng.normal(size=(exchange.THREADED_BYTES // 4) + 999).astype(dtype)      # (on threads)
        bad = rng.choice(flat.size, 5, replace=False)
        out = np.empty_like(flat)
        flat[bad[:3]] = np.nan
        flat[bad[3:]] = -np.inf if dtype != np.complex64 else complex(1, np.inf)
        for threads, block, n in ((1, 1, 3000), (1, None, flat.size), (3, 1000, flat.size), (16, 4097, flat.size),
                                  (4, 0, flat.size)):
            bad_here = np.count_nonzero(~np.isfinite(flat[:n]))
            assert exchange._copy_counting(out[:n], flat[:n], threads, block) == bad_here
            assert np.array_equal(out[:n], flat[:n], equal_nan=True)
        image.reshape(-1)[[7, -1]] = np.nan
        with pytest.raises(ValueError, match="^a NaN$"):
            exchange.publish(prefix, "d", image, 16, refuse="a NaN")
        with pytest.raises(RuntimeError, match="replaced by a later dirty2vis"):
            with exchange.taken(published):
                pass


def test_a_task_sent_while_the_image_is_copied_waits_for_it(rng, tmp_path):
    """`clgrid.dask.exchange.publishing`: the image's readers are sent before the client
    copies it (the copy overlaps their way to the workers).  A reader that comes during
    the copy (here, during the whole block) waits and reads the new image, never the file's
    earlier one nor a cleared stamp's refusal; a NaN image refused as the block ends, or a
    block that raises, leaves the file unstamped and its waiting readers refuse."""
    import threading

    from clgrid.dask import exchange

    prefix = str(tmp_path / "calls")                # any file system: the mapping and the lock are the same
    shape = (300, 257)
    old, new = (rng.normal(size=shape).astype(np.float32) for _ in range(2))
    exchange.publish(prefix, "d", old)

    def reader(published, out: list) -> None:
        try:
            with exchange.taken(published) as image:
                out.append(image.copy())
        except RuntimeError as error:
            out.append(error)

    try:
        got = []
        with exchange.publishing(prefix, "d", new, 4, refuse="no") as published:
            thread = threading.Thread(target=reader, args=(published, got), daemon=True)
            thread.start()
            thread.join(0.5)
            assert thread.is_alive() and not got    # (waiting for the copy, not refused)
        thread.join(60)
        assert len(got) == 1 and isinstance(got[0], np.ndarray) and np.array_equal(got[0], new)
        bad = new.copy()
        bad[7, 11] = np.nan
        for body_raises in (False, True):
            got = []
            with pytest.raises((ValueError, KeyError), match="a NaN" if not body_raises else "the graph"):
                with exchange.publishing(prefix, "d", new if body_raises else bad, 4, refuse="a NaN") as published:
                    thread = threading.Thread(target=reader, args=(published, got), daemon=True)
                    thread.start()
                    thread.join(0.2)
                    if body_raises:
                        raise KeyError("the graph could not be built")
            thread.join(60)
            assert len(got) == 1 and isinstance(got[0], RuntimeError) and "replaced by a later" in str(got[0])
            with open(exchange.place(prefix, "d"), "rb") as f:
                assert f.read(exchange.STAMP) == bytes(exchange.STAMP)
    finally:
        exchange.release()
        exchange.remove(prefix)


def test_a_graph_submitted_while_the_clients_batching_waits_goes_at_once(client):
    """A distributed client sends its messages in batches, one every 10 ms at most, so a
    call's graph could wait for the interval after the message before it (the previous
    call's futures released).  `clgrid.dask.chunks.started` and `clgrid.dask.watch.compute`
    send theirs at once (`send_now`): here the batching is made to wait an hour, and their
    tasks still run (without it, `started`'s never would, and `compute` would end stalled)."""
    import operator
    import time

    from clgrid.dask import chunks, watch

    comm = client.scheduler_comm
    ready = concurrent.futures.Future()

    def hold() -> None:                       # (on the client's event loop, as the batching runs)
        comm.next_deadline = time.time() + 3600
        ready.set_result(True)

    def release() -> None:
        comm.next_deadline = None
        comm.waker.set()

    client.loop.add_callback(hold)
    assert ready.result(10)
    try:
        (persisted,) = chunks.started([dask.delayed(operator.add)(1, 2)])
        assert distributed.futures_of(persisted)[0].result(timeout=20) == 3
        client.loop.add_callback(hold)
        assert watch.compute(dask.delayed(operator.mul)(2, 3), stall_timeout=10) == (6,)
    finally:
        client.loop.add_callback(release)


def _recycle_small(small: bool) -> bool:
    """In a worker: every assembled chunk over a recycled buffer (`small`), or as before."""
    from clgrid.dask import recycled

    recycled.RECYCLED_BYTES = 1 if small else 4 << 20
    recycled.forget_recycled()
    return small


def test_recycled_predictions_held_by_the_caller_are_never_written_again(client, rng):
    """A reused dirty2vis assembles each chunk over a buffer that an earlier call's chunk,
    dropped, gave back (`clgrid.dask.recycled`): a result the caller still holds keeps its
    values through later calls on other images, the buffers come back once results are
    dropped and later calls take them, and a chunk over a recycled buffer has the bits of
    one over a fresh one."""
    from clgrid.dask import recycled

    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single", masked=0.1)
    points = dict(uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt), mask=blocks(mask), epsilon=1e-4,
                  do_wgridding=True, split="planes", pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"])
    first, second = (rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32) for _ in range(2))
    client.run(_recycle_small, True)
    try:
        held = cd.dirty2vis(dirty=first, **points).persist()
        distributed.wait(held)
        expected = held.compute()
        fresh = cd.dirty2vis(dirty=second, **points).compute()
        for _ in range(3):
            later = cd.dirty2vis(dirty=second, **points).persist()
            distributed.wait(later)
            np.testing.assert_array_equal(later.compute().view(np.uint64), fresh.view(np.uint64))
            del later
            np.testing.assert_array_equal(held.compute().view(np.uint64), expected.view(np.uint64))
        counts = client.run(recycled.recycled_counts)
        assert sum(c["reused"] for c in counts.values()) > 0, counts
    finally:
        client.run(_recycle_small, False)


def test_stamped_shares_are_read_back_and_refused_once_another_call_wrote_them(rng, tmp_path):
    """`clgrid.dask.exchange`: a slab's prediction written once for its chunks behind a
    stamp of its write reads back exactly, piece by piece; while another write of the
    file is under way, once it is done, and once the file is removed, the first write's
    readers refuse, each saying which (none says the image was replaced: a reader of a
    slab's file cannot know that)."""
    import threading

    from clgrid.dask import exchange

    predicted = (rng.normal(size=1000) + 1j * rng.normal(size=1000)).astype(np.complex64)
    pieces = tuple(np.split(predicted, [300, 650]))
    path = str(tmp_path / "shares")                 # any file system: the mapping is the same
    lengths = [len(p) for p in pieces]

    def share(values):
        with exchange.stamped_room(path, values.size, values.dtype) as room:
            room[:] = values
            return exchange.stamped_shares(path, lengths, values.dtype)

    first = share(predicted)
    assert all(isinstance(p, exchange.Shared) for p in first)
    with exchange.reading(list(first) + [None]) as arrays:
        assert all(np.array_equal(a, p) for a, p in zip(arrays, pieces)) and arrays[-1] is None
    with exchange.stamped_room(path, predicted.size, predicted.dtype) as room:     # another write: refused
        with pytest.raises(RuntimeError, match=r"being written again \(or left unfinished"):
            with exchange.reading(list(first)):
                pass
        entered = threading.Event()

        def third():                                # waits for the file: it is this write's
            with exchange.stamped_room(path, predicted.size, predicted.dtype) as its_room:
                entered.set()
                its_room[:] = 3 * predicted
                return exchange.stamped_shares(path, lengths, predicted.dtype)

        waiting = threading.Thread(target=third, daemon=True)
        waiting.start()
        assert not entered.wait(0.3)                # (a wrong pass at worst, where it is slow to start)
        room[:] = 2 * predicted
        second = exchange.stamped_shares(path, lengths, predicted.dtype)
    waiting.join(60)
    assert entered.is_set()
    assert second[0].stamp != first[0].stamp
    for earlier in (first, second):
        with pytest.raises(RuntimeError, match="written again by another dirty2vis call on the same points, or "
                                               "by this one computed again"):
            with exchange.reading(list(earlier)):
                pass
    os.unlink(f"{path}-stamp")
    with pytest.raises(RuntimeError, match=r"removed \(clear_cache"):
        with exchange.reading(list(first)):
            pass
    exchange.release()


def _slab_case(rng, tmp_path, device_name):
    """One slab task's inputs for `clgrid.dask.tasks.vis_slab` over random points (one
    slab of every plane, single precision, operators not kept): (points, geometry, slab,
    options, the call's prefix, the slab's file, its number of samples)."""
    from clgrid.dask import exchange, slabs as dask_slabs, tasks
    from clgrid.dask.wgridding import _options

    nrow, freq = int(rng.integers(150, 300)), np.array([1.0e8, 1.2e8])
    uvw = rng.uniform(-1, 1, (nrow, 3)) * np.array([2500.0, 2500.0, 300.0])
    options = _options(32, 32, 2e-3, 2e-3, 1e-5, True, False, False, False, True, 0.0, 0.0, 1.1, 2.6, "single",
                       device_name, 1, 0, None, False)
    g = dask_slabs.geometry_of([dask_slabs.extent(uvw, freq, None)], options)
    bounds = [(0, g.num_planes)]
    points = tasks.SlabPoints(dask_slabs.parts_at(uvw, freq, dask_slabs.selection(uvw, freq, None, g, bounds)))
    prefix = str(tmp_path / "x")
    return points, g, dask_slabs.Slab(0, bounds[0], (0, 1)), options, prefix, exchange.place(prefix, "s0"), \
        nrow * freq.size


def test_a_slab_prediction_is_stamped_before_its_image_is_checked_again(rng, tmp_path, monkeypatch, device_name):
    """`clgrid.dask.tasks.vis_slab` writes its prediction into the slab's file and stamps
    it.  Another call (a later image published, its slab task writing the same file) that
    gets in between the image's last check and the stamp must not leave this call's stamp
    over the other call's values: the stamp goes on before the image is checked again
    (and the other task waits for the file until this one has stamped it), so this call
    is refused there, or its readers are, never fed the other's values.  The other call
    is simulated where the stamp goes on (its task on a thread: it waits for the file)."""
    import threading

    from clgrid.dask import exchange, tasks

    points, g, slab, options, prefix, place, total = _slab_case(rng, tmp_path, device_name)
    mine, theirs = (rng.normal(size=(32, 32)).astype(np.float32) for _ in range(2))
    expected = tasks.vis_slab(mine, points, g, slab, options, 0)[0].copy()
    real, other, writing, read = exchange.stamped_shares, [], threading.Event(), threading.Event()

    def other_slab_task():
        with exchange.stamped_room(place, total, np.complex64) as room:
            room[: total // 2] = 7 + 7j
            writing.set()
            assert read.wait(60)

    def another_call_gets_in(*args, **kwargs):          # published, its slab task at this file
        if not other:
            other.append(exchange.publish(prefix, "d", theirs))
            other.append(threading.Thread(target=other_slab_task, daemon=True))
            other[-1].start()
        return real(*args, **kwargs)

    monkeypatch.setattr(exchange, "stamped_shares", another_call_gets_in)
    try:
        try:
            shares = tasks.vis_slab(exchange.publish(prefix, "d", mine), points, g, slab, options, 0, place)
        except RuntimeError as error:                   # refused where the image is checked again
            assert "replaced by a later dirty2vis" in str(error)
            return
        assert other and writing.wait(60)
        try:
            with exchange.reading(list(shares)) as arrays:
                got = np.concatenate(arrays)
        except RuntimeError as error:                   # or by its readers
            assert "being written again" in str(error)
            return
        assert np.array_equal(got, expected), "the other call's values were read under this call's stamp"
    finally:
        read.set()
        if other:
            other[-1].join(60)
        exchange.release()


def test_readers_of_a_slab_whose_new_prediction_failed_are_told_so(rng, tmp_path, monkeypatch, device_name):
    """The slab task computed again (the same call: the same image) clears the file's
    stamp, and its prediction fails: the first write's readers refuse, saying the file is
    being written again or was left unfinished by a prediction that failed, not that a
    later call replaced the image (nothing did)."""
    from clgrid.dask import exchange, tasks
    from clgrid.imaging.wgridding import WGridder

    points, g, slab, options, prefix, place, _ = _slab_case(rng, tmp_path, device_name)
    image = exchange.publish(prefix, "d", rng.normal(size=(32, 32)).astype(np.float32))
    try:
        shares = tasks.vis_slab(image, points, g, slab, options, 0, place)
        with exchange.reading(list(shares)) as arrays:
            assert np.all(np.isfinite(np.concatenate(arrays)))

        def failing(self, *args, **kwargs):
            raise MemoryError("the device ran out")

        monkeypatch.setattr(WGridder, "dirty2vis", failing)
        with pytest.raises(MemoryError, match="the device ran out"):
            tasks.vis_slab(image, points, g, slab, options, 0, place)
        with pytest.raises(RuntimeError) as refused:
            with exchange.reading(list(shares)):
                pass
        assert "left unfinished by a prediction that failed" in str(refused.value)
        assert "replaced" not in str(refused.value)
    finally:
        exchange.release()


def test_a_prediction_that_read_a_later_nan_image_says_its_image_was_replaced(rng, tmp_path, monkeypatch,
                                                                            device_name):
    """A prediction's task checks its image's stamp, then its engine reads the image; a
    later dirty2vis on the same points that publishes a NaN image in between (refused,
    the file left unstamped) makes the engine fail on the NaN.  The task must refuse as
    it would had the engine not failed (the image replaced by a later call, the engine's
    error in a note), not say that its own image has NaN: it never had.  Forced: the later
    image is published as the engine is entered, with and without the slab's file.  (Before,
    the engine's "dirty has NaN" came out: `test_a_nan_image_is_refused_...`, 1 run in 8.)
    An engine that fails with the image unchanged raises its own error
    (`test_readers_of_a_slab_whose_new_prediction_failed_are_told_so`)."""
    from clgrid.dask import exchange, tasks
    from clgrid.dask.wgridding import NOT_FINITE_IMAGE
    from clgrid.imaging.wgridding import WGridder

    points, g, slab, options, prefix, place, _ = _slab_case(rng, tmp_path, device_name)
    model = rng.normal(size=(32, 32)).astype(np.float32)
    later = model.copy()
    later[tuple(rng.integers(0, 32, 2))] = np.nan
    real, entered = WGridder.dirty2vis, []

    def later_call_publishes_first(self, dirty, wgt=None, out=None):
        entered.append(True)
        with pytest.raises(ValueError, match=NOT_FINITE_IMAGE):
            exchange.publish(prefix, "d", later, refuse=NOT_FINITE_IMAGE)
        return real(self, dirty, wgt, out=out)

    monkeypatch.setattr(WGridder, "dirty2vis", later_call_publishes_first)
    try:
        for where in (place, None):               # written into the slab's file, or returned
            image = exchange.publish(prefix, "d", model, refuse=NOT_FINITE_IMAGE)
            with pytest.raises(RuntimeError, match="replaced by a later dirty2vis") as refused:
                tasks.vis_slab(image, points, g, slab, options, 0, where)
            assert entered.pop()                  # (refused after the engine read, not before)
            assert isinstance(refused.value.__cause__, ValueError)
            assert f"clgrid.dask: reading it failed first: ValueError: {NOT_FINITE_IMAGE}" in refused.value.__notes__
    finally:
        exchange.release()


def test_a_reader_of_shares_whose_block_fails_says_why_where_they_were_written_again(rng, tmp_path):
    """`clgrid.dask.exchange.reading`: a block that fails while another write of a slab's
    file is under way (or done) refuses as it would have once the block ended, its own
    error in a note; a block that fails with the stamps unchanged raises its own error."""
    from clgrid.dask import exchange

    predicted = (rng.normal(size=500) + 1j * rng.normal(size=500)).astype(np.complex64)
    path = str(tmp_path / "shares")

    def share(values):
        with exchange.stamped_room(path, values.size, values.dtype) as room:
            room[:] = values
            return exchange.stamped_shares(path, [200, 300], values.dtype)

    first = share(predicted)
    try:
        with pytest.raises(KeyError, match="its own"), exchange.reading(list(first)):
            raise KeyError("its own")
        with pytest.raises(RuntimeError, match="being written again") as refused:
            with exchange.reading(list(first)), exchange.stamped_room(path, predicted.size, predicted.dtype):
                raise KeyError("read while written")
        assert refused.value.__notes__ == ["clgrid.dask: reading it failed first: KeyError: 'read while written'"]
        first = share(predicted)
        with pytest.raises(RuntimeError, match="written again by another dirty2vis") as refused:
            with exchange.reading(list(first)):
                share(2 * predicted)
                raise KeyError("read after it was written")
        assert isinstance(refused.value.__cause__, KeyError)
    finally:
        exchange.release()


def test_one_slab_prediction_computed_twice_at_once_is_never_read_mixed(rng, tmp_path, monkeypatch, device_name):
    """The same slab task run twice at once (the same call's image: a lazy result computed
    from two threads, a task run again on another worker), the second write's values other
    bits than the first's (as atomics give): the first write's readers get the first
    write whole, or refuse; never part of each.  Forced: the second writes half the file
    once the first has predicted and before it stamps (the first waits up to a second for
    that), and the first's chunks read while the second still writes.  (Before, both
    stamped the image's stamp and the second wrote beside the first: its half was read
    under the first's stamp.)"""
    import threading

    from clgrid.dask import exchange, tasks
    from clgrid.imaging.wgridding import WGridder

    points, g, slab, options, prefix, place, total = _slab_case(rng, tmp_path, device_name)
    model = rng.normal(size=(32, 32)).astype(np.float32)
    expected = tasks.vis_slab(model, points, g, slab, options, 0)[0].copy()
    image = exchange.publish(prefix, "d", model)
    first_in, predicted, second_wrote, first_read = (threading.Event() for _ in range(4))
    real = WGridder.dirty2vis

    def paced(self, dirty, wgt=None, out=None):
        if threading.current_thread().name == "first":
            first_in.set()                          # (its file's room taken: the second is started now)
            result = real(self, dirty, wgt, out=out)
            predicted.set()
            second_wrote.wait(1.0)                  # (the second cannot get in where the file is locked)
            return result
        assert predicted.wait(60)
        out[: total // 2] = 7 + 7j                  # other bits than the first's
        second_wrote.set()
        assert first_read.wait(60)
        return real(self, dirty, wgt, out=out)

    monkeypatch.setattr(WGridder, "dirty2vis", paced)
    results, second = {}, threading.Thread(
        name="second", daemon=True,
        target=lambda: results.setdefault("second", tasks.vis_slab(image, points, g, slab, options, 0, place)))
    first = threading.Thread(
        name="first", daemon=True,
        target=lambda: results.setdefault("first", tasks.vis_slab(image, points, g, slab, options, 0, place)))
    try:
        first.start()
        assert first_in.wait(60)
        second.start()
        first.join(60)
        assert "first" in results
        try:
            with exchange.reading(list(results["first"])) as arrays:
                got = np.concatenate(arrays)
        except RuntimeError as error:
            assert "written again" in str(error)
        else:
            assert np.array_equal(got, expected), "read mixed from two writes of the slab's file"
    finally:
        first_read.set()
        second.join(60)
        exchange.release()
    assert "second" in results


@pytest.mark.slow
def test_fixed_slabs_give_the_same_bits_on_any_number_of_workers(client, rng, monkeypatch, device_name):
    """deterministic=True with ``slabs`` given: the image and visibilities on the 2-worker
    cluster (2 facets) and on this process's synchronous scheduler (1 facet) are the same
    bits: the slab tasks and the order of every sum are fixed by chunks and slabs alone.
    The operators on each worker drive two queues there (``device`` a list)."""
    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single", masked=0.1)
    common = dict(uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt), mask=blocks(mask), epsilon=1e-4,
                  do_wgridding=True, slabs=3, deterministic=True, keep_operators=0,
                  device=[device_name, device_name], pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"])
    size = dict(npix_x=IMAGE["npix_x"], npix_y=IMAGE["npix_y"])
    on_cluster = cd.vis2dirty(vis=blocks(vis), **common, **size)
    dirty = rng.normal(size=on_cluster.shape).astype(np.float32)
    predicted = cd.dirty2vis(dirty=dirty, **common).compute()
    with monkeypatch.context() as m, dask.config.set(scheduler="sync"):
        m.setattr(clgrid.dask.chunks, "client", lambda: None)
        local = cd.vis2dirty(vis=blocks(vis), **common, **size)
        local_vis = cd.dirty2vis(dirty=dirty, **common).compute()
    assert np.array_equal(on_cluster.view(np.uint32), local.view(np.uint32))
    assert np.array_equal(predicted.view(np.uint64), local_vis.view(np.uint64))
    single = clgrid.vis2dirty(vis=vis, uvw=uvw, freq=WIDE_FREQS, wgt=wgt, mask=mask, epsilon=1e-4,
                              do_wgridding=True, device=device_name, **IMAGE)
    # a sanity check (the bits above are the test): three slabs' float32 images summed
    # against one operator's, itself summed in an order of its own (not deterministic):
    # 5-8e-7 over seeds here, 1.07e-6 seen once in CI (seed 3646547600)
    assert relative_error(on_cluster, single) <= 2e-6


@pytest.mark.slow
def test_planes_split_with_points_on_slab_edges_and_slabs_without_points(client, rng, device_name):
    """The planes split (double, epsilon 1e-9) on data made to stress it: |w| in two bands
    with empty planes between, rows sorted by |w| so that chunks hold one band each (a
    chunk gives nothing to most slabs), points exactly on every plane's edge (channel 0 at
    c: there metres are wavelengths), more slabs than planes (the last ones empty).  The
    image and visibilities equal `clgrid.vis2dirty` / `dirty2vis` to rounding and ducc0 at
    1e-12 to epsilon; with ``deterministic``, fresh operators give the same bits."""
    wgridder = optional("ducc0.wgridder", "test")
    from clgrid.dask import slabs as dask_slabs

    freq = np.array([1.0, 1.15, 1.3]) * SPEED_OF_LIGHT
    nrow = 1200
    uvw = rng.uniform(-1, 1, (nrow, 3)) * np.array([2500.0, 2500.0, 1.0])
    uvw[:, 2] = np.where(rng.random(nrow) < 0.5, rng.uniform(0, 80, nrow), rng.uniform(450, 600, nrow))
    uvw[:, 2] *= rng.choice([-1.0, 1.0], nrow)
    uvw[:2, 2] = [0.0, 600.0]                                     # the extremes, kept below
    options = dict(epsilon=1e-9, do_wgridding=True, **IMAGE)
    geometry = dask_slabs.geometry_of([dask_slabs.extent(uvw, freq, None)], dict(
        options, flip_u=False, flip_v=False, center_x=0.0, center_y=0.0, sigma_min=1.1, sigma_max=2.6,
        precision="double"))
    g, half = geometry, geometry.kernel.support / 2.0
    edges = g.w_start + (np.arange(g.num_planes) + half) * g.dw     # where a first plane begins, at channel 0
    edges = edges[(edges > 0) & (edges * 1.3 < 600.0)]
    rows = 2 + rng.choice(nrow - 2, 300, replace=False)
    uvw[rows, 2] = rng.choice(np.concatenate([edges, np.nextafter(edges, 0)]), rows.size)
    uvw = uvw[np.argsort(np.abs(uvw[:, 2]), kind="stable")]
    assert dask_slabs.geometry_of([dask_slabs.extent(uvw, freq, None)], dict(
        options, flip_u=False, flip_v=False, center_x=0.0, center_y=0.0, sigma_min=1.1, sigma_max=2.6,
        precision="double")) == geometry
    vis = rng.normal(size=(nrow, freq.size)) + 1j * rng.normal(size=(nrow, freq.size))
    wgt = rng.uniform(0.2, 1.0, vis.shape)
    common = dict(uvw=uvw, freq=freq, wgt=wgt, **options)
    single = clgrid.vis2dirty(vis=vis, device=device_name, **common)
    oracle = wgridder.vis2dirty(vis=vis, **dict(common, epsilon=1e-12))
    split = dict(split="planes", slabs=geometry.num_planes + 3, deterministic=True, keep_operators=0)
    images = [cd.vis2dirty(vis=da.from_array(vis, chunks=(250, 2)), **common, **split) for _ in range(2)]
    assert np.array_equal(images[0].view(np.uint64), images[1].view(np.uint64))
    assert relative_error(images[0], single) <= 1e-12
    assert relative_error(images[0], oracle) <= 1e-9

    dirty = rng.normal(size=single.shape)
    shape = {k: v for k, v in common.items() if k not in ("npix_x", "npix_y")}
    predicted = cd.dirty2vis(dirty=dirty, **dict(shape, uvw=da.from_array(uvw, chunks=(250, 3))), **split)
    assert predicted.chunks == ((250,) * 4 + (200,), (3,))
    predicted = predicted.compute()
    assert relative_error(predicted, clgrid.dirty2vis(dirty=dirty, device=device_name, **shape)) <= 1e-12
    assert relative_error(predicted, wgridder.dirty2vis(dirty=dirty, **dict(shape, epsilon=1e-12))) <= 1e-9


def test_a_slab_with_most_of_a_chunk_takes_it_whole_and_its_operator_drops_the_rest(client, rng, device_name):
    """Samples crowd at small |w|, unmasked, weighted: a slab that holds most but not all
    of a chunk's samples takes the chunk whole (`clgrid.dask.slabs.takes_whole`: values
    copied, not picked; its operator drops the samples without a tap on its planes), one
    with fewer picks them (on this small image the slabs balance per-sample work, so the
    high slab may hold most samples too).  Both directions, kept operators reused, equal
    `clgrid.vis2dirty` / `dirty2vis` to rounding and ducc0 at 1e-12 to epsilon."""
    wgridder = optional("ducc0.wgridder", "test")
    from clgrid.dask import planes_split, slabs as dask_slabs

    nrow = 1500
    uvw, freq, vis, wgt, _ = wide_field(rng, nrow, (1.0e8, 1.1e8, 1.3e8), w=2400.0)
    uvw[:, 2] *= rng.random(nrow) ** 3                  # crowded at small |w|
    common = dict(uvw=uvw, freq=freq, wgt=wgt, epsilon=1e-9, do_wgridding=True, **IMAGE)
    shape = {k: v for k, v in common.items() if k not in ("npix_x", "npix_y")}
    split = dict(split="planes", slabs=2)
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    for _ in range(2):                                  # made, then reused
        image = cd.vis2dirty(vis=da.from_array(vis, chunks=(500, 3)), **common, **split)
        predicted = cd.dirty2vis(dirty=dirty, **dict(shape, uvw=da.from_array(uvw, chunks=(500, 3))), **split)
        predicted = predicted.compute()
        assert relative_error(image, clgrid.vis2dirty(vis=vis, device=device_name, **common)) <= 1e-12
        assert relative_error(image, wgridder.vis2dirty(vis=vis, **dict(common, epsilon=1e-12))) <= 1e-9
        assert relative_error(predicted, clgrid.dirty2vis(dirty=dirty, device=device_name, **shape)) <= 1e-12
        assert relative_error(predicted, wgridder.dirty2vis(dirty=dirty, **dict(shape, epsilon=1e-12))) <= 1e-9
    layout = next(reversed(planes_split._layouts.values()))
    g, bounds, total, partly = layout.geometry, layout.bounds, 500 * freq.size, 0
    for i, rows in enumerate(np.split(np.arange(nrow), 3)):
        exact = dask_slabs.slab_sizes(dask_slabs.plane_counts(uvw[rows], freq, None, g), g, bounds)
        assert layout.sizes[i] == [total if n >= total / 2 else n for n in exact]
        partly += sum(total / 2 <= n < total for n in exact)            # whole, though not every sample taps
    assert partly


@pytest.mark.slow
def test_planes_split_capped_images_each_slab_in_groups_of_chunks(monkeypatch, rng, device_name):
    """slab_samples below a slab's samples: each slab's chunks go to several imaging
    tasks (in groups of whole chunks), none taking more than the cap unless one chunk
    gives it more; the image and visibilities equal the uncapped split's and
    `clgrid.vis2dirty` / `dirty2vis` to rounding (double), with ``deterministic`` the
    same bits from run to run.  Dask's synchronous scheduler in this process, so that
    each task's samples can be counted."""
    from clgrid.dask import tasks as dask_tasks

    monkeypatch.setattr(clgrid.dask.chunks, "client", lambda: None)
    cap = 1200                # a chunk gives a slab up to 800 samples (90% kept; fewer at the edges)
    seen = []                                 # (slab, chunks, samples per part) of each task

    def counted(function):
        def task(*args):                      # (points, geometry, slab, ..., place, chunks, *values) or (image, ...)
            slab = args[2] if function.__name__ == "image_slab" else args[3]
            sizes = [len(v) for v in args[8:]] if function.__name__ == "image_slab" else args[1].lengths
            seen.append((slab.index, slab.chunks, sizes))
            return function(*args)
        task.__name__ = function.__name__
        return task

    for name in ("image_slab", "vis_slab"):
        monkeypatch.setattr(dask_tasks, name, counted(getattr(dask_tasks, name)))
    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, masked=0.1)
    common = dict(uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt), mask=blocks(mask), epsilon=1e-10,
                  do_wgridding=True, split="planes", slabs=3, keep_operators=0, **IMAGE)
    with dask.config.set(scheduler="sync"):
        whole = cd.vis2dirty(vis=blocks(vis), slab_samples=vis.size, **common)
        assert len(seen) == 3
        seen.clear()
        capped = [cd.vis2dirty(vis=blocks(vis), slab_samples=cap, deterministic=True, **common) for _ in range(2)]
        tasks = sorted(seen[:len(seen) // 2])                               # in the order they ran
        assert sorted(seen[len(seen) // 2:]) == tasks and 3 < len(tasks) < 18
        assert any(len(sizes) > 1 for _, _, sizes in tasks)               # groups of several chunks too
        assert all(sum(sizes) <= cap or np.count_nonzero(sizes) == 1 for _, _, sizes in tasks)
        for s in range(3):                                                  # each slab's chunks, once each
            assert [c for slab, chunks, _ in tasks if slab == s for c in range(*chunks)] == list(range(6))
        dirty = rng.normal(size=whole.shape)
        shape = {k: v for k, v in common.items() if k not in ("npix_x", "npix_y", "wgt", "mask")}
        seen.clear()
        predicted = cd.dirty2vis(dirty=dirty, wgt=blocks(wgt), mask=blocks(mask), slab_samples=cap,
                                 **shape).compute()
        assert sorted(seen) == tasks
    assert np.array_equal(capped[0].view(np.uint64), capped[1].view(np.uint64))
    single = clgrid.vis2dirty(vis=vis, uvw=uvw, freq=WIDE_FREQS, wgt=wgt, mask=mask, epsilon=1e-10,
                              do_wgridding=True, device=device_name, **IMAGE)
    assert relative_error(capped[0], whole) <= 1e-12 and relative_error(capped[0], single) <= 1e-12
    expected = clgrid.dirty2vis(dirty=dirty, uvw=uvw, freq=WIDE_FREQS, wgt=wgt, mask=mask, epsilon=1e-10,
                                do_wgridding=True, pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"],
                                device=device_name)
    assert relative_error(predicted, expected) <= 1e-12 and not np.any(predicted[mask == 0])


@pytest.mark.parametrize("do_wgridding", [False, True])         # chunks of rows; slabs of planes
@pytest.mark.parametrize("weighted", [True, False])
def test_vis2dirty_failing_chunk_raises_in_the_caller(client, rng, do_wgridding, weighted):
    """An unmasked NaN: the call raises (not hangs), naming the chunk that holds it: with
    weights refused as the chunk's values are weighted; without, counted by the slab's
    operator on its device and then looked for in each chunk's values (planes split)."""
    uvw, _, vis, wgt, _ = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single")
    vis[ROW_CHUNK + 7, 3] = np.nan              # unmasked NaN in row block 1, channel block 1: chunk 3
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        call = pool.submit(cd.vis2dirty, uvw=uvw, freq=WIDE_FREQS, vis=blocks(vis), wgt=wgt if weighted else None,
                           epsilon=1e-4, do_wgridding=do_wgridding, **IMAGE)
        with pytest.raises(ValueError, match=r"vis has NaN or infinite entries where not masked \(1\)") as caught:
            call.result(timeout=120)                              # raises, not hangs
    note = "".join(getattr(caught.value, "__notes__", []))
    assert f"chunk 3, rows {ROW_CHUNK}:{2 * ROW_CHUNK}, channels 2:4" in note


def test_vis2dirty_arguments_are_refused_by_name(rng):
    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single", masked=0.1)
    common = dict(uvw=uvw, freq=WIDE_FREQS, epsilon=1e-4, **IMAGE)
    with pytest.raises(TypeError, match="unexpected keyword argument.*nthread"):
        cd.vis2dirty(vis=vis, nthread=2, **common)
    with pytest.raises(ValueError, match=r"vis must have shape \(nrow, nchan\)"):
        cd.vis2dirty(vis=blocks(vis[:, :3]), **common)
    with pytest.raises(TypeError, match="wgt must be a float array"):
        cd.vis2dirty(vis=vis, wgt=mask, **common)
    with pytest.raises(TypeError, match="vis must be complex64 or complex128"):
        cd.vis2dirty(vis=vis.real, **common)
    with pytest.raises(ValueError, match="row_chunks=7.5"):
        cd.vis2dirty(vis=vis, row_chunks=7.5, **common)
    with pytest.raises(ValueError, match="split must be one of 'auto', 'planes', 'rows', got 'w'"):
        cd.vis2dirty(vis=vis, split="w", **common)
    with pytest.raises(ValueError, match="split='planes' needs do_wgridding=True"):
        cd.vis2dirty(vis=vis, split="planes", **common)
    with pytest.raises(ValueError, match="slabs must be a positive integer"):
        cd.vis2dirty(vis=vis, slabs=0, do_wgridding=True, **common)
    for bad in (0, 2.5, True, "9"):
        with pytest.raises(ValueError, match=f"slab_samples must be a positive integer or None.*got {bad!r}"):
            cd.vis2dirty(vis=vis, slab_samples=bad, do_wgridding=True, **common)
    geometry = {k: v for k, v in common.items() if k not in ("npix_x", "npix_y")}
    with pytest.raises(ValueError, match="dirty must be 2-D"):
        cd.dirty2vis(dirty=np.zeros((2, 64, 48), np.float32), **geometry)
    with pytest.raises(TypeError, match="device must be None, a device name"):
        cd.dirty2vis(dirty=np.zeros((64, 48), np.float32), device=object(), **geometry)


@pytest.mark.slow
def test_measurement_set_read_by_dask_ms_is_imaged_over_the_cluster(client, rng, tmp_path, device_name):
    """examples/dask_ms_imaging.py: a simulated MS (python-casacore) with random weights, read
    lazily by dask-ms in rows and channels (flags and weights too: nothing computed on the
    client), imaged over the workers; its 1 Jy source lands on its pixel at 1 Jy/beam, and
    the image is `clgrid.vis2dirty`'s of the same MS read with python-casacore here (the
    weights the smaller of XX's and YY's WEIGHT, flagged samples out)."""
    optional("daskms", "test")
    optional("casacore.tables", "test")
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "dask_ms_imaging.py")
    spec = importlib.util.spec_from_file_location("dask_ms_imaging", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    pixsize, npix = np.deg2rad(1.5 / 3600.0), 128
    offset = rng.integers(-50, 51, 2)                      # pixels east and north of the centre
    ms = str(tmp_path / "sim.ms")
    truth = example.write_ms(ms, source=tuple(offset * pixsize), ntime=20, nchan=4, weights="random",
                             seed=int(rng.integers(1 << 30)))
    observation = example.read_ms(ms, rows=15_000, channels=2)
    for name in ("uvw", "vis", "wgt", "mask"):
        assert isinstance(observation[name], da.Array), name
    assert observation["vis"].numblocks == (3, 2) and observation["wgt"].numblocks == (3, 2)
    dirty = example.image(observation, npix, pixsize)
    peak = np.unravel_index(np.argmax(dirty), dirty.shape)
    assert peak == tuple(npix // 2 + offset), (peak, offset)
    assert abs(dirty[peak] - 1.0) <= 1e-3

    from casacore.tables import table
    with table(ms, ack=False) as t:
        uvw, data, flag, weight = (t.getcol(c) for c in ("UVW", "DATA", "FLAG", "WEIGHT"))
    assert np.ptp(weight) > 1.0                               # the weights are not all alike
    wgt = np.repeat(np.minimum(weight[:, 0], weight[:, 3])[:, None], data.shape[1], axis=1)
    wgt[flag[..., 0] | flag[..., 3]] = 0
    expected = clgrid.vis2dirty(uvw=uvw, freq=truth["freq"], vis=(data[..., 0] + data[..., 3]) / 2,
                                wgt=wgt.astype(np.float32), npix_x=npix, npix_y=npix, pixsize_x=pixsize,
                                pixsize_y=pixsize, epsilon=1e-4, do_wgridding=True, flip_u=True, flip_v=True,
                                device=device_name) / wgt.sum(dtype=np.float64)
    assert relative_error(dirty, expected) <= 1e-4

    # --weight briggs 0: imaging weights made on the workers, as the library's WeightGrid
    from clgrid.imager.weighting import WeightGrid
    briggs = example.image(observation, npix, pixsize, weight="briggs", robust=0.0)
    assert np.unravel_index(np.argmax(briggs), briggs.shape) == peak and abs(briggs[peak] - 1.0) <= 1e-3
    grid = WeightGrid("briggs", npix, npix, pixsize, pixsize, robust=0.0)
    wgt = wgt.astype(np.float32)
    grid.add(uvw, truth["freq"], wgt)
    grid.finish()
    grid.apply(uvw, truth["freq"], wgt)
    expected = clgrid.vis2dirty(uvw=uvw, freq=truth["freq"], vis=(data[..., 0] + data[..., 3]) / 2, wgt=wgt,
                                npix_x=npix, npix_y=npix, pixsize_x=pixsize, pixsize_y=pixsize, epsilon=1e-4,
                                do_wgridding=True, flip_u=True, flip_v=True,
                                device=device_name) / wgt.sum(dtype=np.float64)
    assert relative_error(briggs, expected) <= 1e-4 and relative_error(briggs, dirty) > 1e-2


@pytest.mark.parametrize("mode, robust", [("natural", 0.0), ("uniform", 0.0), ("briggs", 0.0)])
def test_imaging_weights_on_the_cluster_image_as_the_library_weights(client, rng, device_name, mode, robust):
    """`clgrid.dask.imaging_weights` on the 2 workers (MeerKAT tracks, rows and channels
    chunked) equal `WeightGrid` on the whole data to float64 rounding of the cell sums (the
    float32 weights: to their last bit), and `clgrid.dask.vis2dirty` with them images as
    `clgrid.vis2dirty` with the library's weights, within epsilon."""
    from test_dask_weighting import GRID, library, tracks

    uvw, freqs, weights, mask = tracks(rng, ntime=6, nchan=4, dtype=np.float32)
    expected = library(uvw, freqs, weights, mask, mode, robust=robust)
    chunks = (5000, 2)                     # 3 x 2 chunks, the last row block short
    wgt = cd.imaging_weights(da.from_array(uvw, chunks=(chunks[0], 3)), freqs, da.from_array(weights, chunks=chunks),
                             da.from_array(mask, chunks=chunks), mode=mode, robust=robust, **GRID)
    np.testing.assert_allclose(wgt.compute(), expected, rtol=2.4e-7, atol=0)
    vis = (rng.normal(size=weights.shape) + 1j * rng.normal(size=weights.shape)).astype(np.complex64)
    image = dict(GRID, epsilon=1e-4, do_wgridding=True, flip_v=True)
    used = (expected != 0).astype(np.uint8)         # beyond the weight grid: out of the image too
    dirty = cd.vis2dirty(uvw=da.from_array(uvw, chunks=(chunks[0], 3)), freq=freqs,
                         vis=da.from_array(vis, chunks=chunks), wgt=wgt, mask=da.from_array(used, chunks=chunks),
                         device=None, **image)
    reference = clgrid.vis2dirty(uvw=uvw, freq=freqs, vis=vis, wgt=expected, mask=used, device=device_name, **image)
    assert relative_error(dirty, reference) <= 1e-5


def _transfer_logs(dask_worker):
    """A worker's logs of what it received from other workers and sent to anyone."""
    return {"in": list(dask_worker.transfer_incoming_log), "out": list(dask_worker.transfer_outgoing_log)}


def test_a_reused_call_on_two_workers_moves_only_small_objects_through_dask(client, rng):
    """Issue 28: a reused vis2dirty / dirty2vis with the planes split on 2 workers passes
    its values, facets and image through the kept files in /dev/shm and keeps each
    worker's own facet where it is summed: what crosses Dask's sockets, between workers
    and to the client, is a few hundred bytes per task (`Shared`, warnings, counts).  The
    bound (16 KiB a call) is far below one facet (128 KiB here) or one chunk's values
    (320 KiB); before the fix each imaging task's whole result, its own facet with it,
    went to the other worker."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm: values and facets go through Dask by design")
    rows = 20_000
    uvw, freq, vis, _, _ = wide_field(rng, rows, WIDE_FREQS, precision="single", weights=None)
    duvw = client.persist(da.from_array(uvw, chunks=(rows // 2, 3)))
    dvis = client.persist(da.from_array(vis, chunks=(rows // 2, freq.size)))
    distributed.wait([duvw, dvis])
    common = dict(uvw=duvw, freq=freq, pixsize_x=5e-3, pixsize_y=5e-3, epsilon=1e-4, do_wgridding=True,
                  split="planes", slab_samples=vis.size)
    first = cd.vis2dirty(vis=dvis, npix_x=256, npix_y=256, **common)          # points selected and kept
    model = first / np.abs(first).max()
    distributed.wait(cd.dirty2vis(dirty=model, **common).persist())
    workers = set(client.nthreads())
    for what in ("vis2dirty", "dirty2vis"):
        before = {w: {k: len(v) for k, v in logs.items()} for w, logs in client.run(_transfer_logs).items()}
        if what == "vis2dirty":
            image = cd.vis2dirty(vis=dvis, npix_x=256, npix_y=256, **common)
        else:
            predicted = cd.dirty2vis(dirty=model, **common).persist()
            distributed.wait(predicted)
        moved = {"between workers": 0, "to the client": 0}
        seen = []
        for w, logs in client.run(_transfer_logs).items():
            for entry in logs["in"][before[w]["in"]:]:
                moved["between workers"] += entry["total"]
                seen.append((w, "from", entry["who"], entry["keys"]))
            for entry in logs["out"][before[w]["out"]:]:
                if entry["who"] not in workers:
                    moved["to the client"] += entry["total"]
                    seen.append((w, "to", entry["who"], entry["keys"]))
        assert moved["between workers"] <= 16 << 10 and moved["to the client"] <= 16 << 10, (what, moved, seen)
    assert relative_error(image, first) <= 1e-6
    del predicted


class _Talking:
    """An operator for `clgrid.dask.tasks._imaged` that says a warning of its own through
    `clgrid.call_warnings.warn`, as clgrid's operators say theirs, at a moment the test
    chooses (once ``start`` is set; ``calling`` set as it begins), and images ones."""

    def __init__(self, name, calling, start):
        self.name, self.calling, self.start = name, calling, start

    def vis2dirty(self, vis, wgt):
        from clgrid.call_warnings import warn

        self.calling.set()
        assert self.start.wait(60)
        warn(f"operator {self.name} warns", RuntimeWarning)
        return np.ones((4, 4), np.float32)


def test_two_imaging_tasks_on_one_worker_keep_their_own_warnings():
    """Two imaging tasks at once on two threads of one worker (`_imaged`, each with its
    operator and lock), in the interleaving that broke the recording through
    `warnings.catch_warnings` (process-wide state): A's call starts, B's starts, A's
    operator warns and A's task returns, then B's operator warns.  Each task returns its
    own operator's warning, and none is said in the worker.  (Before, A's warning went
    into B's record, A returned none, B returned A's, and B's was said in the worker.)"""
    import threading

    from clgrid.dask import tasks

    a_calling, b_calling, a_returned = threading.Event(), threading.Event(), threading.Event()
    a = _Talking("A", a_calling, b_calling)                 # A's operator warns once B's call is in
    b = _Talking("B", b_calling, a_returned)                # B's once A's task returned
    results = {}

    def task(name, operator, after=None):
        if after is not None:
            assert after.wait(60)
        results[name] = tasks._imaged(operator, threading.Lock(), np.zeros((3, 1), np.complex64), None)
        if name == "A":
            a_returned.set()

    said = warnings_of_two_threads(lambda: task("A", a), lambda: task("B", b, a_calling))
    assert sorted(results) == ["A", "B"]
    assert results["A"][1] == {("operator A warns", RuntimeWarning)}, results
    assert results["B"][1] == {("operator B warns", RuntimeWarning)}, results
    assert not said, [str(w.message) for w in said]


def test_the_workers_warnings_are_said_in_their_own_category_once_each():
    """The warnings a call's operators gave on the workers come back as (message,
    category) pairs and are said in the caller in that category (an `EmptyInputWarning`
    stays one, a `RuntimeWarning` one), each once, in a fixed order, naming the caller's
    line.  (Before, each was a plain UserWarning.)"""
    from clgrid.dask.tasks import warnings_union
    from clgrid.dask.wgridding import _say_workers

    first = frozenset({("b: dropped", clgrid.errors.EmptyInputWarning), ("a: fell back", RuntimeWarning)})
    second = frozenset({("a: fell back", RuntimeWarning)})              # the same warning from another task
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _say_workers(warnings_union(first, (None, second)))             # (a set, and a task's whole output)
    assert [(str(w.message), w.category) for w in caught] == [("a: fell back", RuntimeWarning),
                                                             ("b: dropped", clgrid.errors.EmptyInputWarning)]
    assert {w.filename for w in caught} == {__file__}


def test_two_gridding_tasks_on_one_worker_leave_the_empty_grid_warning_to_the_caller(queue, kernels, rng,
                                                                                     monkeypatch):
    """Two gridding tasks at once on two threads of one worker (`_grid_chunk`), both of
    all-flagged chunks, in the interleaving that broke the quieting through
    `warnings.catch_warnings` (process-wide filters): A's task starts, B's starts, A's
    gridder warns and A's task returns, then B's gridder warns.  Neither warning is said in
    the worker (the caller warns for the set) and the process's filters are as before.
    (Before, A's return restored the filters B had quieted under, so B's warning was said,
    and B's return left the filters quieting every empty grid for good.)"""
    import threading
    import warnings

    from clgrid.dask.chunks import Chunk

    uvw, vis, weights, flags = observation(rng)
    flags[:] = True                                          # nothing to grid
    a_calling, b_calling, a_returned = threading.Event(), threading.Event(), threading.Event()
    gridders = {name: clgrid.Gridder(N, CELL, kernels, device=queue) for name in "AB"}
    held_until(gridders["A"], "grid", a_calling, b_calling)     # A's gridder warns once B's task is in
    held_until(gridders["B"], "grid", b_calling, a_returned)    # B's once A's task returned
    monkeypatch.setattr(cd, "_operator", lambda cls, token, fields, options: gridders[token])
    results = {}

    def task(name, after=None):
        if after is not None:
            assert after.wait(60)
        results[name] = cd._grid_chunk(uvw, vis, weights, flags, None, Chunk(0, (0, ROWS)), name, {}, FREQS)
        if name == "A":
            a_returned.set()

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        before = list(warnings.filters)
        threads = [threading.Thread(target=task, args=("A",), daemon=True),
                   threading.Thread(target=task, args=("B", a_calling), daemon=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        after = list(warnings.filters)
    assert sorted(results) == ["A", "B"]
    assert all(report["gridded"] == 0 and not np.any(grid) for grid, report in results.values())
    assert not said, [str(w.message) for w in said]
    assert after == before


def test_client_warnings_name_the_callers_line(client, kernels, rng):
    """The warnings `clgrid.dask` says in the client (for the whole set: nothing gridded,
    visibilities dropped; an image that is zero) name the caller's line, as
    `clgrid.vis2dirty`'s do (tests/test_warning_lines.py), each once.  (The workers'
    warnings that the client says for a call, its operators' calls', have no public way
    to be made here; an operator's set-up warnings are said on its worker.)"""

    def line_of(call):
        return [(__file__, call.__code__.co_firstlineno)]

    uvw, vis, _, flags = observation(rng, npol=1)
    far = uvw.copy()
    far[: ROWS // 2, 0] *= 50                                       # half of them far off the grid
    common = dict(grid_size=N, cell_size=CELL, kernels=kernels)
    empty = lambda: cd.grid(chunked(uvw), chunked(vis), None, chunked(np.ones_like(flags)), FREQS, **common)  # noqa: E731
    assert warning_places(empty, clgrid.errors.EmptyInputWarning, "no visibility was gridded") == line_of(empty)
    dropped = lambda: cd.grid(chunked(far), chunked(vis), None, None, FREQS, **common)  # noqa: E731
    assert warning_places(dropped, UserWarning, "not gridded") == line_of(dropped)

    uvw, _, vis, wgt, _ = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single")
    imaging = dict(uvw=uvw, freq=WIDE_FREQS, wgt=wgt, epsilon=1e-4, do_wgridding=True, **IMAGE)
    zero = lambda: cd.vis2dirty(vis=blocks(0 * vis), **imaging)  # noqa: E731
    assert warning_places(zero, UserWarning, "the image is zero") == line_of(zero)


def test_dirty2vis_predictions_stay_on_their_operators_workers_call_after_call(client, rng):
    """A major cycle's dirty2vis calls (results held, so the scheduler keeps their tasks and
    each call's group of prediction tasks grows) run every slab's prediction on the worker
    that keeps its operator: no operator is built again (before, the predictions' worker
    preferences were lost in the dask array's optimization, and within a few calls the
    scheduler ran them on the other worker, which built the slab's operator anew)."""
    from distributed import wait

    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single", masked=0.1)
    points = dict(uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt), mask=blocks(mask), epsilon=1e-4,
                  do_wgridding=True, slab_samples=vis.size, pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"])
    cd.clear_cache()
    client.run(cd.clear_cache)
    image = cd.vis2dirty(vis=blocks(vis), npix_x=IMAGE["npix_x"], npix_y=IMAGE["npix_y"], **points)
    made = sum(c["made"] for c in client.run(cd.cached_wgridders).values())
    held = []
    for _ in range(8):
        held.append(cd.dirty2vis(dirty=image, **points).persist())
        cd.vis2dirty(vis=blocks(vis), npix_x=IMAGE["npix_x"], npix_y=IMAGE["npix_y"], **points)
    wait(held)
    counts = client.run(cd.cached_wgridders)
    assert sum(c["made"] for c in counts.values()) == made, counts
    assert relative_error(held[-1].compute(), held[0].compute()) <= 1e-6


def _box_elsewhere(enable: bool):
    """In a worker: the client's boxes (``/dev/shm/clgrid-<hex>``, not the call's
    ``clgrid-x-`` files) made unreadable here, as on another host (`enable`), or as
    before."""
    from clgrid.dask import exchange
    original = getattr(exchange, "_original_region", None) or exchange._region
    exchange._original_region = original

    def region(path, *args, **kwargs):
        name = os.path.basename(path)
        if name.startswith("clgrid-") and not name.startswith("clgrid-x-"):
            raise FileNotFoundError(path)
        return original(path, *args, **kwargs)

    exchange._region = region if enable else original
    return enable


def test_a_cluster_with_a_worker_on_another_host_sums_the_first_image_there(client, rng, monkeypatch):
    """Some workers beside the client, one elsewhere (no shared prefix for the call): the
    first imaging task must not leave its facets in the client's box, which the worker
    elsewhere, summing facet 1, cannot read (before: FileNotFoundError from its sum)."""
    from clgrid.dask import exchange

    monkeypatch.setattr(exchange, "prefix", lambda *args, **kwargs: None)     # (not every worker here)
    workers = sorted(client.nthreads())
    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single", masked=0.1)
    expected = clgrid.vis2dirty(vis=vis, uvw=uvw, freq=WIDE_FREQS, wgt=wgt, mask=mask, epsilon=1e-4,
                                do_wgridding=True, **IMAGE)
    client.run(_box_elsewhere, True, workers=[workers[1]])
    try:
        for split in ("planes", "rows"):
            image = cd.vis2dirty(vis=blocks(vis), uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt),
                                 mask=blocks(mask), epsilon=1e-4, do_wgridding=True, split=split, **IMAGE)
            assert relative_error(image, expected) <= 1e-4, split
    finally:
        client.run(_box_elsewhere, False, workers=[workers[1]])


def test_a_failed_call_does_not_give_its_box_to_a_later_call(client, rng):
    """A call whose tasks fail may leave some running (Dask does not stop a running task):
    the box they write is not given to a later call (whose result it would be), but
    removed; the next call takes a fresh one and is right."""
    from clgrid.dask import delivery

    if not os.path.isdir(delivery.SHARED_MEMORY):
        pytest.skip("no /dev/shm: no boxes")

    def free() -> list:
        return [box.path for boxes in delivery._boxes.free_blocks().values() for box in boxes]

    uvw, _, vis, wgt, _ = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single")
    common = dict(uvw=uvw, freq=WIDE_FREQS, wgt=wgt, epsilon=1e-4, do_wgridding=True, **IMAGE)
    cd.clear_cache()
    image = cd.vis2dirty(vis=blocks(vis), **common)
    del image
    gc.collect()
    (box,) = free()                                   # the one box made, back in the pool
    bad = vis.copy()
    bad[ROW_CHUNK + 7, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        cd.vis2dirty(vis=blocks(bad), **common)
    assert box not in free() and not os.path.exists(box) and box not in delivery._made
    again = cd.vis2dirty(vis=blocks(vis), **common)
    assert relative_error(again, clgrid.vis2dirty(vis=vis, **common)) <= 1e-4


def _straggler(files):
    """In a worker: a task of a failed call, still running, that writes ones into the
    files ``files`` ((path, bytes) each: the values' and images' files that call used)
    right before this worker's tasks read theirs from shared memory (`exchange.readable`,
    `exchange.read`), as `chunk_values` and `image_slab` write them (the file made where
    it is gone); None: as before.  Returns how many times it wrote."""
    from clgrid.dask import exchange
    originals = getattr(exchange, "_unstraggled", None) or (exchange.readable, exchange.read)
    exchange._unstraggled = originals
    if files is None:
        exchange.readable, exchange.read = originals
        return exchange.__dict__.pop("_straggled", 0)
    exchange._straggled = 0

    def straggling(original):
        def reader(*args):
            for path, nbytes in files:
                exchange.write_into(path, 0, (nbytes // 4,), np.float32, lambda room: room.fill(1.0))
            exchange._straggled += 1
            return original(*args)
        return reader

    exchange.readable, exchange.read = (straggling(f) for f in originals)
    return 0


def _kept_files() -> dict:
    """This process's kept files in shared memory (``clgrid-x-<pid>-``, not another
    process's: tests may run beside this one): name -> (inode, bytes)."""
    mine = f"clgrid-x-{os.getpid()}-"
    return {f.name: (f.inode(), f.stat().st_size) for f in os.scandir("/dev/shm") if f.name.startswith(mine)}


def test_a_failed_calls_tasks_still_running_do_not_write_the_next_calls_files(client, rng):
    """vis2dirty's values and partial images pass through files kept per set of points
    (`clgrid.dask.exchange`): calls that succeed reuse the same files (the same inodes:
    no fresh pages), but a call that fails may leave tasks running (Dask does not stop
    them) that go on writing its files.  The next call on the same points must use files
    they cannot write: here such a task writes ones into every file the failed call used
    right before each of the next call's tasks reads its own (before: they were the same
    files, and the image came out wrong without a word)."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm: nothing kept in shared memory")
    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single", masked=0.1)
    common = dict(uvw=uvw, freq=WIDE_FREQS, wgt=wgt, mask=mask, epsilon=1e-4, do_wgridding=True, **IMAGE)
    expected = clgrid.vis2dirty(vis=vis, **common)
    points = dict(common, uvw=blocks(uvw), wgt=blocks(wgt), mask=blocks(mask), split="planes")
    cd.clear_cache()
    try:
        first = cd.vis2dirty(vis=blocks(vis), **points)
        used = _kept_files()
        assert any("-v" in name for name in used) and any("-i" in name for name in used), sorted(used)
        assert relative_error(cd.vis2dirty(vis=blocks(vis), **points), first) <= 1e-6
        assert _kept_files() == used                      # the same files again, not new ones
        bad = vis.copy()
        bad[np.flatnonzero(mask[ROW_CHUNK:, 3])[0] + ROW_CHUNK, 3] = np.nan      # (an unmasked sample)
        with pytest.raises(ValueError, match="NaN"):
            cd.vis2dirty(vis=blocks(bad), **points)
        client.run(_straggler, [(os.path.join("/dev/shm", name), size) for name, (_, size) in used.items()])
        try:
            again = cd.vis2dirty(vis=blocks(vis), **points)
        finally:
            wrote = sum(client.run(_straggler, None).values())
        assert wrote > 0                                  # (the straggler did write, before the reads)
        assert relative_error(again, expected) <= 1e-4
        assert relative_error(again, first) <= 1e-6
    finally:
        cd.clear_cache()


def test_a_kept_prefix_renews_its_files_only_after_a_failed_call(tmp_path):
    """`clgrid.dask.exchange.using`: the calls on a set of points get the same files until
    one that renews fails (its files then removed); the next gets another generation, as
    does the set of points dropped and kept again (never one a call before it had)."""
    from clgrid.dask import exchange

    prefix = str(tmp_path / "p")
    try:
        with exchange.using(prefix, renew=True) as first:
            open(exchange.place(first, "v0"), "wb").close()
        with exchange.using(prefix, renew=True) as files:
            assert files == first
        with pytest.raises(KeyError), exchange.using(prefix) as files:       # (not renewing)
            raise KeyError
        with exchange.using(prefix, renew=True) as files:
            assert files == first and os.path.exists(exchange.place(first, "v0"))
        with pytest.raises(KeyError), exchange.using(prefix, renew=True):
            raise KeyError
        assert not os.path.exists(exchange.place(first, "v0"))
        with exchange.using(prefix, renew=True) as second:
            assert second != first and second.startswith(prefix + "-")
        exchange._prefixes.pop(prefix)                                        # dropped, kept again
        with exchange.using(prefix) as third:
            assert third not in (first, second)
    finally:
        exchange._prefixes.pop(prefix, None)
        exchange.remove(prefix)


def test_only_a_calls_single_imaging_task_gets_the_box_and_only_where_it_reads_it():
    """`clgrid.dask.images.image_place`: the client's box goes to a call's only imaging
    task with shared memory (every worker on the client's host) or on one worker, never
    where there are several (their sum would add into it in place, and add again if Dask
    ran it twice), nor where a worker may be on another host (no shared prefix, two
    workers); the others write files of the call's prefix, or nothing without one."""
    from clgrid.dask import delivery
    from clgrid.dask.images import image_place

    box = delivery.DropBox("/dev/shm/clgrid-box", (4, 4), "<f4", kept=True)
    two, one = ["tcp://a:1", "tcp://b:1"], ["tcp://a:1"]
    assert image_place("/dev/shm/clgrid-x-1-p", box, 0, True, two) is box
    assert image_place(None, box, 0, True, one) is box
    assert image_place(None, box, 0, True, two) is None
    assert image_place("/dev/shm/clgrid-x-1-p", box, 0, False, two) == "/dev/shm/clgrid-x-1-p-i0"
    assert image_place("/dev/shm/clgrid-x-1-p", box, 3, False, two) == "/dev/shm/clgrid-x-1-p-i3"
    assert image_place(None, None, 0, True, one) is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork: POSIX only")
def test_a_forked_child_leaves_its_parents_shared_files_at_exit(tmp_path):
    """The exit handlers of `clgrid.dask.delivery` and `clgrid.dask.exchange` remove the
    files of the process that made them: a child of a bare ``os.fork`` that exits
    normally (running the parent's handlers) leaves the parent's kept box alone."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import os, sys
        import numpy as np
        from clgrid.dask import delivery
        box = delivery.kept_box((4, 4), np.float32)
        if box is None:
            print("none"); sys.exit(0)
        pid = os.fork()
        if pid == 0:
            sys.exit(0)                      # a normal exit: the atexit handlers run
        os.waitpid(pid, 0)
        print("kept" if os.path.exists(box.path) else "removed", box.path)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    word, *path = out.stdout.split()
    if word == "none":
        pytest.skip("no room in /dev/shm for a box")
    assert word == "kept", out.stdout + out.stderr
    assert not os.path.exists(path[0])                # and the parent's own exit removed it


def test_a_local_scheduler_chosen_by_config_runs_everything_here(client, rng):
    """With a distributed Client present, ``dask.config.set(scheduler="sync")`` (Dask's way
    of choosing where ``compute`` runs) makes `clgrid.dask.vis2dirty` and `dirty2vis` run
    on that scheduler: no task reaches the cluster (before, `dirty2vis` submitted its
    predictions to the cluster and the images and values went through its files), and
    the results equal the cluster's."""
    import dask
    from distributed import get_task_stream

    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, precision="single", masked=0.1)
    common = dict(uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt), mask=blocks(mask), epsilon=1e-4,
                  do_wgridding=True, pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"])
    size = dict(npix_x=IMAGE["npix_x"], npix_y=IMAGE["npix_y"])
    on_cluster = cd.vis2dirty(vis=blocks(vis), **common, **size)
    predicted = cd.dirty2vis(dirty=on_cluster, **common).compute()
    with get_task_stream(client) as stream, dask.config.set(scheduler="sync"):
        here = cd.vis2dirty(vis=blocks(vis), **common, **size)
        here_predicted = cd.dirty2vis(dirty=on_cluster, **common).compute()
    assert not stream.data, [t["key"] for t in stream.data][:5]
    assert relative_error(here, on_cluster) <= 1e-6 and relative_error(here_predicted, predicted) <= 1e-6


def test_directions_that_balance_at_other_planes_each_take_their_own_slabs(client, rng, device_name):
    """Weights that cut vis2dirty's and dirty2vis's slabs apart (the tuning table's
    ``split_sample_weight`` and ``split_sample_weight_dirty2vis``): each slab task holds
    the samples of both its slabs (`clgrid.imaging.split.direction_slabs`, as a device
    list's devices do) and each call takes its own direction's planes; a dirty2vis after
    the vis2dirty on the same points uses the same operators (none made), and image and
    visibilities equal `clgrid.vis2dirty` / `dirty2vis` to rounding (double)."""
    from clgrid.dask import planes_split

    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, masked=0.1)
    tuning = {"split_sample_weight": 0.02, "split_sample_weight_dirty2vis": 50.0}
    points = dict(freq=WIDE_FREQS, mask=mask, epsilon=1e-9, do_wgridding=True, pixsize_x=IMAGE["pixsize_x"],
                  pixsize_y=IMAGE["pixsize_y"], tuning=tuning)
    split = dict(split="planes", slabs=3, slab_samples=vis.size)        # (a task per slab: all kept)
    cd.clear_cache()
    client.run(cd.clear_cache)
    image = cd.vis2dirty(uvw=blocks(uvw), vis=blocks(vis), wgt=blocks(wgt), npix_x=IMAGE["npix_x"],
                         npix_y=IMAGE["npix_y"], **dict(points, mask=blocks(mask)), **split)
    made = sum(c["made"] for c in client.run(cd.cached_wgridders).values())
    dirty = rng.normal(size=image.shape)
    predicted = cd.dirty2vis(dirty=dirty, uvw=blocks(uvw), wgt=blocks(wgt), **dict(points, mask=blocks(mask)),
                             **split).compute()
    assert sum(c["made"] for c in client.run(cd.cached_wgridders).values()) == made
    layout = next(reversed(planes_split._layouts.values()))
    g, calls = layout.geometry, [dict(task.calls) for task in layout.tasks]
    assert all(calls) and any(c["vis2dirty"] != c["dirty2vis"] for c in calls)
    for direction in ("vis2dirty", "dirty2vis"):             # each direction's slabs cut the planes in order
        taken = [c[direction] for c in calls if c[direction][0] < c[direction][1]]
        assert taken[0][0] == 0 and taken[-1][1] == g.num_planes
        assert all(a[1] == b[0] for a, b in zip(taken[:-1], taken[1:]))
    for task, c in zip(layout.tasks, calls):
        taken = [s for s in c.values() if s[0] < s[1]]
        assert task.planes == (min(lo for lo, _ in taken), max(hi for _, hi in taken))
    common = dict(points, uvw=uvw, npix_x=IMAGE["npix_x"], npix_y=IMAGE["npix_y"])
    assert relative_error(image, clgrid.vis2dirty(vis=vis, wgt=wgt, device=device_name, **common)) <= 1e-12
    shape = {k: v for k, v in common.items() if k not in ("npix_x", "npix_y")}
    assert relative_error(predicted, clgrid.dirty2vis(dirty=dirty, wgt=wgt, device=device_name, **shape)) <= 1e-12


def test_slabs_cut_per_direction_on_workers_with_a_device_list(client, rng, device_name):
    """The slabs of the two directions apart and each worker's operators over a list of
    two devices (``device=[d, d]``, as a worker holding several GPUs): each slab task's
    `WGridder(planes={direction: ...}, device=[...])` cuts each direction's planes between
    its devices (refused before: every slab task failed), and the image and visibilities
    equal one process's (double)."""
    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, masked=0.1)
    points = dict(freq=WIDE_FREQS, epsilon=1e-9, do_wgridding=True, pixsize_x=IMAGE["pixsize_x"],
                  pixsize_y=IMAGE["pixsize_y"])
    tuning = {"split_sample_weight": 0.02, "split_sample_weight_dirty2vis": 50.0}
    split = dict(split="planes", slabs=3, slab_samples=vis.size, device=[device_name, device_name], tuning=tuning)
    image = cd.vis2dirty(uvw=blocks(uvw), vis=blocks(vis), wgt=blocks(wgt), mask=blocks(mask), npix_x=IMAGE["npix_x"],
                         npix_y=IMAGE["npix_y"], **points, **split)
    dirty = rng.normal(size=image.shape)
    predicted = cd.dirty2vis(dirty=dirty, uvw=blocks(uvw), wgt=blocks(wgt), mask=blocks(mask), **points,
                             **split).compute()
    common = dict(points, uvw=uvw, wgt=wgt, mask=mask, device=device_name)
    assert relative_error(image, clgrid.vis2dirty(vis=vis, npix_x=IMAGE["npix_x"], npix_y=IMAGE["npix_y"],
                                                  **common)) <= 1e-12
    assert relative_error(predicted, clgrid.dirty2vis(dirty=dirty, **common)) <= 1e-12


class _WhereTasksRan:
    """A scheduler plugin that records, for the tasks whose key starts with one of
    ``prefixes``, the workers they were restricted to (a preference) and where they ran."""

    name = "clgrid-test-where-tasks-ran"

    def __init__(self, prefixes):
        self.prefixes, self.seen, self.scheduler = tuple(prefixes), {}, None

    async def start(self, scheduler):
        self.scheduler = scheduler

    def transition(self, key, start, finish, *args, **kwargs):
        if finish == "processing" and str(key).startswith(self.prefixes):
            ts = self.scheduler.tasks[key]
            self.seen[str(key)] = (sorted(ts.worker_restrictions or ()), ts.processing_on.address)


def test_chunk_tasks_prefer_the_worker_that_holds_the_persisted_vis_block(client, rng):
    """Both vis blocks persisted on one worker, the uvw blocks on the other: each chunk's
    selection (first call) and values task (every call) prefer the worker that holds the
    chunk's vis block and run there, so no call moves a vis block between workers (left to
    the scheduler, a values task could run on the other, idle, worker and move its block:
    on two GPU workers 256 MB, 85 ms, in some calls); the image is one process's."""
    from distributed.diagnostics.plugin import SchedulerPlugin

    rows = 4000
    uvw, freq, vis, _, _ = wide_field(rng, rows, WIDE_FREQS, precision="single", weights=None)
    w0, w1 = sorted(client.nthreads())
    dvis = client.persist(da.from_array(vis, chunks=(rows // 2, freq.size)), workers=[w0])
    duvw = client.persist(da.from_array(uvw, chunks=(rows // 2, 3)), workers=[w1])
    distributed.wait([dvis, duvw])
    plugin = type("WhereTasksRan", (_WhereTasksRan, SchedulerPlugin), {})(("chunk_values", "chunk_selection"))
    client.register_plugin(plugin)
    try:
        common = dict(uvw=duvw, freq=freq, pixsize_x=5e-3, pixsize_y=5e-3, epsilon=1e-4, do_wgridding=True,
                      split="planes", slab_samples=vis.size, npix_x=128, npix_y=128)
        cd.clear_cache()
        images = [cd.vis2dirty(vis=dvis, **common) for _ in range(3)]
        seen = client.run_on_scheduler(lambda dask_scheduler: dict(dask_scheduler.plugins[_WhereTasksRan.name].seen))
    finally:
        client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.remove_plugin(name=_WhereTasksRan.name))
    assert sum(k.startswith("chunk_selection") for k in seen) == 2
    assert sum(k.startswith("chunk_values") for k in seen) == 6
    assert all(restricted == [w0] and ran == w0 for restricted, ran in seen.values()), seen
    single = clgrid.vis2dirty(uvw=uvw, vis=vis, **{k: v for k, v in common.items()
                                                   if k not in ("uvw", "split", "slab_samples")})
    assert all(relative_error(image, single) <= 1e-5 for image in images)


def test_slab_tasks_without_planes_in_a_direction_sit_its_calls_out(monkeypatch, rng, device_name):
    """Many slabs and weights far apart: some slabs have no planes in one direction.  Their
    tasks (and their chunks' values for them) are left out of that direction's calls, and
    the image and visibilities still equal `clgrid.vis2dirty` / `dirty2vis` to rounding.
    Dask's synchronous scheduler in this process, so that each task can be counted."""
    from clgrid.dask import planes_split, tasks as dask_tasks

    monkeypatch.setattr(clgrid.dask.chunks, "client", lambda: None)
    ran = {"image_slab": [], "vis_slab": [], "chunk_values": []}

    def counted(name):
        real = getattr(dask_tasks, name)

        def task(*args):
            ran[name].append(args)
            return real(*args)
        task.__name__ = name
        return task

    for name in ran:
        monkeypatch.setattr(dask_tasks, name, counted(name))
    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, masked=0.1)
    tuning = {"split_sample_weight": 1e-3, "split_sample_weight_dirty2vis": 1e3}
    common = dict(uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt), mask=blocks(mask), epsilon=1e-9,
                  do_wgridding=True, split="planes", slabs=16, slab_samples=vis.size, tuning=tuning, **IMAGE)
    with dask.config.set(scheduler="sync"):
        cd.clear_cache()
        image = cd.vis2dirty(vis=blocks(vis), **common)
        layout = next(reversed(planes_split._layouts.values()))
        dirty = rng.normal(size=image.shape)
        shape = {k: v for k, v in common.items() if k not in ("npix_x", "npix_y")}
        predicted = cd.dirty2vis(dirty=dirty, **shape).compute()
    takes = {d: [t.index for t in layout.tasks if t.takes(d)] for d in ("vis2dirty", "dirty2vis")}
    assert len(takes["vis2dirty"]) < len(layout.tasks) or len(takes["dirty2vis"]) < len(layout.tasks), takes
    assert sorted(args[2].index for args in ran["image_slab"]) == sorted(takes["vis2dirty"])
    assert sorted(args[3].index for args in ran["vis_slab"]) == sorted(takes["dirty2vis"])
    for args in ran["chunk_values"]:                          # (chunk, vis, wgt, taken, threads, targets, wanted)
        assert [s for s, w in enumerate(args[6]) if w] == takes["vis2dirty"]
    single = dict(uvw=uvw, freq=WIDE_FREQS, wgt=wgt, mask=mask, epsilon=1e-9, do_wgridding=True, device=device_name)
    assert relative_error(image, clgrid.vis2dirty(vis=vis, **single, **IMAGE)) <= 1e-12
    assert relative_error(predicted, clgrid.dirty2vis(dirty=dirty, pixsize_x=IMAGE["pixsize_x"],
                                                      pixsize_y=IMAGE["pixsize_y"], **single)) <= 1e-12


def test_default_slab_samples_take_what_a_gpu_worker_holds(monkeypatch, rng, device_name):
    """Without ``slab_samples`` a slab's task takes as many samples as the largest chunk
    holds, or, where a worker's device is a GPU, as its memory holds beside the grid
    (`clgrid.dask.tasks.slab_capacity`) if more: then one task per slab, no slab's FFTs
    repeated per group; with ``deterministic`` the chunks alone fix it.  The image is one
    process's either way.  (Dask's synchronous scheduler here, with the capacity a GPU
    would report stood in.)"""
    from clgrid.dask import planes_split, tasks as dask_tasks

    import pyopencl as cl

    from clgrid.device.runtime import get_queue

    monkeypatch.setattr(clgrid.dask.chunks, "client", lambda: None)
    if get_queue(device_name).device.type & cl.device_type.CPU:       # (a GPU test device: its own figure)
        assert dask_tasks.slab_capacity(dict(device=device_name, precision="double"), None) is None
    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, masked=0.1)
    common = dict(uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt), mask=blocks(mask), epsilon=1e-9,
                  do_wgridding=True, split="planes", slabs=3, **IMAGE)
    single = clgrid.vis2dirty(uvw=uvw, freq=WIDE_FREQS, vis=vis, wgt=wgt, mask=mask, epsilon=1e-9, do_wgridding=True,
                              device=device_name, **IMAGE)

    def tasks_of(capacity, **more):
        monkeypatch.setattr(dask_tasks, "slab_capacity", lambda options, geometry, tasks: capacity)
        cd.clear_cache()
        with dask.config.set(scheduler="sync"):
            image = cd.vis2dirty(vis=blocks(vis), **common, **more)
        assert relative_error(image, single) <= 1e-12
        return next(reversed(planes_split._layouts.values())).tasks

    by_chunks = tasks_of(None)
    assert len(by_chunks) > 3                                           # a slab's chunks in groups
    assert [t.chunks for t in tasks_of(10 ** 9)] == [(0, 6)] * 3         # a GPU's room: one task per slab
    assert [t.chunks for t in tasks_of(10 ** 9, deterministic=True)] == [t.chunks for t in by_chunks]
    assert [t.chunks for t in tasks_of(10, slab_samples=800)] == [t.chunks for t in by_chunks]


def test_slab_capacity_on_a_gpu_is_what_half_its_memory_holds_beside_the_grid(monkeypatch):
    """`clgrid.dask.tasks.slab_capacity` on a GPU (a stand-in device: its type and memory
    are all it reads): the most samples whose engine's peak device memory
    (`engine_device_bytes`) fits `TASK_MEMORY_SHARE` of the device's memory, shared among
    the worker's slab tasks, one more do not; a device list asks its first device; fewer
    in double precision, and with more tasks; none where the grid alone takes the share."""
    import types

    import pyopencl as cl

    from clgrid.dask import tasks as dask_tasks
    from clgrid.imaging.geometry import choose_geometry
    from clgrid.imaging.memory import engine_device_bytes

    memory, asked = 3 * 2 ** 30 + 12345, []

    def queue_of(spec):
        asked.append(spec)
        return types.SimpleNamespace(device=types.SimpleNamespace(type=cl.device_type.GPU, global_mem_size=memory))

    monkeypatch.setattr(dask_tasks, "get_queue", queue_of)
    cell = np.radians(2.0 / 3600)
    caps = {}
    for precision in ("single", "double"):
        g = choose_geometry(2048, 2048, cell, cell, 1e-5, True, (0.0, 3000.0), 10 ** 7, precision=precision)
        for tasks in (1, 3):
            share = memory * dask_tasks.TASK_MEMORY_SHARE / tasks
            cap = dask_tasks.slab_capacity(dict(device=("gpu #1", "gpu #0"), precision=precision), g, tasks)
            assert asked[-1] == "gpu #1"
            assert engine_device_bytes(g, precision, cap) <= share < engine_device_bytes(g, precision, cap + 1)
            caps[precision, tasks] = cap
    assert 0 < caps["double", 1] < caps["single", 1] and 0 < caps["single", 3] < caps["single", 1]
    memory = engine_device_bytes(g, "double", 0)                  # the grid alone is more than the share
    assert dask_tasks.slab_capacity(dict(device=None, precision="double"), g) == 0
    assert asked[-1] is None


def test_a_worker_drops_kept_operators_that_leave_no_room_for_the_next(monkeypatch, rng, device_name):
    """A worker's kept slab operators and the next one's peak device memory must fit its
    device's share (`clgrid.dask.tasks._make_room`): the least recently used are dropped
    until they do (each engine weighs its own need against the whole memory), and the
    call's image is still one process's.  (The device's memory stood in, in this
    process, with Dask's synchronous scheduler.)"""
    import types

    from clgrid.dask import tasks as dask_tasks
    from clgrid.imaging.stream import DEVICE_SHARE

    monkeypatch.setattr(clgrid.dask.chunks, "client", lambda: None)
    uvw, _, vis, wgt, mask = wide_field(rng, WIDE_ROWS, WIDE_FREQS, masked=0.1)
    common = dict(uvw=blocks(uvw), freq=WIDE_FREQS, wgt=blocks(wgt), mask=blocks(mask), epsilon=1e-9,
                  do_wgridding=True, split="planes", slabs=3, slab_samples=vis.size, **IMAGE)
    cd.clear_cache()
    dask_tasks.forget_operators()
    with dask.config.set(scheduler="sync"):
        cd.vis2dirty(vis=blocks(vis), **common)
    held = [dask_tasks._held_bytes(op) for op, _ in dask_tasks._operators.values()]
    assert len(held) == 3 and all(held)
    real = dask_tasks.get_queue
    memory = (sum(held) - min(held) + max(held)) / DEVICE_SHARE                # room for two of them, not three
    monkeypatch.setattr(dask_tasks, "get_queue", lambda spec: types.SimpleNamespace(
        device=types.SimpleNamespace(type=real(spec).device.type, global_mem_size=memory)))
    other = mask.copy()                                               # new points: three new operators
    other[::7, 0] = 0
    single = clgrid.vis2dirty(uvw=uvw, freq=WIDE_FREQS, vis=vis, wgt=wgt, mask=other, epsilon=1e-9, do_wgridding=True,
                              device=device_name, **IMAGE)
    with dask.config.set(scheduler="sync"):
        image = cd.vis2dirty(vis=blocks(vis), **dict(common, mask=blocks(other)))
    assert relative_error(image, single) <= 1e-12
    kept = [dask_tasks._held_bytes(op) for op, _ in dask_tasks._operators.values()]
    assert sum(kept) <= memory * DEVICE_SHARE and len(kept) < 6


@pytest.mark.parametrize("fft", ["mapped", "host"])
def test_an_imaging_task_writes_its_image_into_its_own_file_in_facets_over_it(rng, fft):
    """`clgrid.dask.tasks._imaged` with a shared-memory file as its place, in this process:
    the image (coming down from the device there with the device FFT path, "mapped";
    written there by the host FFT's correction) fills the whole (poisoned) file, and the
    facets are `Shared` regions of it, in order, that read as the image's rows.  Single
    precision against the operator's own image."""
    import threading
    import uuid

    from clgrid.dask import exchange, tasks

    if not os.path.isdir(exchange.SHARED_MEMORY):
        pytest.skip("no /dev/shm on this machine: the image's file is in shared memory")
    uvw, freq, vis, _, _ = wide_field(rng, 300, precision="single")
    operator = clgrid.WGridder(uvw, freq, epsilon=1e-4, do_wgridding=True, precision="single",
                               tuning={"fft": fft}, **IMAGE)
    alone = operator.vis2dirty(vis)
    own = exchange.place(f"{exchange.SHARED_MEMORY}/clgrid-test-{os.getpid()}-{uuid.uuid4().hex[:8]}", "i0")
    try:
        exchange.room_of(own, alone.shape, np.float32)[...] = np.nan
        parts, _ = tasks._imaged(operator, threading.Lock(), vis, None, own, 3)
        mine = exchange.read(exchange.Shared(own, 0, alone.size, "<f4", alone.shape))
        assert relative_error(mine, alone) <= 1e-6        # (a GPU's atomics: not the same bits)
        assert len(parts) == 3 and all(isinstance(p, exchange.Shared) and p.path == own for p in parts)
        rows = np.cumsum([0] + [p.shape[0] for p in parts])
        assert rows[-1] == alone.shape[0]
        for part, start in zip(parts, rows):
            assert part.offset == start * alone.shape[1]
            np.testing.assert_array_equal(exchange.read(part), mine[start:start + part.shape[0]])
    finally:
        if os.path.exists(own):
            os.remove(own)
