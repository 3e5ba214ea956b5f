"""The atomic gridder on PoCL against the float64 reference."""

import numpy as np
import pytest

import clgrid

from conftest import poison, random_visibilities, relative_error

N, CELL = 128, 2e-3
TOLERANCE = {"single": 1e-5, "double": 1e-12}


@pytest.fixture(scope="module")
def stack():
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=300, num_planes=8,
                                           oversample=8, max_support=12)


@pytest.mark.parametrize("precision", ["single", "double"])
@pytest.mark.parametrize("npol", [1, 2, 4])
def test_atomic_matches_reference(queue, rng, stack, precision, npol):
    uvw, vis = random_visibilities(rng, 1500, N, CELL, 300, npol=npol)
    weights = rng.uniform(0.1, 3.0, vis.shape)
    flags = rng.random(vis.shape) < 0.1
    gridder = clgrid.Gridder(N, CELL, stack, method="atomic", device=queue, precision=precision)
    poison(gridder, npol)
    out, report = gridder.grid(uvw, vis, weights=weights, flags=flags, return_report=True)
    ref, ref_report = clgrid.reference.grid(uvw, vis, N, CELL, stack, weights=weights, flags=flags,
                                            return_report=True)
    assert out.dtype == (np.complex64 if precision == "single" else np.complex128)
    assert out.shape == (npol, N, N)
    assert np.all(np.isfinite(out))
    assert relative_error(out, ref) <= TOLERANCE[precision]
    np.testing.assert_allclose(report["norm"], ref_report["norm"], rtol=1e-12)
    assert report["gridded"] == ref_report["gridded"] > 1000


@pytest.mark.parametrize("precision", ["single", "double"])
def test_atomic_with_channels_and_baseline_time_axes(queue, rng, stack, precision):
    freqs = np.array([1.10e8, 1.25e8, 1.40e8, 1.55e8])
    nbl, ntime = 30, 12
    uvw = np.column_stack([rng.uniform(-60, 60, (nbl * ntime, 2)),
                           rng.uniform(-300, 300, nbl * ntime)]).reshape(nbl, ntime, 3)
    vis = rng.normal(size=(nbl, ntime, 4, 2)) + 1j * rng.normal(size=(nbl, ntime, 4, 2))
    gridder = clgrid.Gridder(N, CELL, stack, device=queue, precision=precision)
    poison(gridder, 2)
    out = gridder.grid(uvw, vis, freqs=freqs)
    ref = clgrid.reference.grid(uvw, vis, N, CELL, stack, freqs=freqs)
    assert relative_error(out, ref) <= TOLERANCE[precision]


def test_repeated_calls_start_from_a_zero_grid(queue, rng, stack):
    gridder = clgrid.Gridder(N, CELL, stack, device=queue)
    for _ in range(2):
        uvw, vis = random_visibilities(rng, 400, N, CELL, 300)
        ref = clgrid.reference.grid(uvw, vis, N, CELL, stack)
        assert relative_error(gridder.grid(uvw, vis), ref) <= 1e-5


def test_all_flagged_gives_zero_grid_and_dropped_are_reported(queue, rng, stack):
    gridder = clgrid.Gridder(N, CELL, stack, device=queue, on_dropped="ignore")
    uvw, vis = random_visibilities(rng, 50, N, CELL, 300)
    poison(gridder, 1)
    out = gridder.grid(uvw, vis, flags=np.ones(vis.shape, bool))
    assert not np.any(out)
    assert gridder.last_report["flagged"] == 50
    uvw[:5, 0] = 1e9
    gridder.grid(uvw, vis)
    assert gridder.last_report["off_grid"] == 5 and gridder.last_report["gridded"] == 45


def test_constructor_refuses_bad_arguments(queue, stack):
    with pytest.raises(ValueError, match="unknown method"):
        clgrid.Gridder(N, CELL, stack, method="magic", device=queue)
    with pytest.raises(ValueError, match="precision"):
        clgrid.Gridder(N, CELL, stack, device=queue, precision="half")
    with pytest.raises(TypeError, match="kernels"):
        clgrid.Gridder(N, CELL, np.zeros((3, 3)), device=queue)
    with pytest.raises(ValueError, match="unknown tuning parameter 'wg_w'"):
        clgrid.Gridder(N, CELL, stack, method="atomic", device=queue, tuning={"wg_w": 3})
    with pytest.raises(clgrid.device.tuning.TuningTableError, match="wg_u must be int"):
        clgrid.Gridder(N, CELL, stack, method="atomic", device=queue, tuning={"wg_u": 3.5})
    with pytest.raises(clgrid.DeviceCapabilityError, match="GiB"):
        clgrid.Gridder(1 << 20, CELL, stack, device=queue)


def test_tuning_override_changes_the_launch_not_the_result(queue, rng, stack):
    uvw, vis = random_visibilities(rng, 500, N, CELL, 300)
    ref = clgrid.reference.grid(uvw, vis, N, CELL, stack)
    gridder = clgrid.Gridder(N, CELL, stack, method="atomic", device=queue, tuning={"wg_u": 8, "wg_v": 2})
    assert relative_error(gridder.grid(uvw, vis), ref) <= 1e-5
