"""Indices at the 2^31 boundary (issue 29): a stack of w-planes whose sort keys (plane x
keys per plane + place) pass 32 bits is arranged in slabs, each of its own geometry and
below the limit (clgrid/imaging/stream.py), and images agree with ducc0 at 1e-12 within
epsilon; the limit is forced low on a small grid (the arithmetic is the same), and the
slabs' sizes are checked at the real limit for a 32k^2-sized grid.  What stays refused
past 32 bits is refused by name."""

import dataclasses
import os
import types

import numpy as np
import pytest

import clgrid
from clgrid.device.counting_sort import CountingSort
from clgrid.device.runtime import device_facts, get_queue
from clgrid.imaging import engine as engine_module
from clgrid.imaging.engine import check_grid
from clgrid.imaging.facets import DeviceLimits, grid_fits
from clgrid.imaging.geometry import GRID_CELL_LIMIT, choose_geometry
from clgrid.imaging.stream import KEY_LIMIT, max_slab_planes, slab_geometry
from clgrid.planning.stacking import PlaneOrder, arrange
from conftest import relative_error, wide_field

ducc0_wgridder = pytest.importorskip("ducc0.wgridder", reason="ducc0 is the oracle (the compare extra)")

DEVICE = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
IMAGE = dict(npix_x=64, npix_y=48, pixsize_x=4e-3, pixsize_y=5e-3)
W_MAX = 1500.0          # the fields here: |w| up to 1500 m, some 40 w-planes at 1e-7


@pytest.mark.parametrize("options", [
    dict(),
    dict(tuning={"spread": "bins"}, flip_u=True),
    dict(deterministic=True, center_y=0.02),             # planned on the host (its twin)
    dict(precision="single", tuning={"fft": "mapped"}, divide_by_n=False),
])
def test_a_key_space_past_the_limit_is_arranged_in_slabs_and_agrees_with_ducc0(rng, monkeypatch, options):
    uvw, freq, vis, wgt, mask = wide_field(rng, 1200, np.linspace(1.0e8, 1.6e8, 4), w=W_MAX, masked=0.1)
    single = options.get("precision") == "single"
    eps = 1e-4 if single else 1e-7
    args = dict(uvw=uvw, freq=freq, mask=mask, epsilon=eps, do_wgridding=True, center_x=0.01, device=DEVICE,
                **IMAGE, **options)
    whole = clgrid.WGridder(**args)
    keys_per_plane = whole.engine.plane_order.keys_per_plane
    support, planes = whole.geometry.kernel.support, whole.geometry.num_planes
    assert whole.engine._max_planes is None and len({p.geometry for p in whole.plans}) == 1
    # a limit the whole stack passes, which a slab of 3 planes (and W - 1 either side) keeps below
    limit = keys_per_plane * (2 * support + 2)
    assert planes * keys_per_plane >= limit
    monkeypatch.setattr(engine_module, "KEY_LIMIT", limit)
    op = clgrid.WGridder(**args)
    slabs = {(part.planes.start, part.planes.stop) for part in op.engine._parts}
    assert op.engine._max_planes == 3 and len(slabs) == -(-planes // 3)
    assert sorted(p for lo, hi in slabs for p in range(lo, hi)) == list(range(planes))
    for plan in op.plans:
        assert plan.geometry.num_planes * keys_per_plane < limit
        assert plan.geometry.num_planes < planes
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    image, got_vis = op.vis2dirty(vis, wgt), op.dirty2vis(dirty, wgt)
    # the slabs' own geometries round the points' plane positions apart from the whole
    # stack's by an ulp (and a point at a plane's edge may move a plane: its edge tap is
    # the kernel's edge value, below epsilon)
    same = 1e-5 if single else 1e-10
    assert relative_error(image, whole.vis2dirty(vis, wgt)) <= same
    assert relative_error(got_vis, whole.dirty2vis(dirty, wgt)) <= same
    ducc = {k: v for k, v in args.items() if k not in ("epsilon", "precision", "tuning", "device", "deterministic")}
    d2v = {k: v for k, v in ducc.items() if not k.startswith("npix")}
    assert relative_error(image, ducc0_wgridder.vis2dirty(vis=vis, wgt=wgt, epsilon=1e-12, **ducc)) <= eps
    assert relative_error(got_vis, ducc0_wgridder.dirty2vis(dirty=dirty, wgt=wgt, epsilon=1e-12, **d2v)) <= eps


def test_streamed_slabs_keep_below_the_key_limit_too(rng, monkeypatch):
    uvw, freq, vis, wgt, mask = wide_field(rng, 3000, np.linspace(1.0e8, 1.6e8, 4), w=W_MAX, masked=0.1)
    args = dict(uvw=uvw, freq=freq, mask=mask, epsilon=1e-7, do_wgridding=True, device=DEVICE, **IMAGE)
    whole = clgrid.WGridder(**args)
    keys_per_plane, support = whole.engine.plane_order.keys_per_plane, whole.geometry.kernel.support
    monkeypatch.setattr(engine_module, "KEY_LIMIT", keys_per_plane * (2 * support + 4))
    real = engine_module.device_facts
    # a device smaller than the kept engine's buffers (2 MiB on PoCL, whose "rows" spread keeps
    # kernel values; less where the device's spread keeps fewer bytes a point, as bins on a GPU)
    memory = min(2 << 20, int(whole.engine.device_bytes() * 0.6))
    monkeypatch.setattr(engine_module, "device_facts",
                        lambda d: dataclasses.replace(real(d), global_memory=memory))
    with pytest.warns(clgrid.StreamedWarning):
        op = clgrid.WGridder(**args)
    assert op.engine.streamed is not None and op.engine._max_planes == 5
    assert all(len(slab.planes) <= 5 for slab in op.engine._stream)
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    assert relative_error(op.vis2dirty(vis, wgt), whole.vis2dirty(vis, wgt)) <= 1e-10
    assert relative_error(op.dirty2vis(dirty, wgt), whole.dirty2vis(dirty, wgt)) <= 1e-10


def big_geometry(nu, num_planes):
    small = choose_geometry(64, 64, 1e-3, 1e-3, 1e-4, True, (0.0, 100.0), 1000)
    return dataclasses.replace(small, nu=nu, nv=nu, npix_x=nu // 2, npix_y=nu // 2, num_planes=num_planes)


@pytest.mark.parametrize("kind", ["rows", "bins"])
def test_slabs_at_the_real_32_bit_limit_hold_the_most_planes_below_it(kind):
    """A 46080^2 grid of 1822 planes (a 32k^2 image's): 8.4e7 (rows) or 2.1e9 (bins of
    32^2 cells) sort keys a plane stack; the slabs' stacks stay below 2^31 - 1 keys, and one
    plane more would not."""
    g = big_geometry(46080, 1822)
    layout = PlaneOrder(kind, g.nu, g.nv, 32, 32) if kind == "bins" else PlaneOrder("rows", g.nu, g.nv)
    kpp, support = layout.keys_per_plane, g.kernel.support
    most = max_slab_planes(g, kpp)
    if g.num_planes * kpp < KEY_LIMIT:
        assert most is None
        return
    stacks = [slab_geometry(g, range(lo, min(lo + most, g.num_planes)))[0].num_planes
              for lo in range(0, g.num_planes, most)]
    assert max(stacks) * kpp < KEY_LIMIT <= (max(stacks) + 1) * kpp + (2 * support - 2) * kpp
    assert (most + 2 * support - 2) * kpp < KEY_LIMIT <= (most + 2 * support - 1) * kpp
    # the boundary itself: a stack of exactly 2^31 - 1 keys is split, one key fewer is not
    rows = PlaneOrder("rows", 127, 127).keys_per_plane                       # 128 = 2^7 keys a plane
    assert max_slab_planes(big_geometry(127, 2 ** 24), rows) is not None     # 2^31 keys
    assert max_slab_planes(big_geometry(127, 2 ** 24 - 1), rows) is None     # 2^31 - 128


def test_a_slab_geometry_puts_points_on_the_same_planes(rng):
    g = big_geometry(512, 300)
    w = rng.uniform(g.w_min, g.w_min + (g.num_planes - g.kernel.support) * g.dw, 100_000)
    first = g.first_planes(w)
    for planes in (range(0, 7), range(40, 45), range(290, 300)):
        sub, base = slab_geometry(g, planes)
        mine = (first < planes.stop) & (first + g.kernel.support > planes.start)
        assert np.array_equal(sub.first_planes(w[mine]) + base, first[mine])
        assert sub.first_planes(w[mine]).min() >= 0
        assert sub.first_planes(w[mine]).max() + g.kernel.support <= sub.num_planes


def test_what_stays_refused_past_32_bits_is_refused_by_name(rng, monkeypatch):
    queue = get_queue(DEVICE)
    with pytest.raises(ValueError, match=r"num_keys must be in \[1, 2\*\*31 - 1\), got 2147483647"):
        CountingSort(queue, "p.x", 2 ** 31 - 1)
    g = big_geometry(46080, 1822)
    plan = types.SimpleNamespace(geometry=g, queue=queue, num_kept=0)
    with pytest.raises(ValueError, match=r"\d+ sort keys \(1822 w-planes of \d+\) overflow 32-bit counts"):
        arrange(plan, PlaneOrder("bins", g.nu, g.nv, 8, 8))
    with pytest.raises(ValueError, match=r"a w-plane of \d+ sort keys \(support \d+\) leaves no slab"):
        max_slab_planes(g, 2 ** 30)
    # a padded grid of more cells than 32-bit indices count: refused, and facets are chosen
    huge = big_geometry(46342, 10)
    assert huge.nu * huge.nv > GRID_CELL_LIMIT
    facts = dataclasses.replace(device_facts(queue.device), max_allocation=2 ** 40)
    with pytest.raises(clgrid.DeviceCapabilityError, match=r"46342x46342 has 2147580964 cells; .*32-bit"):
        check_grid(huge, np.complex64, facts)
    check_grid(big_geometry(46340, 10), np.complex64, facts)
    assert not grid_fits(huge, "single", DeviceLimits(2 ** 40, 2 ** 42))
    assert grid_fits(big_geometry(46340, 10), "single", DeviceLimits(2 ** 40, 2 ** 42))
    # a row of more channels than one part counts: refused before anything is made (the
    # limit lowered: a real one needs a 16 GB frequency array)
    monkeypatch.setattr(engine_module, "SAMPLE_LIMIT", 1000)
    with pytest.raises(ValueError, match=r"nchan = 1001 channels: .* at most 1000 channels per row"):
        clgrid.WGridder(np.zeros((4, 3)), np.full(1001, 1e8), 64, 64, 1e-3, 1e-3, 1e-4, device=DEVICE)


@pytest.mark.parametrize("options", [
    dict(),
    dict(tuning={"spread": "bins"}, flip_v=True),
    dict(precision="single", tuning={"fft": "mapped"}, divide_by_n=False),
])
def test_more_samples_than_32_bits_go_through_in_parts_of_rows_and_agree_with_ducc0(rng, monkeypatch, options):
    """An operator of more samples than one part's 32-bit counts (the limit lowered): parts
    of rows each at most the limit, onto one grid; the same image and visibilities as one
    part, and ducc0's at 1e-12 within epsilon, through vis2dirty / dirty2vis as well."""
    uvw, freq, vis, wgt, mask = wide_field(rng, 1000, np.linspace(1.0e8, 1.6e8, 5), w=W_MAX, masked=0.1)
    single = options.get("precision") == "single"
    eps = 1e-4 if single else 1e-7
    if single:
        vis = vis.astype(np.complex64)
    args = dict(uvw=uvw, freq=freq, mask=mask, epsilon=eps, do_wgridding=True, center_x=0.01, device=DEVICE,
                **IMAGE, **options)
    whole = clgrid.WGridder(**args)
    assert len(whole.plans) == 1
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32 if single else np.float64)
    want_image, want_vis = whole.vis2dirty(vis, wgt), whole.dirty2vis(dirty, wgt)
    limit = 1234            # 246 rows of 5 channels a part: 5 parts (the last of 16 rows)
    monkeypatch.setattr(engine_module, "SAMPLE_LIMIT", limit)
    op = clgrid.WGridder(**args)
    parts = op.engine._parts
    assert [p.rows for p in parts] == [slice(a, min(a + 246, 1000)) for a in range(0, 1000, 246)]
    assert all(p.nsample <= limit for p in parts)
    assert sum(p.plan.num_kept for p in parts) == whole.plans[0].num_kept
    image, got_vis = op.vis2dirty(vis, wgt), op.dirty2vis(dirty, wgt)
    same = 1e-5 if single else 1e-12
    assert relative_error(image, want_image) <= same
    assert relative_error(got_vis, want_vis) <= same
    ducc = {k: v for k, v in args.items() if k not in ("epsilon", "precision", "tuning", "device")}
    d2v = {k: v for k, v in ducc.items() if not k.startswith("npix")}
    vis128 = vis.astype(np.complex128)
    assert relative_error(image, ducc0_wgridder.vis2dirty(vis=vis128, wgt=wgt, epsilon=1e-12, **ducc)) <= eps
    assert relative_error(got_vis, ducc0_wgridder.dirty2vis(dirty=dirty.astype(np.float64), wgt=wgt,
                                                            epsilon=1e-12, **d2v)) <= eps
    # the ducc0-like calls split the same way
    call = {k: v for k, v in args.items() if k != "precision"}
    assert relative_error(clgrid.vis2dirty(vis=vis, wgt=wgt.astype(vis.real.dtype), **call), image) <= same
    d2v_call = {k: v for k, v in call.items() if not k.startswith("npix")}
    assert relative_error(clgrid.dirty2vis(dirty=dirty, wgt=wgt.astype(dirty.dtype), **d2v_call), got_vis) <= same
