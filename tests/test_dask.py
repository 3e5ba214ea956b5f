"""`clgrid.dask` on a 2-worker `distributed.LocalCluster` (processes) against the
single-process operators: gridding to 1e-5 relative in single precision, bit-identical
from run to run with ``deterministic=True``, degridding equal, a failing task raised in
the caller (within a time limit, not a hang).

One cluster serves the module (starting one takes seconds); its workers get the device
under test through ``CLGRID_DEVICE`` in their environment, the way README says to assign
devices, and every call passes ``device=None``.
"""

import concurrent.futures
import contextlib
import os

import numpy as np
import pytest

import clgrid
from clgrid.plan import SPEED_OF_LIGHT
from conftest import optional, random_visibilities, relative_error

dask = optional("dask", "dask")
distributed = optional("distributed", "dask")
da = optional("dask.array", "dask")
import clgrid.dask as cd  # noqa: E402  (needs dask)

N, CELL, W_MAX = 64, 2e-3, 40.0
FREQS = np.array([1.0e8, 1.1e8, 1.2e8])
ROWS = 1500          # x 3 channels x 2 polarisations
CHUNK = 340          # 5 chunks, the last one short


@pytest.fixture(scope="module")
def client():
    device = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       env={"CLGRID_DEVICE": device})
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
    grid, report = cd.grid(chunked(uvw), chunked(vis, 500), chunked(weights), chunked(flags), FREQS, grid_size=N,
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
    vis = cd.degrid(model, chunked(uvw), chunked(flags), FREQS, grid_size=N, cell_size=CELL, kernels=kernels)
    assert vis.shape == expected.shape and vis.chunks[0] == chunked(uvw).chunks[0]
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
    monkeypatch.setattr(cd, "_client", lambda: None)
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
    cd.clear_cache()


def test_arguments_are_refused_by_name(kernels, queue, rng):
    uvw, vis, _, _ = observation(rng, npol=1)
    common = dict(grid_size=N, cell_size=CELL, kernels=kernels)
    with pytest.raises(TypeError, match="uvw must be a dask array"):
        cd.grid(uvw, vis, **common)
    with pytest.raises(TypeError, match="device must be None or a device name"):
        cd.grid(chunked(uvw), vis, device=queue.device, **common)
    with pytest.raises(ValueError, match="does not match uvw"):
        cd.grid(chunked(uvw), vis[:-1], **common)
    with pytest.raises(ValueError, match="grid must be a complex array"):
        cd.degrid(np.zeros((1, N, N)), chunked(uvw), **common)


def test_assign_devices_gives_each_worker_a_device_by_index(client, queue, kernels, rng):
    device = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
    count = len(clgrid.runtime.matching_devices(device))
    try:
        with pytest.warns(UserWarning, match="workers share") if count < 2 else contextlib.nullcontext():
            assigned = cd.assign_devices(client, device)
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
