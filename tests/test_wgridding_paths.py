"""The w-gridding operator's other paths against ducc0: the spread variant the table does
not pick on PoCL ("points", "bins"; PoCL runs "rows") and the device FFT (pyvkfft on OpenCL) with
crop, w phase and grid correction on the device, which the table picks on GPUs."""

import dataclasses
import os

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid.imaging import engine as wgridding

# PoCL on CI; CLGRID_TEST_DEVICE=nvidia runs the same tests on a GPU (benchmarks/gpu.sh)
DEVICE = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
from conftest import relative_error, wide_field
from test_vis2dirty import IMAGE

ducc0_wgridder = pytest.importorskip("ducc0.wgridder", reason="ducc0 is the oracle (the compare extra)")


def _have_vkfft():
    try:
        from clgrid.imaging.fft import import_vkfft

        import_vkfft()
        return True
    except ImportError:
        return False


vkfft = pytest.mark.skipif(not _have_vkfft(), reason="pyvkfft with its OpenCL backend is not installed "
                                                     "(the vkfft extra)")


def against_ducc0(rng, tuning, epsilon, single, wgrid, **kw):
    uvw, freq, vis, wgt, _ = wide_field(rng, 1500)
    args = dict(uvw=uvw, freq=freq, **IMAGE, do_wgridding=wgrid, **kw)
    d2v = {k: v for k, v in args.items() if k not in ("npix_x", "npix_y")}
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    ref = ducc0_wgridder.vis2dirty(vis=vis, wgt=wgt, epsilon=1e-12, **args)
    ref_vis = ducc0_wgridder.dirty2vis(dirty=dirty, wgt=wgt, epsilon=1e-12, **d2v)
    cd, rd = (np.complex64, np.float32) if single else (np.complex128, np.float64)
    got = clgrid.vis2dirty(vis=vis.astype(cd), wgt=wgt.astype(rd), epsilon=epsilon, device=DEVICE,
                           tuning=tuning, **args)
    got_vis = clgrid.dirty2vis(dirty=dirty.astype(rd), wgt=wgt.astype(rd), epsilon=epsilon, device=DEVICE,
                               tuning=tuning, **d2v)
    return relative_error(got, ref), relative_error(got_vis, ref_vis)


@pytest.mark.parametrize("epsilon,single,wgrid", [pytest.param(1e-10, False, True, marks=pytest.mark.slow),
                                                   (1e-4, True, True), (1e-5, False, False)])
@pytest.mark.parametrize("tuning", [{"spread": "points"}, {"spread": "bins", "bins_work_group": 32},
                                    {"spread": "fpga", "tile": 16, "banks": 3, "unroll_u": 3, "shift_depth": 5}])
def test_spread_variants_against_ducc0(rng, tuning, epsilon, single, wgrid):
    img, vis = against_ducc0(rng, tuning, epsilon, single, wgrid)
    assert img <= epsilon and vis <= epsilon, (img, vis)


@pytest.mark.parametrize("bin_size", [(8, 16), (5, 3)])
@pytest.mark.parametrize("work_group,subproblem", [pytest.param(256, 7, marks=pytest.mark.slow), (32, 7), (16, 40)])
def test_bins_of_any_size_match_rows(rng, bin_size, work_group, subproblem):
    """The "bins" spread with bins that do not divide the grid (the last bin short, footprints
    wrapping round the grid's edge), subproblems shorter or longer than a work-group's batch
    and footprints (W^2 cells) larger or smaller than the work-group gives the "rows" spread's image."""
    uvw, freq, vis, wgt, _ = wide_field(rng, 700)
    bins = {"spread": "bins", "bin_u": bin_size[0], "bin_v": bin_size[1], "bins_work_group": work_group,
            "bins_subproblem": subproblem}
    images = [clgrid.WGridder(uvw, freq, epsilon=1e-9, do_wgridding=True, device=DEVICE, **IMAGE,
                              tuning=tuning).vis2dirty(vis, wgt)
              for tuning in ({"spread": "rows"}, bins)]
    assert relative_error(images[1], images[0]) < 1e-12


def test_bins_batch_shrinks_to_fit_local_memory(rng):
    """Bins whose tile leaves room for fewer points than work-items: the batch shrinks and
    the image is still the "rows" spread's; bins whose tile alone does not fit are refused."""
    uvw, freq, vis, wgt, _ = wide_field(rng, 300)
    op = clgrid.WGridder(uvw, freq, epsilon=1e-9, do_wgridding=True, device=DEVICE, **IMAGE, tuning={"fft": "host"})
    w = op.geometry.kernel.support
    per_point = 16 + 2 * (w | 1) * 8 + 8
    side = int(np.sqrt((op.engine.facts.local_memory - 100 * per_point) / 16)) - w + 1   # room for ~100 points
    bins = {"spread": "bins", "bin_u": side, "bin_v": side, "bins_work_group": 256, "fft": "host"}
    big = clgrid.WGridder(uvw, freq, epsilon=1e-9, do_wgridding=True, device=DEVICE, **IMAGE, tuning=bins)
    assert 1 <= big.engine.spreader.tuning["bins_batch"] < 256
    rows = clgrid.WGridder(uvw, freq, epsilon=1e-9, do_wgridding=True, device=DEVICE, **IMAGE,
                           tuning={"spread": "rows", "fft": "host"})
    assert relative_error(big.vis2dirty(vis, wgt), rows.vis2dirty(vis, wgt)) < 1e-12
    with pytest.raises(ValueError, match="bin_u=.*local memory"):
        clgrid.WGridder(uvw, freq, epsilon=1e-9, do_wgridding=True, device=DEVICE, **IMAGE,
                        tuning=bins | {"bin_u": 2 * side, "bin_v": 2 * side})


@pytest.mark.oclgrind
@pytest.mark.parametrize("spread", ["bins", "fpga"])
def test_spread_and_interpolation_under_oclgrind(tmp_path, spread):
    """No data race (a missing barrier between points shows here), no out-of-bounds access
    in the planning, gather and the "bins" spread kernels or the FPGA pipelines
    (tests/oclgrind_wgrid_case.py), and the simulated image and visibilities are the
    "rows" spread's."""
    from oclgrind_cases import run_case
    from oclgrind_wgrid_case import model, operator, tiny_case

    seed = int(np.random.default_rng().integers(1 << 31))
    out = tmp_path / "case.npz"
    # race and bounds checks: the operator zeroes its grid with clEnqueueFillBuffer, whose
    # zeros Oclgrind 21.10 takes as uninitialised (tests/test_oclgrind.py, FILLS_ON_DEVICE)
    run, _ = run_case("oclgrind_wgrid_case.py", out, "--seed", seed, "--spread", spread, checks=("--data-races",))
    assert run.returncode == 0, run.output[-3000:]
    assert run.diagnostics == [], "\n\n".join(run.diagnostics[:3])
    uvw, freq, vis = tiny_case(seed)
    rows = operator(uvw, freq, DEVICE, {"spread": "rows", "fft": "host"})
    assert relative_error(np.load(out)["result"], rows.vis2dirty(vis)) < 1e-5
    assert relative_error(np.load(out)["predicted"], rows.dirty2vis(model(seed))) < 1e-5


@vkfft
@pytest.mark.parametrize("epsilon,single,wgrid", [(1e-10, False, True), (1e-4, True, True), (1e-5, True, False)])
def test_device_fft_against_ducc0(rng, epsilon, single, wgrid):
    img, vis = against_ducc0(rng, {"fft": "vkfft"}, epsilon, single, wgrid, center_x=0.02, center_y=-0.03,
                             flip_v=True)
    assert img <= epsilon and vis <= epsilon, (img, vis)


def _device_side_matches_host(rng, fft):
    uvw, freq, vis, wgt, _ = wide_field(rng, 600)
    ops = {mode: clgrid.WGridder(uvw, freq, epsilon=1e-9, do_wgridding=True, device=DEVICE, tuning={"fft": mode},
                                 **IMAGE) for mode in ("host", fft)}
    assert ops[fft].engine.fft_mode == fft and ops["host"].engine.fft_mode == "host"
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    images = {k: op.vis2dirty(vis, wgt) for k, op in ops.items()}
    models = {k: op.dirty2vis(dirty, wgt) for k, op in ops.items()}
    assert relative_error(images[fft], images["host"]) < 1e-12
    assert relative_error(models[fft], models["host"]) < 1e-12
    lhs, rhs = np.vdot(models[fft], vis).real, np.vdot(dirty, images[fft])
    # against the sizes of the vectors: the inner product itself can cancel to far less
    assert abs(lhs - rhs) <= 1e-12 * np.linalg.norm(dirty) * np.linalg.norm(images[fft])


@vkfft
def test_device_fft_matches_host_fft_and_is_adjoint(rng):
    _device_side_matches_host(rng, "vkfft")


@pytest.mark.parametrize("fft", ["host", "mapped"])
def test_host_fft_libraries_agree(rng, fft):
    """ducc0.fft and scipy.fft behind the host FFT give the same image and visibilities."""
    uvw, freq, vis, wgt, _ = wide_field(rng, 500)
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    ops = {lib: clgrid.WGridder(uvw, freq, epsilon=1e-9, do_wgridding=True, device=DEVICE, **IMAGE,
                                tuning={"fft": fft, "host_fft": lib}) for lib in ("scipy", "ducc0")}
    assert {lib: op.engine.fft.library for lib, op in ops.items()} == {"scipy": "scipy", "ducc0": "ducc0"}
    assert relative_error(ops["ducc0"].vis2dirty(vis, wgt), ops["scipy"].vis2dirty(vis, wgt)) < 1e-12
    assert relative_error(ops["ducc0"].dirty2vis(dirty, wgt), ops["scipy"].dirty2vis(dirty, wgt)) < 1e-12


@pytest.mark.parametrize("nu, nv, npix_x, npix_y", [(30, 24, 17, 10), (31, 25, 16, 11), (20, 20, 20, 20)])
@pytest.mark.parametrize("parts", [1, 2, 5])
def test_clear_outside_zeroes_what_embedding_leaves_zero(rng, nu, nv, npix_x, npix_y, parts):
    """Threads clearing a poisoned grid in shares of image rows zero exactly the cells an
    embedded image leaves zero, and leave the image's own cells alone."""
    from clgrid.imaging.fft import clear_outside, embed

    grid = rng.normal(size=(nu, nv)) + 7.0
    before = grid.copy()
    bounds = np.linspace(0, npix_x, parts + 1).astype(int)
    for a, b in zip(bounds[:-1], bounds[1:]):
        clear_outside(grid, npix_x, npix_y, slice(a, b))
    image_cells = embed(embed(np.ones((npix_x, npix_y)), nu, 0), nv, 1) != 0
    assert np.all(grid[~image_cells] == 0)
    np.testing.assert_array_equal(grid[image_cells], before[image_cells])


def test_stepping_runs_are_slices_of_the_same_entries():
    """An index stepping by +1 or -1 becomes the slice that reads the same entries (the
    host path's phases as views of the small grid); anything else is gathered."""
    from clgrid.imaging.pixels import _stepping

    small = np.arange(10)
    for index in ([3, 4, 5], [5, 4, 3, 2, 1, 0], [0], [9, 8], [2, 1]):
        run = _stepping(np.array(index))
        np.testing.assert_array_equal(small[run], index)
    for index in ([1, 3], [0, 1, 1], [4, 3, 4], []):
        assert _stepping(np.array(index, int)) is None


def test_host_fft_choice_is_checked(rng, monkeypatch):
    uvw, freq, vis, wgt, _ = wide_field(rng, 50)
    with pytest.raises(ValueError, match="host_fft must be one of"):
        clgrid.WGridder(uvw, freq, epsilon=1e-5, device=DEVICE, **IMAGE, tuning={"host_fft": "numpy"})
    monkeypatch.setitem(__import__("sys").modules, "ducc0.fft", None)     # as if ducc0 were not installed
    assert clgrid.WGridder(uvw, freq, epsilon=1e-5, device=DEVICE, **IMAGE).engine.fft.library == "scipy"
    with pytest.raises(ImportError, match="needs ducc0"):
        clgrid.WGridder(uvw, freq, epsilon=1e-5, device=DEVICE, **IMAGE, tuning={"host_fft": "ducc0"})


def test_mapped_host_fft_matches_host_fft_and_is_adjoint(rng):
    """The host FFT in place on the mapped device grid, with crop, phase and correction
    on the device (the device-FFT path's kernels, with no pyvkfft needed)."""
    _device_side_matches_host(rng, "mapped")


@pytest.mark.parametrize("single", [False, True])
def test_mapped_host_fft_against_ducc0(rng, single):
    eps = 1e-5 if single else 1e-10
    img, vis = against_ducc0(rng, {"fft": "mapped"}, eps, single, True, center_y=0.02)
    assert img <= eps and vis <= eps, (img, vis)


@vkfft
def test_device_path_refuses_non_finite_values(rng):
    """With the device FFT the values are checked on the device (counted by the gather and
    correction kernels): NaN anywhere unmasked is refused by name, masked NaN is not."""
    uvw, freq, vis, wgt, _ = wide_field(rng, 300)
    mask = np.ones(vis.shape, np.uint8)
    mask[5, 1] = 0
    op = clgrid.WGridder(uvw, freq, epsilon=1e-6, do_wgridding=True, device=DEVICE, mask=mask,
                         tuning={"fft": "vkfft"}, **IMAGE)
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    bad = vis.copy()
    bad[5, 1] = np.nan                                    # masked: no effect
    assert np.all(np.isfinite(op.vis2dirty(bad, wgt)))
    bad[6, 0] = np.inf
    with pytest.raises(ValueError, match="vis has NaN"):
        op.vis2dirty(bad, wgt)
    bad_wgt = wgt.copy()
    bad_wgt[3, 0] = np.nan
    with pytest.raises(ValueError, match="wgt has NaN"):
        op.vis2dirty(vis, bad_wgt)
    with pytest.raises(ValueError, match="wgt has NaN"):
        op.dirty2vis(dirty, bad_wgt)
    dirty[4, 7] = np.nan
    with pytest.raises(ValueError, match="dirty has NaN"):
        op.dirty2vis(dirty)


@pytest.mark.parametrize("spread", ["rows", "bins"])
def test_points_in_parts_give_the_image_of_one_part(rng, spread):
    """Points beyond one device buffer are held in parts of whole rows, each spread and
    interpolated in turn (forced here with a small part_samples): the same image and
    visibilities as one part, and as ducc0 to epsilon."""
    ducc0 = pytest.importorskip("ducc0", reason="ducc0 is not installed (pip install 'clgrid[test]')")
    uvw, freq, vis, wgt, _ = wide_field(rng, 900)
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    kw = dict(epsilon=1e-9, do_wgridding=True, device=DEVICE, center_x=0.01, **IMAGE)
    whole = clgrid.WGridder(uvw, freq, tuning={"spread": spread}, **kw)
    parts = clgrid.WGridder(uvw, freq, tuning={"spread": spread, "part_samples": 777}, **kw)
    assert len(whole.plans) == 1 and len(parts.plans) == -(-900 // (777 // freq.size))
    assert sum(p.num_kept for p in parts.plans) == whole.plans[0].num_kept
    assert relative_error(parts.vis2dirty(vis, wgt), whole.vis2dirty(vis, wgt)) < 1e-12
    assert relative_error(parts.dirty2vis(dirty, wgt), whole.dirty2vis(dirty, wgt)) < 1e-12
    oracle = ducc0.wgridder.vis2dirty(uvw=uvw, freq=freq, vis=vis, wgt=wgt, epsilon=1e-12, do_wgridding=True,
                                      center_x=0.01, nthreads=2, **IMAGE)
    assert relative_error(parts.vis2dirty(vis, wgt), oracle) < 1e-8


def test_a_grid_beyond_the_largest_buffer_is_refused_by_name(rng, monkeypatch):
    uvw, freq, _, _, _ = wide_field(rng, 50)
    real_facts = wgridding.device_facts

    def small(device):
        return dataclasses.replace(real_facts(device), max_allocation=1 << 16)

    monkeypatch.setattr(wgridding, "device_facts", small)
    with pytest.raises(clgrid.DeviceCapabilityError, match="padded grid of .* needs .* in one buffer"):
        clgrid.WGridder(uvw, freq, epsilon=1e-5, do_wgridding=True, device=DEVICE, **IMAGE)


def test_bins_work_groups_listed_on_the_device_are_the_pieces_of_each_plane(rng):
    """BinsGridding lists each plane's work-groups on the device: (bin, piece) for every piece
    of at most bins_subproblem of the points with a tap on the plane, counted here in numpy
    from the points' first planes and bins."""
    uvw, freq, _, _, _ = wide_field(rng, 3000)
    op = clgrid.WGridder(uvw, freq, epsilon=1e-5, do_wgridding=True, device=DEVICE,
                         tuning={"spread": "bins", "bins_subproblem": 16, "bin_u": 16, "bin_v": 16}, **IMAGE)
    e = op.engine
    points, k, layout = e._parts[0].points, e.spreader.kernels, e.plane_order
    n = points.num_vis
    first = np.empty((n, 4), np.int32)
    cl.enqueue_copy(op.queue, first, points.first)
    jobs = points.extra["jobs"]
    table = np.empty((jobs[-1], 2), np.int32)
    cl.enqueue_copy(op.queue, table, points.extra["subproblems"])
    bins = (first[:, 0] // 16) * layout.bins[1] + first[:, 1] // 16
    for plane in range(k.num_planes):
        on = (first[:, 2] <= plane) & (first[:, 2] > plane - k.width)
        counts = np.bincount(bins[on], minlength=layout.keys_per_plane)
        want = [(b, piece) for b in np.flatnonzero(counts) for piece in range(-(-counts[b] // 16))]
        assert [tuple(t) for t in table[jobs[plane]:jobs[plane + 1]]] == want


def test_sparse_masks_send_only_the_kept_values(rng):
    """With few samples kept the host picks their values in plan order (not every sample
    each call): the image and visibilities of a mask keeping 10% equal those of zero
    weights elsewhere (every sample sent; a geometry of its own: to epsilon), masked
    visibilities come back 0."""
    uvw, freq, vis, wgt, _ = wide_field(rng, 900)
    keep = rng.uniform(size=vis.shape) < 0.1
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    kw = dict(epsilon=1e-9, do_wgridding=True, device=DEVICE, **IMAGE)
    sparse = clgrid.WGridder(uvw, freq, mask=keep, **kw)
    dense = clgrid.WGridder(uvw, freq, **kw)
    assert sparse.engine._parts[0].index is not None and dense.engine._parts[0].index is None
    zeroed = np.where(keep, wgt, 0.0)
    assert relative_error(sparse.vis2dirty(vis, wgt), dense.vis2dirty(vis, zeroed)) < 1e-8
    got = sparse.dirty2vis(dirty, wgt)
    assert np.all(got[~keep] == 0)
    assert relative_error(got, dense.dirty2vis(dirty, zeroed)) < 1e-8


def test_a_ducc0_pool_smaller_than_asked_is_said_once(monkeypatch):
    """`clgrid.imaging.fft.check_ducc0_pool`: where ducc0's thread pool holds fewer threads
    than the host FFT is asked for (Dask's nanny sets OMP_NUM_THREADS=1 in its workers), a
    RuntimeWarning naming DUCC0_NUM_THREADS, once per process; none where it holds
    enough, or where more are asked than the machine has."""
    import warnings

    from clgrid.imaging import fft as imaging_fft
    from conftest import optional

    misc = optional("ducc0.misc", "test")
    monkeypatch.setattr(misc, "thread_pool_size", lambda: 1)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    for workers, said in ((1, False), (2, True), (3, False)):
        monkeypatch.setattr(imaging_fft, "_pool_checked", workers == 3)      # (the third: said already)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            imaging_fft.check_ducc0_pool(workers)
        assert [str(w.message).count("DUCC0_NUM_THREADS") > 0 for w in caught] == ([True] if said else [])
        assert all(w.category is RuntimeWarning for w in caught)
    monkeypatch.setattr(imaging_fft, "_pool_checked", False)
    monkeypatch.setattr(misc, "thread_pool_size", lambda: 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        imaging_fft.check_ducc0_pool(64)                 # (more than the machine's 4: as many as it has)
    assert caught == []
