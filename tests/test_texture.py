"""Texture-interpolated gridding and degridding on PoCL against the float64 interpolated
reference, with both samplers, the fallback, the adjoint and the point of it all."""

import dataclasses

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid import reference
from clgrid.planning.host import flatten_samples, plan_visibilities
from clgrid.strategies import base
from clgrid.tools.texture_precision import interpolation_precision

from conftest import poison, random_visibilities, relative_error

N, CELL, W_MAX = 128, 2e-3, 300
SAMPLERS = ("software", "image")
TOLERANCE = 1e-5    # fp32 accumulation and float32 positions


def sampler_bound(queue) -> float:
    """What the image sampler may add to the error on this kind of device: CPU runtimes
    interpolate in float (PoCL and Intel's: ~1e-7 measured), GPUs with 8-bit fractions of a
    texel (the H100: 4.7e-4); more than 2^-8 is a broken sampler, not a coarse one."""
    return TOLERANCE if queue.device.type & cl.device_type.CPU else 2.0 ** -8


@pytest.fixture(scope="module")
def tolerance(queue):
    """Per sampler: the image sampler is allowed three times the error it adds on this device,
    once that error is within what the kind of device allows (test_interpolation_precision)."""
    measured = interpolation_precision(queue, num_vis=300, grid_size=64)
    image = max(measured[d].get("image_vs_software", 0.0) for d in ("grid", "degrid"))
    assert image <= sampler_bound(queue), f"the image sampler adds {image:.1e} on {queue.device.name}"
    return {"software": TOLERANCE, "image": max(TOLERANCE, 3 * image)}


@pytest.fixture(scope="module")
def stack():
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=W_MAX, num_planes=6,
                                           oversample=4, max_support=12)


def inner(a, b):
    return np.vdot(a.ravel(), b.ravel())


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("npol", [1, pytest.param(4, marks=pytest.mark.slow)])
def test_texture_gridding_matches_interpolated_reference(queue, rng, stack, tolerance, sampler, npol):
    uvw, vis = random_visibilities(rng, 800, N, CELL, W_MAX, npol=npol)
    weights = rng.uniform(0.1, 3.0, vis.shape)
    flags = rng.random(vis.shape) < 0.1
    gridder = clgrid.Gridder(N, CELL, stack, method="atomic", interpolation="linear", device=queue, tuning={"sampler": sampler})
    assert gridder.strategy.tuning["sampler"] == sampler
    poison(gridder, npol)
    out, report = gridder.grid(uvw, vis, weights=weights, flags=flags, return_report=True)
    ref, ref_report = reference.grid(uvw, vis, N, CELL, stack, weights=weights, flags=flags,
                                     return_report=True, interpolation="linear")
    assert np.all(np.isfinite(out))
    assert relative_error(out, ref) <= tolerance[sampler]
    np.testing.assert_allclose(report["norm"], ref_report["norm"], rtol=1e-12)
    assert report["gridded"] == ref_report["gridded"] > 500


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_texture_degridding_matches_interpolated_reference(queue, rng, stack, tolerance, sampler):
    uvw, _ = random_visibilities(rng, 700, N, CELL, W_MAX)
    grid = rng.normal(size=(2, N, N)) + 1j * rng.normal(size=(2, N, N))
    degridder = clgrid.Degridder(N, CELL, stack, method="gather", interpolation="linear", device=queue, tuning={"sampler": sampler})
    out = degridder.degrid(grid, uvw)
    ref = reference.degrid(grid, uvw, N, CELL, stack, interpolation="linear")
    assert relative_error(out, ref) <= tolerance[sampler]


def test_software_sampler_in_double_precision(queue, rng, stack):
    """Positions travel in float32, so double precision is bounded by them, not by fp32 sums."""
    uvw, vis = random_visibilities(rng, 500, N, CELL, W_MAX)
    gridder = clgrid.Gridder(N, CELL, stack, method="atomic", interpolation="linear", device=queue, precision="double",
                             tuning={"sampler": "software"})
    ref = reference.grid(uvw, vis, N, CELL, stack, interpolation="linear")
    assert relative_error(gridder.grid(uvw, vis), ref) <= 1e-6


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_texture_gridder_and_degridder_are_adjoint(queue, rng, stack, sampler):
    uvw, vis = random_visibilities(rng, 600, N, CELL, W_MAX, npol=2)
    grid = rng.normal(size=(2, N, N)) + 1j * rng.normal(size=(2, N, N))
    tuning = {"sampler": sampler}
    gridded = clgrid.Gridder(N, CELL, stack, method="atomic", interpolation="linear", device=queue, tuning=tuning).grid(uvw, vis)
    degridded = clgrid.Degridder(N, CELL, stack, method="gather", interpolation="linear", device=queue, tuning=tuning).degrid(grid, uvw)
    lhs, rhs = inner(degridded, vis), inner(grid, gridded)
    assert abs(lhs - rhs) / abs(rhs) < 1e-5


def test_reference_norm_is_the_sum_of_interpolated_weights(rng, stack):
    uvw, vis = random_visibilities(rng, 300, N, CELL, W_MAX)
    plan = plan_visibilities(flatten_samples(uvw, vis), N, CELL, stack, interpolation="linear")
    total = sum(c.real.sum() for _, _, c in reference._footprint_chunks(plan, stack))
    np.testing.assert_allclose(plan.norm, [total], rtol=1e-12)


def test_interpolated_weight_sums_are_made_once_per_stack(rng, stack, monkeypatch):
    """Plans of later calls read the tables kept for the stack: no new cube, same arrays."""
    from clgrid.sources import interpolation

    uvw, vis = random_visibilities(rng, 300, N, CELL, W_MAX)
    first = plan_visibilities(flatten_samples(uvw, vis), N, CELL, stack, interpolation="linear")
    supports = np.unique(first.support).tolist()
    tables = [interpolation.interpolated_weight_sums(stack, s) for s in supports]
    monkeypatch.setattr(type(stack), "cube", lambda self: pytest.fail("the weight sums were made again"))
    again = plan_visibilities(flatten_samples(uvw, vis), N, CELL, stack, interpolation="linear")
    np.testing.assert_array_equal(again.norm, first.norm)
    assert all(interpolation.interpolated_weight_sums(stack, s) is t for s, t in zip(supports, tables))
    assert not tables[0].flags.writeable


def test_footprint_covers_the_larger_support_of_the_two_planes(stack):
    uvw = np.array([[0.0, 0.0, stack.plane_w(2) + 1e-3]])      # just above plane 2: planes 2 and 3
    plan = plan_visibilities(flatten_samples(uvw, np.ones((1, 1), complex)), N, CELL, stack,
                             interpolation="linear")
    assert plan.support[0] == max(stack.supports[2], stack.supports[3])
    on_plane = plan_visibilities(flatten_samples(uvw * [1, 1, 0] + [0, 0, stack.plane_w(2)],
                                                 np.ones((1, 1), complex)), N, CELL, stack,
                                 interpolation="linear")
    assert on_plane.support[0] == stack.supports[2]


def test_software_sampler_when_asked(queue, stack):
    gridder = clgrid.Gridder(N, CELL, stack, method="atomic", interpolation="linear", device=queue, tuning={"sampler": "software"})
    assert gridder.strategy.image_format is None


def test_falls_back_to_software_without_images(queue, rng, stack, monkeypatch):
    real_facts = base.device_facts
    monkeypatch.setattr(base, "device_facts", lambda d: dataclasses.replace(real_facts(d), images=False))
    with pytest.warns(UserWarning, match="no image support.*software"):
        gridder = clgrid.Gridder(N, CELL, stack, method="atomic", interpolation="linear", device=queue)
    with pytest.warns(UserWarning, match="software"):
        degridder = clgrid.Degridder(N, CELL, stack, method="gather", interpolation="linear", device=queue)
    assert gridder.strategy.tuning["sampler"] == degridder.strategy.tuning["sampler"] == "software"
    uvw, vis = random_visibilities(rng, 300, N, CELL, W_MAX)
    poison(gridder, 1)
    ref = reference.grid(uvw, vis, N, CELL, stack, interpolation="linear")
    assert relative_error(gridder.grid(uvw, vis), ref) <= TOLERANCE


def test_unknown_sampler_is_refused(queue, stack):
    with pytest.raises(ValueError, match="sampler"):
        clgrid.Gridder(N, CELL, stack, method="atomic", interpolation="linear", device=queue, tuning={"sampler": "bicubic"})


def test_interpolation_precision(queue):
    result = interpolation_precision(queue, num_vis=300, grid_size=64)
    assert result["image_sampler"] or not queue.device.image_support
    for direction in ("grid", "degrid"):
        assert result[direction]["software_vs_reference"] < 1e-5
        if result["image_sampler"]:
            assert result[direction]["image_vs_software"] <= sampler_bound(queue)


@pytest.mark.slow
def test_linear_fine_table_beats_nearest_coarse_table(rng):
    """Against a dense table (oversample 32, 33 planes), interpolating a small table
    (oversample 4, 5 planes) errs clearly less than looking up its nearest sample (about
    half as much: the w-axis, 5 planes, dominates both)."""
    def stack(oversample, planes):
        return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=W_MAX, num_planes=planes,
                                               oversample=oversample, max_support=12)
    uvw, vis = random_visibilities(rng, 300, N, CELL, W_MAX)
    exact = reference.grid(uvw, vis, N, CELL, stack(32, 33), interpolation="linear")
    small = stack(4, 5)
    nearest = reference.grid(uvw, vis, N, CELL, small)
    linear = reference.grid(uvw, vis, N, CELL, small, interpolation="linear")
    assert relative_error(linear, exact) < 0.7 * relative_error(nearest, exact)


def baseline_tracks(rng, nbaseline, ntime, npol, reach_cells=45, turn=1.2):
    """Arcs in wavelengths (nbaseline, ntime, 3), |w| swinging through the w-planes so a
    baseline's footprint support changes along it, and visibilities (nbaseline, ntime, npol)."""
    du = 1.0 / (N * CELL)
    angle = rng.uniform(0, 2 * np.pi, (nbaseline, 1)) + np.linspace(0, turn, ntime)
    radius = rng.uniform(0.15, 1.0, (nbaseline, 1)) * reach_cells * du
    ratio = rng.uniform(0.3, 1.0, (nbaseline, 1))
    w = W_MAX * rng.uniform(0.3, 1.0, (nbaseline, 1)) * np.sin(angle + rng.uniform(0, np.pi, (nbaseline, 1)))
    uvw = np.stack([radius * np.cos(angle), ratio * radius * np.sin(angle), w], axis=-1)
    vis = rng.normal(size=(nbaseline, ntime, npol)) + 1j * rng.normal(size=(nbaseline, ntime, npol))
    return uvw, vis


def test_moving_window_takes_linear_interpolation():
    assert "moving_window" in clgrid.Gridder.methods
    assert clgrid.strategies.strategy_label("grid", "moving_window", "linear") == "texture_moving_window"


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("npol", [1, pytest.param(4, marks=pytest.mark.slow)])
def test_texture_moving_window_matches_interpolated_reference(queue, rng, stack, tolerance, sampler, npol):
    """Baseline-ordered tracks whose footprint support changes along a baseline."""
    nbaseline, ntime = 10, 40
    uvw, vis = baseline_tracks(rng, nbaseline, ntime, npol)
    weights = rng.uniform(0.1, 3.0, vis.shape)
    flags = rng.random(vis.shape) < 0.1
    plan = plan_visibilities(flatten_samples(uvw, vis, weights=weights, flags=flags), N, CELL, stack,
                             on_dropped="ignore", interpolation="linear")
    baseline = plan.sample // ntime
    changing = [np.unique(plan.support[baseline == b]).size > 1 for b in range(nbaseline)]
    assert sum(changing) >= 5, "the tracks must cross footprint supports for this test to mean anything"

    gridder = clgrid.Gridder(N, CELL, stack, method="moving_window", interpolation="linear", device=queue,
                             tuning={"sampler": sampler}, on_dropped="ignore")
    assert gridder.strategy.tuning["sampler"] == sampler
    poison(gridder, npol)
    out, report = gridder.grid(uvw, vis, weights=weights, flags=flags, return_report=True)
    ref, ref_report = reference.grid(uvw, vis, N, CELL, stack, weights=weights, flags=flags,
                                     on_dropped="ignore", return_report=True, interpolation="linear")
    assert np.all(np.isfinite(out)), "a cell was never written (NaN poison survived)"
    assert relative_error(out, ref) <= tolerance[sampler]
    np.testing.assert_allclose(report["norm"], ref_report["norm"], rtol=1e-12)
    assert report["gridded"] == ref_report["gridded"] > 300


@pytest.mark.parametrize("tuning", [
    {"sampler": "software", "work_group_size": 16, "coarsen_u": 1, "coarsen_v": 3, "batch": 7,
     "chunk_visibilities": 5},
    {"sampler": "image", "work_group_size": 32, "coarsen_u": 3, "coarsen_v": 1, "batch": 16}])
def test_texture_moving_window_tuning_changes_the_launch_not_the_result(queue, rng, stack, tolerance, tuning):
    """Short chunks, small batches and odd coarsening: windows split across tiles and batches."""
    uvw, vis = baseline_tracks(rng, 6, 30, 2)
    gridder = clgrid.Gridder(N, CELL, stack, method="moving_window", interpolation="linear", device=queue, tuning=tuning,
                             on_dropped="ignore")
    poison(gridder, 2)
    ref = reference.grid(uvw, vis, N, CELL, stack, on_dropped="ignore", interpolation="linear")
    assert relative_error(gridder.grid(uvw, vis), ref) <= tolerance[tuning["sampler"]]


def test_texture_moving_window_in_double_precision(queue, rng, stack):
    uvw, vis = baseline_tracks(rng, 6, 30, 1)
    gridder = clgrid.Gridder(N, CELL, stack, method="moving_window", interpolation="linear", device=queue, precision="double",
                             tuning={"sampler": "software"}, on_dropped="ignore")
    ref = reference.grid(uvw, vis, N, CELL, stack, on_dropped="ignore", interpolation="linear")
    assert relative_error(gridder.grid(uvw, vis), ref) <= 1e-6
