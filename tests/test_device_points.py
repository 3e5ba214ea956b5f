"""Points already on the device (clgrid.planning.device_points) and the imaging engine's
planning straight into its spread's order (clgrid.planning.fused): uvw as a pyopencl Array
plans as host uvw does (the same plan bits: the same float64 kernels), a device array the
planner cannot read is refused naming uvw, and the fused planning arranges the very points
of the two-step planning (plan_stacked then stacking.arrange, itself bit-identical to the
float64 host twin: test_wgrid_plan.py), in the same runs, all but the order within a key."""

import os

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pytest

import clgrid
from clgrid.imaging.geometry import abs_w_range
from clgrid.planning import device_points, fused, stacking
from clgrid.planning import plan as planning
from clgrid.planning.host import SPEED_OF_LIGHT
from conftest import relative_error, wide_field
from test_vis2dirty import IMAGE

DEVICE = os.environ.get("CLGRID_TEST_DEVICE", "pocl")


def download(queue, buffer, shape, dtype):
    out = np.empty(shape, dtype)
    if out.size:
        cl.enqueue_copy(queue, out, buffer).wait()
    return out


def boundary_points(rng, uvw, g, freq):
    """Some points exactly on the rounding boundaries: first taps at whole cells."""
    cu, cv = g.cells_per_wavelength
    k = np.arange(150)
    uvw[k, 0] = (rng.integers(-40, 40, k.size) + g.kernel.support / 2) / cu * SPEED_OF_LIGHT / freq[0]
    uvw[k, 1] = (rng.integers(-40, 40, k.size) + 0.5) / cv * SPEED_OF_LIGHT / freq[0]


@pytest.mark.parametrize("spread,double,wgrid,sparse,slab", [
    ("bins", False, True, False, False), ("bins", True, False, True, False), ("rows", True, True, False, True),
    ("bins", False, True, True, True)])
def test_fused_planning_arranges_the_points_of_the_two_step_planning(rng, spread, double, wgrid, sparse, slab):
    uvw, freq, _, _, _ = wide_field(rng, 2500)
    op = clgrid.WGridder(uvw, freq, epsilon=1e-5, do_wgridding=wgrid, device=DEVICE, tuning={"spread": spread},
                         center_x=0.01, flip_v=True, precision="double" if double else "single", **IMAGE)
    g, q, layout = op.geometry, op.queue, op.engine.plane_order
    boundary_points(rng, uvw, g, freq)
    keep = rng.uniform(size=(uvw.shape[0], freq.size)) > 0.2
    signs, scale = (1.0, -1.0, 1.0), freq / SPEED_OF_LIGHT
    planes = range(g.num_planes // 3, 2 * g.num_planes // 3 + 1) if slab else None
    two_step = planning.plan_stacked(q, g, uvw, scale, keep, signs, g.do_wgridding, double, planes=planes)
    want = stacking.arrange(two_step, layout, stable=True)
    n = two_step.num_kept
    assert n > 0
    # uvw from the host, and the same uvw on the device (one plan from each)
    for points_given in (uvw, cla.to_device(q, uvw)):
        plan, got, index = fused.plan_arranged(q, g, points_given, scale, keep, signs, g.do_wgridding, double,
                                               layout, planes=planes, sparse_share=1.0 if sparse else 0.0)
        got.extra.pop("ready").wait()
        assert plan.counts == two_step.counts and plan.num_kept == got.num_vis == n
        assert plan.values_by_position == sparse and (index is None) == (not sparse)
        with pytest.raises(RuntimeError, match="released"):
            plan.host()
        num_keys = g.num_planes * layout.keys_per_plane + 1
        assert np.array_equal(download(q, got.starts, num_keys, np.int32),
                              download(q, want.starts, num_keys, np.int32))
        assert np.array_equal(got.plane_start, want.plane_start)
        real = np.float64 if double else np.float32
        fields = (("first", (n, 4), np.int32), ("src", n, np.int32), ("frac", (n, 4), real))
        mine = {name: download(q, getattr(got, name), shape, dtype) for name, shape, dtype in fields}
        theirs = {name: download(q, getattr(want, name), shape, dtype) for name, shape, dtype in fields}
        if g.has_phase:
            cplx = np.complex128 if double else np.complex64
            mine["phase"], theirs["phase"] = (download(q, p.phase, n, cplx) for p in (got, want))
        if sparse:          # src: the place in this order; index: the sample there
            src, k = mine["src"], np.arange(n)
            assert np.array_equal(np.where(src < 0, -src - 1, src), k)
            mine["src"] = np.where(src < 0, -index - 1, index)
        a, b = np.argsort(mine["src"]), np.argsort(theirs["src"])      # within a key: the atomics' order
        for name in mine:
            assert np.array_equal(mine[name][a], theirs[name][b]), name


@pytest.mark.parametrize("wgrid,precision,spread", [(True, "double", "rows"), (False, "single", "bins"),
                                                    (True, "single", "bins")])
def test_wgridder_plans_device_uvw_as_host_uvw(rng, wgrid, precision, spread):
    uvw, freq, vis, wgt, mask = wide_field(rng, 1200, masked=0.1)
    q = clgrid.device.runtime.get_queue(DEVICE)
    kw = dict(freq=freq, epsilon=1e-5, do_wgridding=wgrid, mask=mask, center_y=0.02, flip_u=True,
              precision=precision, tuning={"spread": spread}, **IMAGE)
    host = clgrid.WGridder(uvw, device=DEVICE, **kw)
    device = clgrid.WGridder(cla.to_device(q, uvw), **dict(kw, freq=cla.to_device(q, freq)))   # device=: uvw's queue
    assert device.geometry == host.geometry and device.engine.num_kept == host.engine.num_kept
    assert device.engine.queue is q and device.engine.planned_on == "device"
    cd, rd = (np.complex128, np.float64) if precision == "double" else (np.complex64, np.float32)
    vis, wgt = vis.astype(cd), wgt.astype(rd)
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(rd)
    tol = 1e-12 if precision == "double" else 1e-5          # the spreads' float atomics add in any order
    assert relative_error(device.vis2dirty(vis, wgt), host.vis2dirty(vis, wgt)) < tol
    assert relative_error(device.dirty2vis(dirty, wgt), host.dirty2vis(dirty, wgt)) < tol
    # the one call too; deterministic (planned on the host: the device array read back): bit-identical
    call = dict(freq=freq, vis=vis, wgt=wgt, epsilon=1e-5, do_wgridding=wgrid, mask=mask, device=q,
                tuning={"spread": spread}, **IMAGE)
    assert relative_error(clgrid.vis2dirty(uvw=cla.to_device(q, uvw), **call), clgrid.vis2dirty(uvw=uvw, **call)) < tol
    same = dict(kw, deterministic=True, tuning={"spread": "rows"})
    assert np.array_equal(clgrid.WGridder(cla.to_device(q, uvw), device=q, **same).vis2dirty(vis, wgt),
                          clgrid.WGridder(uvw, device=q, **same).vis2dirty(vis, wgt))


def test_device_uvw_in_parts_of_rows(rng):
    """Beyond one part (forced ``part_samples``) each part's rows are a slice of the device
    array at an offset: planned as the host's parts."""
    uvw, freq, vis, wgt, _ = wide_field(rng, 900)
    q = clgrid.device.runtime.get_queue(DEVICE)
    kw = dict(freq=freq, epsilon=1e-5, do_wgridding=True, device=q, tuning={"part_samples": 777}, **IMAGE)
    host, device = clgrid.WGridder(uvw, **kw), clgrid.WGridder(cla.to_device(q, uvw), **kw)
    assert len(device.plans) == len(host.plans) == 3
    assert [p.num_kept for p in device.plans] == [p.num_kept for p in host.plans]
    assert relative_error(device.vis2dirty(vis, wgt), host.vis2dirty(vis, wgt)) < 1e-12


def test_device_w_range_is_the_hosts(rng):
    uvw, freq, _, _, _ = wide_field(rng, 5000)
    q = clgrid.device.runtime.get_queue(DEVICE)
    scale = np.array([1.0e8, 1.3e8, 0.9e8]) / SPEED_OF_LIGHT
    keep = rng.uniform(size=(uvw.shape[0], scale.size)) > 0.3
    uvw_d = cla.to_device(q, uvw)
    for k in (None, keep):
        assert device_points.abs_w_range(q, uvw_d, scale, k) == abs_w_range(uvw, scale, k)
    uvw[17, 2] = np.inf
    with pytest.raises(ValueError, match="uvw has NaN or infinite"):
        device_points.abs_w_range(q, cla.to_device(q, uvw), scale, None)
    keep[17] = False
    assert device_points.abs_w_range(q, cla.to_device(q, uvw), scale, keep) == abs_w_range(uvw, scale, keep)


def test_device_uvw_the_planner_cannot_read_is_refused_naming_it(rng):
    uvw, freq, vis, _, _ = wide_field(rng, 300)
    q = clgrid.device.runtime.get_queue(DEVICE)
    kw = dict(freq=freq, epsilon=1e-4, do_wgridding=True, device=q, **IMAGE)
    context = cl.Context([q.device])      # kept: Intel's CPU runtime refuses a queue's context once unreferenced
    other = cl.CommandQueue(context)
    with pytest.raises(ValueError, match="uvw is a device array of another OpenCL context"):
        clgrid.WGridder(cla.to_device(other, uvw), **kw)
    with pytest.raises(TypeError, match="uvw on the device must be float64"):
        clgrid.WGridder(cla.to_device(q, uvw.astype(np.float32)), **kw)
    with pytest.raises(ValueError, match=r"uvw on the device must have shape \(nrow, 3\)"):
        clgrid.WGridder(cla.to_device(q, np.ascontiguousarray(uvw[:, :2])), **kw)
    with pytest.raises(ValueError, match=r"uvw on the device must have shape \(nrow, 3\)"):
        clgrid.WGridder(cla.to_device(q, uvw.reshape(100, 3, 3)), **kw)
    with pytest.raises(ValueError, match="uvw on the device must be C-contiguous"):
        clgrid.WGridder(cla.to_device(q, uvw)[::2], **kw)
    for axis, w in ((1, False), (2, True)):     # by the planner in 2-D (its counts back first or last), the w range
        bad = uvw.copy()
        bad[5, axis] = np.nan
        for mask in (None, np.ones((300, 2), bool)):
            with pytest.raises(ValueError, match="uvw has NaN"):
                clgrid.WGridder(cla.to_device(q, bad), **dict(kw, do_wgridding=w, mask=mask))
    with pytest.raises(ValueError, match="uvw is a device array: .* names several"):
        clgrid.WGridder(cla.to_device(q, uvw), **dict(kw, device=[q, q]))
    # the W-projection operators' planning: the same checks
    stack = clgrid.KernelStack.analytic(1e-4)
    gridder = clgrid.Gridder(64, 2e-3, stack, device=q, on_dropped="ignore")
    flat = uvw * np.array([0.05, 0.05, 0.0])             # wavelengths within the grid, w = 0 (one plane)
    with pytest.raises(ValueError, match="another OpenCL context"):
        gridder.plan(cla.to_device(other, flat))
    with pytest.raises(TypeError, match="float64"):
        gridder.plan(cla.to_device(q, flat.astype(np.float32)))
    plan_host, plan_device = gridder.plan(flat), gridder.plan(cla.to_device(q, flat))
    assert plan_host.num_kept == plan_device.num_kept > 0
    for name in ("sample", "packed", "support", "weight_sum"):
        assert np.array_equal(getattr(plan_host, name).get(), getattr(plan_device, name).get()), name
