"""Arguments refused with a clear error naming them, and arrays taken in either byte order
(issue 26, item 7): ``precision="half"`` was a KeyError, a complex ``dirty`` to `WGridder`
numpy's UFuncTypeError, ``--pixsize nan`` "cannot convert float NaN to integer", and
big-endian arrays (what FITS files hold) were refused by every operator."""

import numpy as np
import pytest

import clgrid
from clgrid.imaging.wgridding import choose_geometry
from clgrid.tools import cli

from conftest import random_visibilities, relative_error, wide_field

N, CELL, W_MAX = 64, 4e-3, 100
IMAGE = dict(npix_x=32, npix_y=32, pixsize_x=2e-3, pixsize_y=2e-3)


@pytest.fixture(scope="module")
def stack():
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=W_MAX, num_planes=4,
                                           oversample=4, max_support=8)


def swapped(a):
    """``a`` stored the other way round (big-endian here), with the same values."""
    a = np.asarray(a)
    out = a.astype(a.dtype.newbyteorder(">" if a.dtype.isnative and np.little_endian else "<"))
    assert not out.dtype.isnative and np.array_equal(out, a)
    return out


@pytest.mark.parametrize("precision", ["half", "Single", 32, None])
def test_unknown_precision_named_by_every_operator(rng, stack, queue, precision):
    uvw = rng.uniform(-200, 200, (20, 3))
    with pytest.raises(ValueError, match="precision must be"):
        clgrid.WGridder(uvw, 1e8, 32, 32, 1e-3, 1e-3, 1e-4, precision=precision, device=queue)
    with pytest.raises(ValueError, match="precision must be"):
        choose_geometry(32, 32, 1e-3, 1e-3, 1e-4, True, (0.0, 10.0), 20, precision=precision)
    for operator in (clgrid.Gridder, clgrid.Degridder):
        with pytest.raises(ValueError, match="precision must be"):
            operator(N, CELL, stack, precision=precision, device=queue)


def test_wgridder_refuses_complex_dirty_and_boolean_vis_by_name(rng, queue):
    op = clgrid.WGridder(rng.uniform(-200, 200, (30, 3)), 1e8, 32, 32, 1e-3, 1e-3, 1e-6, device=queue)
    with pytest.raises(TypeError, match=r"dirty must be a real \(float or integer\) array, got dtype complex128"):
        op.dirty2vis(np.zeros((32, 32), complex))
    with pytest.raises(TypeError, match="vis must be a numeric .* got dtype bool"):
        op.vis2dirty(np.ones((30, 1), bool))
    with pytest.raises(TypeError, match="wgt must be a real"):
        op.vis2dirty(np.ones((30, 1), complex), wgt=np.ones((30, 1), complex))
    with pytest.raises(TypeError, match="dirty must be float32 or float64, got complex128"):
        clgrid.dirty2vis(uvw=np.zeros((3, 3)), freq=1e8, dirty=np.zeros((32, 32), complex), pixsize_x=1e-3,
                         pixsize_y=1e-3, epsilon=1e-6, device=queue)


@pytest.mark.parametrize("argument, value", [("--scale", "nan"), ("--scale", "0asec"), ("--epsilon", "nan"),
                                             ("--super-weight", "inf"), ("--scale", "fine")])
def test_cli_refuses_a_non_finite_or_negative_number_by_name(tmp_path, capsys, argument, value):
    """``clgrid image`` (WSClean's options since issue 27: --scale for the old --pixsize)
    names the option, before reading anything."""
    code = cli.main(["image", str(tmp_path / "in.ms"), "-o", str(tmp_path / "out"), argument, value])
    assert code == 2
    assert argument in capsys.readouterr().err


@pytest.mark.parametrize("precision", ["single", "double"])
def test_gridder_and_degridder_take_big_endian_arrays(rng, stack, queue, precision):
    uvw, vis = random_visibilities(rng, 300, N, CELL, W_MAX, npol=2)
    vis = vis.astype(np.complex64 if precision == "single" else np.complex128)
    freqs = np.array([1.0e8, 1.2e8])
    uvw = uvw * 299792458.0 / 1.2e8
    vis = np.repeat(vis[:, None, :], 2, axis=1)
    weights = rng.uniform(0.5, 2, (300, 2)).astype(np.float32)
    flags = rng.random(vis.shape) < 0.1
    gridder = clgrid.Gridder(N, CELL, stack, device=queue, precision=precision, deterministic=True)
    expected = gridder.grid(uvw, vis, weights, flags, freqs)
    got = gridder.grid(swapped(uvw), swapped(vis), swapped(weights), flags, swapped(freqs))
    np.testing.assert_array_equal(got, expected)
    degridder = clgrid.Degridder(N, CELL, stack, device=queue, precision=precision)
    np.testing.assert_array_equal(degridder.degrid(swapped(expected), swapped(uvw), flags, swapped(freqs)),
                                  degridder.degrid(expected, uvw, flags, freqs))


@pytest.mark.parametrize("single", [False, True])
def test_vis2dirty_dirty2vis_and_wgridder_take_big_endian_arrays(rng, queue, single):
    rd = np.float32 if single else np.float64
    uvw, freq, vis, wgt, mask = wide_field(rng, 200, (1.0e8, 1.1e8), uv=800.0, w=100.0,
                                           precision="single" if single else "double", weights=(0.5, 2.0), masked=0.1)
    dirty = rng.normal(size=(32, 32)).astype(rd)

    def same(got, want):
        """Equal but for the order of additions: the "rows" spread's order within a row is
        the device's counting sort's (its atomics'), so two runs may differ in the last
        bits (seen on Intel's CPU runtime); a misread byte order would differ entirely."""
        np.testing.assert_allclose(got, want, rtol=0, atol=64 * np.finfo(want.dtype).eps * np.abs(want).max())

    args = dict(epsilon=1e-4 if single else 1e-9, do_wgridding=True, device=queue, tuning={"spread": "rows"})
    expected = clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, wgt=wgt, mask=mask, **IMAGE, **args)
    got = clgrid.vis2dirty(uvw=swapped(uvw), freq=swapped(freq), vis=swapped(vis), wgt=swapped(wgt),
                           mask=swapped(mask.astype(np.int32)), **IMAGE, **args)
    same(got, expected)
    d2v = dict(pixsize_x=2e-3, pixsize_y=2e-3, **args)
    expected = clgrid.dirty2vis(uvw=uvw, freq=freq, dirty=dirty, wgt=wgt, mask=mask, **d2v)
    got = clgrid.dirty2vis(uvw=swapped(uvw), freq=swapped(freq), dirty=swapped(dirty), wgt=swapped(wgt),
                           mask=mask, **d2v)
    same(got, expected)
    op = clgrid.WGridder(swapped(uvw), swapped(freq), 32, 32, 2e-3, 2e-3, args["epsilon"], True, mask,
                         precision="single" if single else "double", device=queue, tuning={"spread": "rows"})
    same(op.dirty2vis(swapped(dirty), swapped(wgt)), expected)


@pytest.mark.parametrize("weights_dtype", [np.float32, np.float64, None])
def test_single_precision_data_gridded_in_double_keep_double_accuracy(rng, stack, queue, weights_dtype):
    """complex64 visibilities (and float32 weights) in a double-precision Gridder: weighted
    in double, as the float64 reference does (found by tests/test_properties.py: the product
    was formed in float32, 1e-8 from the reference instead of 1e-12)."""
    uvw, vis = random_visibilities(rng, 400, N, CELL, W_MAX, npol=2)
    vis = vis.astype(np.complex64)
    weights = None if weights_dtype is None else rng.uniform(0.1, 3.0, (400,)).astype(weights_dtype)
    gridder = clgrid.Gridder(N, CELL, stack, device=queue, precision="double")
    got = gridder.grid(uvw, vis, weights)
    per_vis = None if weights is None else np.repeat(weights[:, None], 2, axis=1)
    expected = clgrid.reference.grid(uvw, vis, N, CELL, stack, per_vis)
    assert relative_error(got, expected) <= 1e-12
