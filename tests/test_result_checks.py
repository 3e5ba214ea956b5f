"""Overflow is an error on every path (issue 26, item 2): the one check
(`clgrid.operators.checks.check_finite_result`) behind `Gridder`, `Degridder`, both of
the imaging operator's FFT paths ("host": scipy/ducc0 on the host; "mapped": crop,
phases and correction by device kernels) in both directions, and the sums of
`clgrid.dask`.  Finite inputs whose sums leave the precision's range used to come back
as an all-NaN image with only numpy's warnings (complex64 of 3e38, complex128 of 1e307)."""

import numpy as np
import pytest

import clgrid
from clgrid.errors import NonFiniteResultError

IMAGE = dict(npix_x=32, npix_y=32, pixsize_x=1e-3, pixsize_y=1e-3)
PATHS = [{"fft": "host"}, {"fft": "mapped"}]
LARGE = {"single": (np.complex64, 3e38, 1e-4), "double": (np.complex128, 1e307, 1e-9)}


def unit_phases(rng, n):
    """Finite visibilities of magnitude 1 in any precision (scaled to the brink by the caller)."""
    return np.exp(2j * np.pi * rng.random((n, 1)))


@pytest.mark.parametrize("tuning", PATHS, ids=["host-fft", "device-fft"])
@pytest.mark.parametrize("precision", ["single", "double"])
@pytest.mark.parametrize("wgrid", [False, True])
def test_vis2dirty_overflow_is_an_error_on_every_path(rng, device_name, tuning, precision, wgrid):
    dtype, scale, epsilon = LARGE[precision]
    uvw = rng.uniform(-200, 200, (200, 3))
    vis = (unit_phases(rng, 200) * scale).astype(dtype)
    assert np.all(np.isfinite(vis))
    advice = "use complex128 visibilities" if precision == "single" else "scale the visibilities or weights down"
    with np.errstate(all="ignore"), pytest.raises(NonFiniteResultError, match=f"image are inf or NaN .*{advice}"):
        clgrid.vis2dirty(uvw=uvw, freq=1e8, vis=vis, epsilon=epsilon, do_wgridding=wgrid, device=device_name,
                         tuning=tuning, **IMAGE)
    with np.errstate(all="ignore"):   # the same data, scaled into range, image as they should
        image = clgrid.vis2dirty(uvw=uvw, freq=1e8, vis=vis / scale, epsilon=epsilon, do_wgridding=wgrid,
                                 device=device_name, tuning=tuning, **IMAGE)
    assert np.all(np.isfinite(image))


@pytest.mark.parametrize("tuning", PATHS, ids=["host-fft", "device-fft"])
@pytest.mark.parametrize("precision", ["single", "double"])
def test_dirty2vis_overflow_is_an_error_on_every_path(rng, device_name, tuning, precision):
    real = np.float32 if precision == "single" else np.float64
    _, scale, epsilon = LARGE[precision]
    dirty = np.full((32, 32), scale, real)
    with np.errstate(all="ignore"), pytest.raises(NonFiniteResultError, match="are inf or NaN although every "
                                                                             "input was finite"):
        clgrid.dirty2vis(uvw=rng.uniform(-200, 200, (100, 3)), freq=1e8, dirty=dirty, epsilon=epsilon,
                         pixsize_x=1e-3, pixsize_y=1e-3, device=device_name, tuning=tuning, do_wgridding=True)


@pytest.mark.parametrize("tuning", PATHS, ids=["host-fft", "device-fft"])
def test_dirty2vis_refuses_non_finite_dirty_by_name_on_every_path(rng, device_name, tuning):
    dirty = rng.normal(size=(32, 32))
    dirty[3, 4] = np.nan
    op = clgrid.WGridder(rng.uniform(-200, 200, (50, 3)), 1e8, 32, 32, 1e-3, 1e-3, 1e-6, device=device_name,
                         tuning=tuning)
    with pytest.raises(ValueError, match="dirty has NaN or infinite entries"):
        op.dirty2vis(dirty)


def test_dask_sum_of_finite_parts_that_overflows_is_an_error(rng, device_name):
    """Each chunk's image is finite; their sum is not: the client checks what it returns."""
    dask = pytest.importorskip("dask", reason="clgrid.dask needs the dask extra")
    import clgrid.dask as cd
    uvw = np.zeros((40, 3))
    uvw[:, :2] = rng.uniform(-1, 1, (40, 2))           # all near the centre: the image is about the sum
    vis = np.ones((40, 1), np.complex64)
    args = dict(uvw=uvw, freq=1e8, epsilon=1e-4, device=device_name, **IMAGE)
    with dask.config.set(scheduler="synchronous"):
        part = cd.vis2dirty(vis=vis[:20], row_chunks=20, **dict(args, uvw=uvw[:20]))
        scale = 0.7 * float(np.finfo(np.float32).max) / np.abs(part).max()      # one chunk: 0.7 of the range
        with np.errstate(all="ignore"), pytest.raises(NonFiniteResultError, match="image are inf or NaN"):
            cd.vis2dirty(vis=np.concatenate([vis[:20], vis[:20]]) * np.complex64(scale), row_chunks=20,
                         **dict(args, uvw=np.concatenate([uvw[:20], uvw[:20]])))
