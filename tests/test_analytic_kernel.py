"""The analytic kernel source (`KernelStack.analytic`) on the seeds' work distributions, on
PoCL: tiled and atomic gridding and gather degridding against a float64 numpy evaluation
of the same kernel, at MeerKAT tracks' positions; an image made through `clgrid.imaging`
against ducc0's; adjointness; what is refused."""

import numpy as np
import pytest

import clgrid
from clgrid.sources.tables import quarter_size
from clgrid.tools import datasets
from clgrid.sources.accuracy import es_kernel, kernel_transform
from clgrid.sources.analytic import AnalyticKernel
from clgrid.tools.stack_accuracy import stack_image_error
from conftest import optional, poison, relative_error

N = 96
# rounding of one footprint's sum and of the device's Horner evaluation, relative to the grid
TOLERANCE = {"single": 2e-6, "double": 1e-13}


def meerkat_tracks(rng, kernels, grid_size=N, ntime=6, nbaseline=120):
    """uvw in metres of a random set of MeerKAT baselines over a random stretch of hour angle,
    two channels, and a cell size that puts the longest on the grid with room for the kernel."""
    layout = datasets.load_layout("meerkat")
    subset = np.sort(rng.choice(len(datasets.baselines(layout)[0]), nbaseline, replace=False))
    start = rng.uniform(-1.0, 0.5)
    uvw = datasets.simulate_uvw(layout, declination=rng.uniform(-1.2, -0.2),
                                hour_angles=np.linspace(start, start + 0.4, ntime), baseline_subset=subset)
    freqs = np.array([1.0e9, 1.4e9])
    uv_max = np.abs(uvw[..., :2]).max() * freqs.max() / clgrid.planning.host.SPEED_OF_LIGHT
    cell = (grid_size // 2 - kernels.max_support - 2) / (grid_size * uv_max)
    return uvw, freqs, cell


def values(rng, shape):
    return rng.normal(size=shape) + 1j * rng.normal(size=shape)


def test_polynomials_are_the_kernel_they_stand_for():
    """The polynomials the device evaluates (here in float64) against exp and sqrt: within
    the kernel's own error, so what is tested on the device is the ES kernel."""
    for epsilon, precision in ((1e-3, "single"), (1e-5, "single"), (1e-9, "double"), (1e-12, "double")):
        k = clgrid.KernelStack.analytic(epsilon, precision)
        d = np.linspace(-k.width / 2, k.width / 2, 4001)
        exact = es_kernel(2 * d / k.width, k.beta) / kernel_transform(0.0, k.width, k.beta)
        assert np.abs(k.weights(d) - exact).max() < 0.1 * epsilon, (epsilon, k.width)
        assert k.accuracy <= epsilon and k.sigma > 1 and k.supports[0] == k.width // 2


@pytest.mark.parametrize("epsilon,precision", [(1e-3, "single"), (1e-9, "double")])
def test_the_accuracy_it_states_is_what_its_image_measures(rng, epsilon, precision):
    """``accuracy`` promises the image's central grid_size / sigma; `stack_image_error`'s
    inner half lies within it (sigma < 2), its whole image does not (the padding)."""
    kernels = clgrid.KernelStack.analytic(epsilon, precision, sigma_max=1.9)
    grid_size = kernels.padded_size(48)
    measured = stack_image_error(kernels, grid_size, 1e-3, num_vis=1000, num_pixels=2000,
                                 seed=int(rng.integers(2**31)))
    assert measured.inner_half <= kernels.accuracy <= epsilon
    assert measured.whole > 100 * epsilon


@pytest.mark.parametrize("method,tuning", [
    ("tiled", {}),                                  # the table's: rows mapping, central box
    ("tiled", {"mapping": "footprint", "window_support": 2, "sort_copies_plan": False}),
    ("atomic", {})])
@pytest.mark.parametrize("precision", ["single", pytest.param("double", marks=pytest.mark.slow)])
def test_gridding_against_the_float64_kernel(queue, rng, method, tuning, precision):
    kernels = clgrid.KernelStack.analytic(1e-5 if precision == "single" else 1e-10, precision)
    uvw, freqs, cell = meerkat_tracks(rng, kernels)
    vis = values(rng, uvw.shape[:-1] + (2, 2))
    weights = rng.uniform(0.1, 1.0, vis.shape)
    gridder = clgrid.Gridder(N, cell, kernels, method=method, device=queue, precision=precision, tuning=tuning)
    poison(gridder, 2)
    got = gridder.grid(uvw, vis, weights, freqs=freqs)
    ref, report = clgrid.reference.grid(uvw, vis, N, cell, kernels, weights, freqs=freqs, return_report=True)
    assert report["gridded"] == vis.size // 2 and np.all(np.isfinite(got))
    assert relative_error(got, ref) < TOLERANCE[precision]
    np.testing.assert_allclose(gridder.last_report["norm"], report["norm"], rtol=1e-6)
    # the exact offsets matter: the same kernel read at its table's nearest samples is far off
    samples = kernels.weights(np.arange(quarter_size(int(kernels.supports[0]), kernels.oversample))
                              / kernels.oversample)
    table = clgrid.KernelStack.from_arrays([np.outer(samples, samples)], kernels.supports, kernels.oversample, 0.0)
    nearest = clgrid.reference.grid(uvw, vis, N, cell, table, weights, freqs=freqs)
    assert relative_error(got, nearest) > 1e3 * TOLERANCE[precision]


@pytest.mark.parametrize("precision", ["single", "double"])
def test_gather_degridding_against_the_float64_kernel(queue, rng, precision):
    kernels = clgrid.KernelStack.analytic(1e-4 if precision == "single" else 1e-12, precision)
    uvw, freqs, cell = meerkat_tracks(rng, kernels)
    complex_dtype = np.complex64 if precision == "single" else np.complex128
    grid = values(rng, (4, N, N)).astype(complex_dtype)
    flags = rng.random(uvw.shape[:-1] + (2,)) < 0.1
    degridder = clgrid.Degridder(N, cell, kernels, method="gather", device=queue, precision=precision)
    out = np.full(uvw.shape[:-1] + (2, 4), np.nan, complex_dtype)      # every sample must be written
    got = degridder.degrid(grid, uvw, flags=flags, freqs=freqs, out=out)
    ref = clgrid.reference.degrid(grid, uvw, N, cell, kernels, flags=flags[..., None], freqs=freqs)
    assert got is out and np.all(got[flags] == 0) and np.all(np.isfinite(got))
    assert relative_error(got, ref) < TOLERANCE[precision]


@pytest.mark.parametrize("method", ["tiled", "atomic"])
def test_gridding_is_the_adjoint_of_gather_degridding(queue, rng, method):
    kernels = clgrid.KernelStack.analytic(1e-9, "double")
    uvw, freqs, cell = meerkat_tracks(rng, kernels)
    gridder = clgrid.Gridder(N, cell, kernels, method=method, device=queue, precision="double")
    degridder = clgrid.Degridder(N, cell, kernels, method="gather", device=gridder.queue, precision="double")
    plan = gridder.plan(uvw, freqs=freqs)
    vis = values(rng, uvw.shape[:-1] + (2, 1))
    grid = values(rng, (1, N, N))
    left = np.vdot(degridder.degrid(grid, plan), vis)
    right = np.vdot(grid, gridder.grid(plan, vis))
    assert abs(left - right) < 1e-12 * abs(right)


@pytest.mark.parametrize("epsilon,precision", [(1e-4, "single"), (1e-9, "double")])
def test_image_and_visibilities_agree_with_ducc0(queue, rng, epsilon, precision):
    """A Gridder grid with the analytic kernel, made into an image by `dirty_image` (which
    divides by the kernel's exact transform), against ducc0's vis2dirty without w; and
    gather's visibilities of a corrected, transformed image against its dirty2vis."""
    ducc0_wgridder = optional("ducc0.wgridder", "test")
    kernels = clgrid.KernelStack.analytic(epsilon, precision)
    npix = 40
    grid_size = kernels.padded_size(npix)
    uvw, freqs, cell = meerkat_tracks(rng, kernels, grid_size)
    uvw = uvw.reshape(-1, 3)
    vis = values(rng, (uvw.shape[0], freqs.size))
    wgt = rng.uniform(0.2, 1.0, vis.shape)
    gridder = clgrid.Gridder(grid_size, cell, kernels, method="tiled", device=queue, precision=precision)
    grid = gridder.grid(uvw, vis[..., None], wgt, freqs=freqs)
    image = clgrid.imaging.dirty_image(grid, kernels, 1.0)[0]          # [m, l] over the padded grid
    lo = grid_size // 2 - npix // 2
    got = image[lo:lo + npix, lo:lo + npix].T                           # ducc0's [x, y]
    ref = ducc0_wgridder.vis2dirty(uvw=uvw, freq=freqs, vis=vis, wgt=wgt, npix_x=npix, npix_y=npix,
                                   pixsize_x=cell, pixsize_y=cell, epsilon=1e-12, do_wgridding=False)
    error = relative_error(got, ref)
    assert error <= epsilon, error
    assert error > epsilon * 1e-3      # a kernel far better than asked would be wasted work
    # the correction matters: the image of the sampled kernel, as for tables, is far off
    sampled = clgrid.imaging.grid_to_image(grid).real[0][lo:lo + npix, lo:lo + npix].T
    assert relative_error(sampled, ref) > 100 * epsilon
    # and back: the image padded, corrected and transformed, degridded by gather, against dirty2vis
    dirty = rng.normal(size=(npix, npix))
    padded = np.zeros((grid_size, grid_size))
    padded[lo:lo + npix, lo:lo + npix] = dirty.T
    padded /= clgrid.imaging.grid_correction(kernels, grid_size)
    model = np.fft.fftshift(np.fft.fft2(np.fft.ifftshift(padded)))[None]
    degridder = clgrid.Degridder(grid_size, cell, kernels, method="gather", device=queue, precision=precision)
    got_vis = degridder.degrid(model.astype(gridder.strategy.complex_dtype), uvw, freqs=freqs)[..., 0]
    ref_vis = ducc0_wgridder.dirty2vis(uvw=uvw, freq=freqs, dirty=dirty, pixsize_x=cell, pixsize_y=cell,
                                       epsilon=1e-12, do_wgridding=False)
    assert relative_error(got_vis, ref_vis) <= epsilon


def test_offsets_planned_on_the_host_are_the_devices(queue, rng):
    """Devices without fp64 plan on the host: the same offsets, bit for bit, where kept."""
    from clgrid.planning.plan import GridGeometry, make_plan

    kernels = clgrid.KernelStack.analytic(1e-5)
    uvw, freqs, cell = meerkat_tracks(rng, kernels)
    geometry = GridGeometry(N, cell, kernels)
    on_device = make_plan(queue, geometry, uvw, freqs, where="device")
    on_host = make_plan(queue, geometry, uvw, freqs, where="host")
    kept = on_host.host().sample
    assert on_device.fraction is not None and kept.size == on_device.num_kept > 0
    np.testing.assert_array_equal(on_device.fraction.get()[kept], on_host.fraction.get()[kept])
    assert np.abs(on_host.fraction.get()[kept].view(np.float64)).max() <= 0.5


def test_a_bad_kernel_and_table_readers_are_refused(queue):
    kernels = clgrid.KernelStack.analytic(1e-4)
    assert kernels.num_planes == 1 and kernels.w_scale == 0 and kernels.evaluated
    with pytest.raises(ValueError, match="width must be an integer >= 2"):
        AnalyticKernel(1, kernels.beta)
    with pytest.raises(ValueError, match="beta must be positive"):
        AnalyticKernel(kernels.width, float("nan"))
    with pytest.raises(ValueError, match="cannot evaluate an analytic kernel source.*'tiled'"):
        clgrid.Gridder(N, 1e-3, kernels, method="moving_window", device=queue)
    with pytest.raises(ValueError, match="cannot evaluate an analytic kernel source.*'gather'"):
        clgrid.Degridder(N, 1e-3, kernels, method="gather", interpolation="linear", device=queue)
    with pytest.raises(clgrid.device.tuning.TuningTableError, match="tile_factor = 1.0 with an analytic"):
        clgrid.Gridder(N, 1e-3, kernels, method="tiled", tuning={"tile_factor": 0.5}, device=queue)
