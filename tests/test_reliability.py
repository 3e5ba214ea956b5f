"""Nothing comes back silently wrong: checked kernel stacks, overflow and empty input
detected, the documented submodules importable from `clgrid`."""

import subprocess
import sys
import warnings

import numpy as np
import pytest

import clgrid
from clgrid.errors import EmptyInputWarning, NonFiniteResultError

from conftest import poison, random_visibilities

N, CELL = 64, 4e-3


@pytest.fixture(scope="module")
def stack():
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=100, num_planes=4,
                                           oversample=4, max_support=8)


# -- item 1: KernelStack ------------------------------------------------------------

def test_kernel_stack_is_read_only_and_a_copy(stack):
    planes = [np.array(p) for p in stack.planes]
    k = clgrid.KernelStack(tuple(planes), stack.supports, 4, stack.w_scale)
    planes[0][0, 0] = 7.0           # the caller's array, changed after construction
    assert k.planes[0][0, 0] == stack.planes[0][0, 0]
    for array in (*k.planes, k.supports, *stack.planes, stack.supports):
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 0


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_kernel_stack_constructor_refuses_non_finite(stack, bad):
    planes = [np.array(p) for p in stack.planes]
    planes[2][1, 1] = bad
    with pytest.raises(ValueError, match="plane 2 contains NaN or inf"):
        clgrid.KernelStack(tuple(planes), stack.supports, 4, stack.w_scale)


def test_kernel_stack_refuses_supports_beyond_planes_by_name(stack):
    with pytest.raises(ValueError, match=r"supports\[0\]=.* needs plane 0 of at least"):
        clgrid.KernelStack(stack.planes, stack.supports + 2, 4, stack.w_scale)


@pytest.mark.parametrize("oversample", [0, -4, 2.5, "8", True])
def test_oversample_named_in_every_constructor(stack, oversample):
    with pytest.raises(ValueError, match="oversample must be a positive integer"):
        clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=100, num_planes=2,
                                        oversample=oversample)
    with pytest.raises(ValueError, match="oversample must be a positive integer"):
        clgrid.KernelStack(stack.planes, stack.supports, oversample, stack.w_scale)


def test_w_projection_default_support_cap_matches_explicit_cap():
    """The derived default gives the supports the full cap of 72 gives, without its cost."""
    args = dict(grid_size=512, cell_size=5e-4, w_max=600, num_planes=6, oversample=4)
    derived = clgrid.KernelStack.w_projection(**args)
    full = clgrid.KernelStack.w_projection(**args, max_support=72)
    np.testing.assert_array_equal(derived.supports, full.supports)
    assert derived.max_support < 72
    for a, b in zip(derived.planes, full.planes):
        assert np.abs(a - b).max() <= 1e-3 * np.abs(b).max()   # the threshold's accuracy


# -- item 2: overflow ----------------------------------------------------------------

@pytest.mark.parametrize("method", ["atomic", "tiled"])
def test_single_precision_overflow_is_an_error_that_says_use_double(queue, rng, stack, method):
    uvw, vis = random_visibilities(rng, 200, N, CELL, 100)
    # 60 visibilities of 1e38 at the origin, where the w = 0 kernel peaks (about 0.14 a tap):
    # their sum (about 8e38) passes float32's 3.4e38 whatever the seed (at a random point of
    # a random plane the taps could be small enough for it not to: seed 3879035752)
    uvw[:60] = 0.0
    vis[:60] = 1e38
    gridder = clgrid.Gridder(N, CELL, stack, method=method, device=queue)
    with pytest.raises(NonFiniteResultError, match="precision='double'"):
        gridder.grid(uvw, vis)
    double = clgrid.Gridder(N, CELL, stack, method=method, device=queue, precision="double")
    assert np.all(np.isfinite(double.grid(uvw, vis)))


def test_huge_weights_overflow_named(queue, rng, stack):
    uvw, vis = random_visibilities(rng, 50, N, CELL, 100)
    gridder = clgrid.Gridder(N, CELL, stack, device=queue)
    with np.errstate(over="ignore"), \
            pytest.raises(NonFiniteResultError, match=r"reach about .*e\+\d\d.*beyond single precision"):
        gridder.grid(uvw, vis, weights=np.full(vis.shape, 1e30) * 1e10)


def test_double_precision_overflow_named(queue, rng, stack):
    uvw, vis = random_visibilities(rng, 50, N, CELL, 100)
    gridder = clgrid.Gridder(N, CELL, stack, device=queue, precision="double")
    with np.errstate(over="ignore"), pytest.raises(NonFiniteResultError, match="double precision holds"):
        gridder.grid(uvw, vis * 1e300, weights=np.full(vis.shape, 1e10))


def test_degridding_overflow_named(queue, rng, stack):
    uvw, _ = random_visibilities(rng, 50, N, CELL, 100)
    grid = np.full((1, N, N), 1e39, np.complex128)      # finite, but not in single precision
    degridder = clgrid.Degridder(N, CELL, stack, device=queue)
    with np.errstate(over="ignore"), pytest.raises(NonFiniteResultError, match="precision='double'"):
        degridder.degrid(grid, uvw)


def test_count_nonfinite_counts_exactly(queue, rng):
    import pyopencl as cl
    from clgrid.operators.checks import count_nonfinite
    values = rng.normal(size=100_003).astype(np.float32)
    bad = rng.choice(values.size, 37, replace=False)
    values[bad[:20]] = np.inf
    values[bad[20:]] = np.nan
    buffer = cl.Buffer(queue.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=values)
    assert count_nonfinite(queue, buffer, values.size, np.float32) == 37
    assert count_nonfinite(queue, buffer, int(bad.min()), np.float32) == 0


# -- item 3: empty input ---------------------------------------------------------------

@pytest.mark.parametrize("case", ["flagged", "zero_weights"])
def test_empty_input_gives_zero_grid_and_image_with_a_warning(queue, rng, stack, case):
    uvw, vis = random_visibilities(rng, 100, N, CELL, 100, npol=2)
    kwargs = {"flags": np.ones(vis.shape, bool)} if case == "flagged" else {"weights": np.zeros(vis.shape)}
    gridder = clgrid.Gridder(N, CELL, stack, device=queue)
    poison(gridder, 2)
    with pytest.warns(EmptyInputWarning, match="zero"):
        grid, report = gridder.grid(uvw, vis, return_report=True, **kwargs)
    assert np.all(grid == 0)
    with pytest.warns(EmptyInputWarning, match=r"polarisations \[0, 1\]"):
        image = clgrid.imaging.dirty_image(grid, stack, report["norm"])
    assert image.shape == (2, N, N) and np.all(image == 0)


def test_one_empty_polarisation_keeps_the_other_image(queue, rng, stack):
    uvw, vis = random_visibilities(rng, 100, N, CELL, 100, npol=2)
    flags = np.zeros(vis.shape, bool)
    flags[:, 1] = True
    grid, report = None, None
    with pytest.warns(EmptyInputWarning, match=r"polarisations \[1\]"):
        grid, report = clgrid.Gridder(N, CELL, stack, device=queue).grid(uvw, vis, flags=flags,
                                                                         return_report=True)
    with pytest.warns(EmptyInputWarning):
        image = clgrid.imaging.dirty_image(grid, stack, report["norm"])
    assert np.all(np.isfinite(image)) and np.all(image[1] == 0) and np.abs(image[0]).max() > 0


def test_empty_degridding_warns_and_gives_zeros(queue, rng, stack):
    uvw, _ = random_visibilities(rng, 20, N, CELL, 100)
    grid = rng.normal(size=(1, N, N)) + 0j
    with pytest.warns(EmptyInputWarning, match="no visibility was degridded"):
        vis = clgrid.Degridder(N, CELL, stack, device=queue).degrid(grid, uvw, flags=np.ones((20, 1), bool))
    assert np.all(vis == 0)


def test_ordinary_gridding_does_not_warn_empty(queue, rng, stack):
    uvw, vis = random_visibilities(rng, 100, N, CELL, 100)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyInputWarning)
        clgrid.Gridder(N, CELL, stack, device=queue).grid(uvw, vis)


# -- item 7: submodules ---------------------------------------------------------------

def test_import_clgrid_exposes_documented_submodules():
    code = ("import clgrid; mods = [clgrid.imaging.dirty_image, clgrid.io.read_measurement, clgrid.reference.grid,"
            " clgrid.sources.interpolation, clgrid.planning.baseline_order.to_baseline_order]; import sys;"
            " print('pyuvdata' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", "clgrid.io must load pyuvdata only when reading"
