"""The imaging engine's device memory (on a CPU device, host memory: issue 29's bound on a
vis2dirty call's peak) against its own model, `clgrid.imaging.memory.engine_device_bytes`
(`ImagingEngine.device_bytes`), with every OpenCL buffer the call makes counted as it is
made and released; and the float kernel values that keep it small against ducc0."""

import os

import pytest

import clgrid
from clgrid.imaging.memory import engine_point_bytes
from clgrid.sources.accuracy import choose_kernel, float_taps_allowed
from clgrid.tools.buffers import BufferTracker

DEVICE = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
from conftest import relative_error, wide_field  # noqa: E402
from test_vis2dirty import IMAGE  # noqa: E402

ducc0_wgridder = pytest.importorskip("ducc0.wgridder", reason="ducc0 is the oracle (the compare extra)")


def test_the_engine_holds_no_more_than_its_model_and_keeps_only_its_arrangement(rng, monkeypatch):
    """A double-precision operator at epsilon 1e-6 in four parts: the buffers live at any
    moment of set-up, vis2dirty and dirty2vis stay within the engine's model; what it keeps
    per point is the arrangement (first cells in an int2, source, phase in float), the value
    in float, 2 W + 1 float kernel values and one real: no plan in the caller's order, no
    offsets, no caller's values of every part (each regression here is 24 to 84 bytes a
    point, what issue 29's bound is made of)."""
    uvw, freq, vis, wgt, _ = wide_field(rng, 4000)
    live = BufferTracker().install(monkeypatch)
    nsample = vis.size
    op = clgrid.WGridder(uvw, freq, epsilon=1e-6, do_wgridding=True, device=DEVICE, precision="double",
                         tuning={"part_samples": nsample // 4 + 1, "spread": "rows"}, sigma_min=2.0, **IMAGE)
    engine = op.engine
    assert len(engine.plans) == 4 and all(plan.sample is None for plan in engine.plans)
    assert engine.spreader.tap_single, "epsilon 1e-6 in double keeps float kernel values (float_taps_allowed)"
    kept = live.now
    image = op.vis2dirty(vis, wgt)
    dirty = rng.normal(size=image.shape)
    op.dirty2vis(dirty, wgt)
    small = 1 << 16       # the tally, the phase placeholder, the kernels' argument buffers
    assert live.peak <= engine.device_bytes() + small, (live.peak, engine.device_bytes())
    g = engine.geometry
    per_point = engine_point_bytes("double", g.kernel.support, "rows", True)
    assert per_point == 8 + 4 + 8 + 8 + (2 * g.kernel.support + 1) * 4 + 8
    held = max(part.held for part in engine._parts) * (16 + 8)
    tables = len(engine._parts) * 4 * (g.num_planes * (g.nu + 1) + 1)     # each part's row starts
    assert kept <= g.nu * g.nv * 16 + engine.num_kept * per_point + held + tables + small, \
        (kept, engine.num_kept, per_point)


def test_a_plan_released_after_arranging_refuses_what_it_no_longer_holds(rng):
    uvw, freq, vis, wgt, _ = wide_field(rng, 300)
    op = clgrid.WGridder(uvw, freq, epsilon=1e-4, do_wgridding=True, device=DEVICE, **IMAGE)
    plan = op.plans[0]
    assert plan.num_kept == op.engine.num_kept > 0          # the counts stay
    with pytest.raises(RuntimeError, match="released"):
        plan.host()
    with pytest.raises(RuntimeError, match="released"):
        plan.arranged("another order", lambda p: None)


@pytest.mark.parametrize("epsilon", [1e-6, 1e-5])
def test_float_kernel_values_in_double_precision_reach_epsilon_against_ducc0(rng, epsilon):
    """Where the accuracy model lets a double-precision operator keep its kernel values in
    float (`float_taps_allowed`), its image and visibilities still reach epsilon against
    ducc0 at 1e-12; and they are in float there (the rows spread), in double below."""
    uvw, freq, vis, wgt, _ = wide_field(rng, 1500)
    args = dict(uvw=uvw, freq=freq, **IMAGE, do_wgridding=True)
    d2v = {k: v for k, v in args.items() if k not in ("npix_x", "npix_y")}
    op = clgrid.WGridder(uvw, freq, epsilon=epsilon, do_wgridding=True, device=DEVICE, precision="double",
                         tuning={"spread": "rows"}, sigma_min=2.0, **IMAGE)
    assert op.engine.spreader.tap_single and op.engine.interpolator.tap_single
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    ref = ducc0_wgridder.vis2dirty(vis=vis, wgt=wgt, epsilon=1e-12, **args)
    ref_vis = ducc0_wgridder.dirty2vis(dirty=dirty, wgt=wgt, epsilon=1e-12, **d2v)
    assert relative_error(op.vis2dirty(vis, wgt), ref) <= epsilon
    assert relative_error(op.dirty2vis(dirty, wgt), ref_vis) <= epsilon
    fine = clgrid.WGridder(uvw, freq, epsilon=1e-8, do_wgridding=True, device=DEVICE, precision="double",
                           tuning={"spread": "rows"}, sigma_min=2.0, **IMAGE)
    assert not fine.engine.spreader.tap_single


def test_float_kernel_values_are_allowed_where_epsilon_leaves_room_and_always_in_single():
    """Double precision: float kernel values where the kernel's expected error plus their
    rounding stays within epsilon (about 1e-6 and above); never without an epsilon; always
    in single precision."""
    allowed = {eps: float_taps_allowed(choose_kernel(eps, "double", 3), "double", 3, eps)
               for eps in (1e-4, 1e-5, 1e-6, 1e-7, 1e-9, 1e-12)}
    assert allowed == {1e-4: True, 1e-5: True, 1e-6: True, 1e-7: False, 1e-9: False, 1e-12: False}
    assert not float_taps_allowed(choose_kernel(1e-4, "double", 3), "double", 3)
    assert float_taps_allowed(choose_kernel(1e-5, "single", 3), "single", 3)
