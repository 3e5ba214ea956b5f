"""The w-gridding operator's planning (clgrid.planning.stacking): on the device, bit-identical to
the float64 host planning; the host path of devices without fp64 gives the same images."""

import dataclasses
import os

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid.planning import stacking as wgrid_plan
from clgrid.imaging import wgridding
from clgrid.device.runtime import get_queue
from conftest import relative_error
from test_vis2dirty import IMAGE, wide_field

DEVICE = os.environ.get("CLGRID_TEST_DEVICE", "pocl")


def download(queue, buffer, shape, dtype):
    out = np.empty(shape, dtype)
    if out.size:
        cl.enqueue_copy(queue, out, buffer).wait()
    return out


def device_and_host(op, uvw, freq, keep, signs, double):
    """The operator's geometry planned again on the device and on the host."""
    g, layout, q = op.geometry, op.layout, op.queue
    scale = freq / wgridding.SPEED_OF_LIGHT
    plan = wgrid_plan.plan_points(q, uvw, scale, keep, signs, g, layout, g.do_wgridding, double)
    host = wgrid_plan.plan_on_host(uvw, scale, keep, signs, g, layout, g.do_wgridding)
    real = np.float64 if double else np.float32
    n = plan.num_vis
    got = dict(first=download(q, plan.first, (n, 4), np.int32), frac=download(q, plan.frac, (n, 4), real),
               src=download(q, plan.src, n, np.int32),
               starts=download(q, plan.starts, len(host["starts"]) + 1, np.int32)[:-1])
    if plan.phase is not None:
        got["phase"] = download(q, plan.phase, n, np.complex128 if double else np.complex64)
    return plan, got, host


@pytest.mark.parametrize("spread,double,wgrid", [("rows", True, True), ("bins", False, True), ("bins", True, False)])
def test_device_planning_is_bit_identical_to_host(rng, spread, double, wgrid):
    uvw, freq, _, _ = wide_field(rng, nrow=3000)
    # points exactly on the rounding boundaries: first taps at whole cells and planes
    op = clgrid.WGridder(uvw, freq, epsilon=1e-5, do_wgridding=wgrid, device=DEVICE, tuning={"spread": spread},
                         center_x=0.01, flip_v=True, precision="double" if double else "single", **IMAGE)
    g = op.geometry
    cu, cv = g.cells_per_wavelength
    k = np.arange(200)
    uvw[k, 0] = (rng.integers(-40, 40, k.size) + g.kernel.support / 2) / cu * wgridding.SPEED_OF_LIGHT / freq[0]
    uvw[k, 1] = (rng.integers(-40, 40, k.size) + 0.5) / cv * wgridding.SPEED_OF_LIGHT / freq[0]
    keep = rng.uniform(size=(uvw.shape[0], freq.size)) > 0.2
    signs = (1.0, -1.0, 1.0)
    plan, got, host = device_and_host(op, uvw, freq, keep, signs, double)
    assert plan.planned_on == "device" and plan.num_vis == np.count_nonzero(keep)
    assert np.array_equal(got["starts"], host["starts"])
    # within a key the device's order is the atomics' order: compare sorted by source
    mine, theirs = np.argsort(got["src"]), np.argsort(host["src"])
    assert np.array_equal(got["src"][mine], host["src"][theirs])
    assert np.array_equal(got["first"][mine], host["first"][theirs])
    real = np.float64 if double else np.float32
    assert np.array_equal(got["frac"][mine], host["frac"][theirs].astype(real))
    if host["phase"] is not None:
        assert np.abs(got["phase"][mine] - host["phase"][theirs]).max() < (1e-12 if double else 1e-6)
    assert (host["phase"] is None) == (plan.phase is None)
    assert np.any(host["src"] < 0) == wgrid            # points moved to -uvw with w-gridding only


def test_nan_uvw_is_refused_unless_masked(rng):
    uvw, freq, vis, _ = wide_field(rng, nrow=400)
    uvw[7, 2] = np.nan
    with pytest.raises(ValueError, match="uvw has NaN"):
        clgrid.WGridder(uvw, freq, epsilon=1e-5, do_wgridding=True, device=DEVICE, **IMAGE)
    mask = np.ones((uvw.shape[0], freq.size), np.uint8)
    mask[7] = 0
    image = clgrid.WGridder(uvw, freq, epsilon=1e-5, do_wgridding=True, device=DEVICE, mask=mask,
                            **IMAGE).vis2dirty(vis)
    assert np.all(np.isfinite(image))


def test_without_fp64_the_host_plans_and_sends_the_pixels(rng, monkeypatch):
    """A device without fp64 (faked): host planning, host per-pixel phases and correction
    with the device FFT, the same image and visibilities as the fp64 path."""
    pytest.importorskip("pyvkfft", reason="the device FFT path needs pyvkfft (the vkfft extra)")
    uvw, freq, vis, wgt = wide_field(rng, nrow=800)
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    kw = dict(epsilon=1e-5, do_wgridding=True, device=DEVICE, precision="single", center_y=0.02,
              tuning={"fft": "vkfft", "spread": "bins"}, **IMAGE)
    full = clgrid.WGridder(uvw, freq, **kw)
    real_facts = wgrid_plan.device_facts

    def no_fp64(device):
        return dataclasses.replace(real_facts(device), fp64=False)

    monkeypatch.setattr(wgrid_plan, "device_facts", no_fp64)
    monkeypatch.setattr(wgridding, "device_facts", no_fp64)
    reduced = clgrid.WGridder(uvw, freq, **kw)
    assert reduced.plan.planned_on == "host" and full.plan.planned_on == "device"
    vis, wgt = vis.astype(np.complex64), wgt.astype(np.float32)
    assert relative_error(reduced.vis2dirty(vis, wgt), full.vis2dirty(vis, wgt)) < 1e-5
    assert relative_error(reduced.dirty2vis(dirty, wgt), full.dirty2vis(dirty, wgt)) < 1e-5
