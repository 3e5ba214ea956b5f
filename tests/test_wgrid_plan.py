"""The w-stacking planning (clgrid.planning.plan.plan_stacked): on the device, bit-identical to
the float64 host planning (clgrid.planning.host.stacked_positions); its arrangement by rows and
bins (clgrid.planning.stacking.arrange) the same on the device as on the host but for the order
within a key; the host path of devices without fp64 gives the same images."""

import dataclasses
import os

import numpy as np
import pyopencl as cl
import pytest

import clgrid
from clgrid.imaging import engine as wgridding
from clgrid.planning import plan as planning
from clgrid.planning import stacking
from clgrid.planning.host import SPEED_OF_LIGHT, stacked_positions
from conftest import relative_error, wide_field
from test_vis2dirty import IMAGE

DEVICE = os.environ.get("CLGRID_TEST_DEVICE", "pocl")


def download(queue, buffer, shape, dtype):
    out = np.empty(shape, dtype)
    if out.size:
        cl.enqueue_copy(queue, out, buffer).wait()
    return out


@pytest.mark.parametrize("spread,double,wgrid", [("rows", True, True), ("bins", False, True), ("bins", True, False)])
def test_device_planning_is_bit_identical_to_host(rng, spread, double, wgrid):
    uvw, freq, _, _, _ = wide_field(rng, 3000)
    op = clgrid.WGridder(uvw, freq, epsilon=1e-5, do_wgridding=wgrid, device=DEVICE, tuning={"spread": spread},
                         center_x=0.01, flip_v=True, precision="double" if double else "single", **IMAGE)
    g, q = op.geometry, op.queue
    cu, cv = g.cells_per_wavelength
    k = np.arange(200)
    # points exactly on the rounding boundaries: first taps at whole cells and planes
    uvw[k, 0] = (rng.integers(-40, 40, k.size) + g.kernel.support / 2) / cu * SPEED_OF_LIGHT / freq[0]
    uvw[k, 1] = (rng.integers(-40, 40, k.size) + 0.5) / cv * SPEED_OF_LIGHT / freq[0]
    keep = rng.uniform(size=(uvw.shape[0], freq.size)) > 0.2
    signs, scale = (1.0, -1.0, 1.0), freq / SPEED_OF_LIGHT
    plan = planning.plan_stacked(q, g, uvw, scale, keep, signs, g.do_wgridding, double)
    host = stacked_positions(uvw, scale, keep, signs, g, g.do_wgridding)
    n = np.count_nonzero(keep)
    assert plan.planned_on == "device" and plan.num_kept == n and plan.counts["flagged"] == keep.size - n
    real = np.float64 if double else np.float32
    assert np.array_equal(plan.sample.get(), host["sample"])                  # the caller's order, compacted
    assert np.array_equal(plan.packed.get(), host["packed"])
    assert np.array_equal(plan.fraction.get(), host["fraction"].astype(real))
    assert (host["phase"] is None) == (plan.phase is None)
    if host["phase"] is not None:
        assert np.abs(plan.phase.get() - host["phase"]).max() < (1e-12 if double else 1e-6)
    assert np.any(host["packed"][:, 3] < 0) == wgrid        # points moved to -uvw with w-gridding only

    # arranged by key: the same runs on the device as on the host, the same points in each
    layout = op.engine.plane_order
    device = stacking.arrange(plan, layout)
    ordered = stacking.arrange(plan, layout, stable=True)
    num_keys = g.num_planes * layout.keys_per_plane + 1
    assert np.array_equal(download(q, device.starts, num_keys, np.int32), download(q, ordered.starts, num_keys, np.int32))
    assert np.array_equal(device.plane_start, ordered.plane_start)
    fields = (("first", (n, 4), np.int32), ("src", n, np.int32), ("frac", (n, 4), real))
    got = {name: download(q, getattr(device, name), shape, dtype) for name, shape, dtype in fields}
    want = {name: download(q, getattr(ordered, name), shape, dtype) for name, shape, dtype in fields}
    keys = layout.keys(want["first"][:, [0, 1, 2]])
    assert np.all(np.diff(keys) >= 0)                                       # the stable order is by key
    mine, theirs = np.argsort(got["src"]), np.argsort(want["src"])          # within a key: the atomics' order
    for name in got:
        assert np.array_equal(got[name][mine], want[name][theirs])


def test_nan_uvw_is_refused_unless_masked(rng):
    uvw, freq, vis, _, _ = wide_field(rng, 400)
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
    uvw, freq, vis, wgt, _ = wide_field(rng, 800)
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    kw = dict(epsilon=1e-5, do_wgridding=True, device=DEVICE, precision="single", center_y=0.02,
              tuning={"fft": "vkfft", "spread": "bins"}, **IMAGE)
    full = clgrid.WGridder(uvw, freq, **kw)
    real_facts = planning.device_facts

    def no_fp64(device):
        return dataclasses.replace(real_facts(device), fp64=False)

    monkeypatch.setattr(planning, "device_facts", no_fp64)
    monkeypatch.setattr(wgridding, "device_facts", no_fp64)
    reduced = clgrid.WGridder(uvw, freq, **kw)
    assert reduced.engine.planned_on == "host" and full.engine.planned_on == "device"
    vis, wgt = vis.astype(np.complex64), wgt.astype(np.float32)
    assert relative_error(reduced.vis2dirty(vis, wgt), full.vis2dirty(vis, wgt)) < 1e-5
    assert relative_error(reduced.dirty2vis(dirty, wgt), full.dirty2vis(dirty, wgt)) < 1e-5


def test_planning_for_some_planes_keeps_exactly_the_points_with_a_tap_on_them(rng):
    """plan_stacked(planes=...) (one device's slab): the device keeps the points whose taps
    meet the planes, the same points as the float64 twin, and counts the rest elsewhere."""
    uvw, freq, _, _, _ = wide_field(rng, 2000)
    op = clgrid.WGridder(uvw, freq, epsilon=1e-5, do_wgridding=True, device=DEVICE, **IMAGE)
    g, q = op.geometry, op.queue
    scale, signs = freq / SPEED_OF_LIGHT, (1.0, 1.0, 1.0)
    every = stacked_positions(uvw, scale, None, signs, g, True)
    first = every["packed"][:, 3] & 0x7FFFFFFF
    lo, hi = g.num_planes // 3, 2 * g.num_planes // 3
    plan = planning.plan_stacked(q, g, uvw, scale, None, signs, True, True, planes=range(lo, hi))
    host = stacked_positions(uvw, scale, None, signs, g, True, range(lo, hi))
    want = (first < hi) & (first + g.kernel.support > lo)
    assert 0 < plan.num_kept == np.count_nonzero(want) < every["sample"].size
    assert np.array_equal(plan.sample.get(), every["sample"][want])
    assert np.array_equal(plan.sample.get(), host["sample"]) and np.array_equal(plan.packed.get(), host["packed"])
    assert plan.counts["elsewhere"] == every["sample"].size - plan.num_kept
