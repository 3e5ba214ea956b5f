"""`WGridder` / `vis2dirty` / `dirty2vis` with ``device=`` a list (clgrid.imaging.devices,
clgrid.imaging.split): the same device twice (two queues on it) and PoCL beside Intel's
CPU runtime give the one-device image and visibilities to 1e-6 relative in single
precision (to rounding in double), within epsilon of ducc0 at 1e-12, the same bits from
run to run with ``deterministic``; the split by slabs of planes takes exactly the samples
with a tap on each slab (points on every plane's edge); a device that lacks fp64 or
memory is refused by its place in the list; an empty list is refused."""

import dataclasses
import os
import sys

import numpy as np
import pytest

import clgrid
from clgrid.errors import EmptyInputWarning, NonFiniteResultError
from clgrid.imaging import devices as imaging_devices
from clgrid.imaging import split as imaging_split
from clgrid.planning.host import stacked_positions
from conftest import held_until, optional, relative_error, warnings_of_two_threads, wide_field

DEVICE = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
C = 299792458.0
IMAGE = dict(npix_x=64, npix_y=48, pixsize_x=5e-3, pixsize_y=6e-3)


def other_device():
    """A second OpenCL runtime on this machine beside the device under test (Intel's CPU
    runtime beside PoCL, and the other way round), or a skip saying there is none."""
    other = "intel" if "pocl" in DEVICE.lower() else "pocl"
    if not clgrid.device.runtime.matching_devices(other):
        pytest.skip(f"no {other!r} OpenCL device here to pair with {DEVICE!r} (CI installs both)")
    return other


def poison_results(monkeypatch, *modules):
    """``host_empty`` (the arrays results are written into) in ``modules`` gives NaN-filled
    arrays: a result entry nothing wrote shows."""
    from clgrid.device import transfer

    real_empty = transfer.host_empty

    def poisoned(shape, dtype, staging):
        out = real_empty(shape, dtype, staging)
        out[...] = np.nan
        return out

    for module in modules:
        monkeypatch.setattr(module, "host_empty", poisoned)


@pytest.mark.parametrize("split", ["planes", "rows"])
@pytest.mark.parametrize("pair", ["twice", "mixed"])
def test_device_lists_give_the_one_device_result(rng, pair, split):
    """Single precision, w, a mask, a centre shift: a list of two devices equals one device
    to 1e-6 (image and visibilities) and ducc0 at 1e-12 to epsilon; each device got a share."""
    wgridder = optional("ducc0.wgridder", "test")
    devices = [DEVICE, DEVICE] if pair == "twice" else [DEVICE, other_device()]
    uvw, freq, vis, wgt, mask = wide_field(rng, 1200, precision="single", masked=0.1)
    kw = dict(epsilon=1e-5, do_wgridding=True, mask=mask, center_x=0.02, flip_v=True, precision="single", **IMAGE)
    one = clgrid.WGridder(uvw, freq, device=DEVICE, **kw)
    op = clgrid.WGridder(uvw, freq, device=devices, split=split, **kw)
    assert op.split == split and len(op.devices) == 2 and op.geometry == one.geometry
    assert [d.int_ptr for d in op.devices] == [clgrid.device.runtime.select_device(d).int_ptr for d in devices]
    assert op.engines[0].queue.context != op.engines[1].queue.context
    if split == "planes":                   # the slabs partition the planes; each took only its samples
        assert op.engines[0].planes.stop == op.engines[1].planes.start and op.engines[1].planes.stop == \
            op.geometry.num_planes and sum(e.num_kept for e in op.engines) < 2 * np.count_nonzero(mask)
    else:
        assert sum(e.num_kept for e in op.engines) == np.count_nonzero(mask)
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    image, predicted = op.vis2dirty(vis, wgt), op.dirty2vis(dirty, wgt)
    assert image.dtype == np.float32 and predicted.dtype == np.complex64 and predicted.shape == vis.shape
    assert relative_error(image, one.vis2dirty(vis, wgt)) <= 1e-6
    assert relative_error(predicted, one.dirty2vis(dirty, wgt)) <= 1e-6
    assert not np.any(predicted[mask == 0])
    exact = dict(uvw=uvw, freq=freq, wgt=wgt.astype(np.float64), mask=mask, epsilon=1e-12, do_wgridding=True,
                 center_x=0.02, flip_v=True, pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"])
    oracle = wgridder.vis2dirty(vis=vis.astype(np.complex128), npix_x=IMAGE["npix_x"], npix_y=IMAGE["npix_y"],
                                **exact)
    assert relative_error(image, oracle) <= 1e-5
    assert relative_error(predicted, wgridder.dirty2vis(dirty=dirty.astype(np.float64), **exact)) <= 1e-5


def test_one_call_functions_take_a_list_and_deterministic_lists_repeat_their_bits(rng):
    """clgrid.vis2dirty / dirty2vis with a list (double: ducc0 at 1e-12 to epsilon), and
    fresh deterministic operators on three queues give the same bits every time."""
    wgridder = optional("ducc0.wgridder", "test")
    uvw, freq, vis, wgt, _ = wide_field(rng, 800)
    common = dict(uvw=uvw, freq=freq, wgt=wgt, epsilon=1e-9, do_wgridding=True, pixsize_x=IMAGE["pixsize_x"],
                  pixsize_y=IMAGE["pixsize_y"])
    size = dict(npix_x=IMAGE["npix_x"], npix_y=IMAGE["npix_y"])
    image = clgrid.vis2dirty(vis=vis, device=[DEVICE, DEVICE], **size, **common)
    assert relative_error(image, wgridder.vis2dirty(vis=vis, **size, **dict(common, epsilon=1e-12))) <= 1e-9
    dirty = rng.normal(size=image.shape)
    predicted = clgrid.dirty2vis(dirty=dirty, device=(DEVICE, DEVICE), **common)
    assert relative_error(predicted, wgridder.dirty2vis(dirty=dirty, **dict(common, epsilon=1e-12))) <= 1e-9

    single = vis.astype(np.complex64)
    kw = dict(epsilon=1e-4, do_wgridding=True, precision="single", deterministic=True, **IMAGE)
    results = []
    for _ in range(2):
        op = clgrid.WGridder(uvw, freq, device=[DEVICE] * 3, **kw)
        results.append((op.vis2dirty(single).view(np.uint32), op.dirty2vis(dirty.astype(np.float32)).view(np.uint64)))
    assert all(np.array_equal(a, b) for a, b in zip(*results))


@pytest.mark.parametrize("sparse", [0.0, 1.1, 0.5])
def test_devices_shares_go_into_one_output_in_order(rng, monkeypatch, sparse):
    """Three queues, slabs of planes, every share's values picked by the host (tuning
    ``sparse_share`` 1.1), none (0.0) or as the split falls (0.5): the visibilities (written by the first
    device, added by the others in order into one poisoned output, the puts on threads)
    equal one device's to 1e-6, masked ones exactly zero, and deterministic
    operators repeat their bits."""
    from clgrid.imaging import engine as imaging_engine, wgridding as imaging_wgridding

    poison_results(monkeypatch, imaging_engine, imaging_wgridding)
    uvw, freq, vis, wgt, mask = wide_field(rng, 1500, precision="single", masked=0.1)
    kw = dict(epsilon=1e-5, do_wgridding=True, mask=mask, precision="single", **IMAGE)
    one = clgrid.WGridder(uvw, freq, device=DEVICE, **kw)
    op = clgrid.WGridder(uvw, freq, device=[DEVICE] * 3, split="planes", tuning={"sparse_share": sparse}, **kw)
    assert len(op.engines) == 3
    picked = [any(p.index is not None for p in e._parts) for e in op.engines]
    assert all(picked) if sparse > 1 else not any(picked) if sparse == 0 else True
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    predicted = op.dirty2vis(dirty, wgt)
    assert np.all(np.isfinite(predicted)) and not np.any(predicted[mask == 0])
    assert relative_error(predicted, one.dirty2vis(dirty, wgt)) <= 1e-6
    assert relative_error(op.vis2dirty(vis, wgt), one.vis2dirty(vis, wgt)) <= 1e-6
    fixed = [clgrid.WGridder(uvw, freq, device=[DEVICE] * 3, split="planes", deterministic=True, **kw)
             for _ in range(2)]
    a, b = (f.dirty2vis(dirty, wgt).view(np.uint64) for f in fixed)
    assert np.array_equal(a, b)


def test_the_sums_run_in_their_documented_order(rng, monkeypatch):
    """Three queues, slabs of planes: dirty2vis's first device writes and each next one
    waits for the one before it; vis2dirty's last device writes and each one before it
    waits for the one after it (the device holding most samples, the first, comes first
    in one chain and last in the other, where it usually ends: docs/design/architecture.md)."""
    from clgrid.imaging import engine as imaging_engine

    uvw, freq, vis, wgt, mask = wide_field(rng, 900, precision="single", masked=0.1)
    kw = dict(epsilon=1e-5, do_wgridding=True, mask=mask, precision="single", **IMAGE)
    op = clgrid.WGridder(uvw, freq, device=[DEVICE] * 3, split="planes", **kw)
    index = {id(e): k for k, e in enumerate(op.engines)}
    seen = []
    for name in ("vis2dirty", "dirty2vis"):
        real = getattr(imaging_engine.ImagingEngine, name)

        def spy(self, *args, __real=real, __name=name, **kwargs):
            after = kwargs.get("after")
            if after is None:
                seen.append((__name, index[id(self)], "writes"))
            else:
                def waited():
                    after()
                    seen.append((__name, index[id(self)], "adds"))
                kwargs["after"] = waited
            return __real(self, *args, **kwargs)

        monkeypatch.setattr(imaging_engine.ImagingEngine, name, spy)
    op.vis2dirty(vis, wgt)
    assert [s for s in seen if s[0] == "vis2dirty"] == [("vis2dirty", 2, "writes"), ("vis2dirty", 1, "adds"),
                                                        ("vis2dirty", 0, "adds")]
    op.dirty2vis(rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32), wgt)
    assert [s for s in seen if s[0] == "dirty2vis"] == [("dirty2vis", 0, "writes"), ("dirty2vis", 1, "adds"),
                                                        ("dirty2vis", 2, "adds")]


@pytest.mark.parametrize("portable", [False, True])
def test_device_images_are_summed_on_the_devices_in_order(rng, monkeypatch, portable):
    """Three queues, the device FFT path ("mapped") with pinned staging in 4 KiB pieces
    (forced on this CPU device): the last device's image is written into one poisoned
    image, and each device before it gets that sum sent up (through its staging, or
    straight from the pinned image: ``pinned_across_contexts``) and adds it to its own as
    it finishes, in a fixed order; the image equals one device's to 1e-6 call after call
    (the image pinned from the second call on) and ducc0's at 1e-12 to epsilon, and
    deterministic operators repeat their bits."""
    from clgrid.device import transfer
    from clgrid.imaging import engine as imaging_engine, plane_passes, wgridding as imaging_wgridding

    wgridder = optional("ducc0.wgridder", "test")

    monkeypatch.setattr(imaging_engine, "shared_staging", lambda queue: transfer.Staging(queue, piece=4096))
    stagings = {}                                     # the transfer queues' (kept, as shared_staging's)
    monkeypatch.setattr(plane_passes, "shared_staging",
                        lambda queue: stagings.setdefault(queue.int_ptr, transfer.Staging(queue, piece=4096)))
    poison_results(monkeypatch, imaging_wgridding)
    sent = []                                         # (the sending context, pinned, straight across)
    real_upload = plane_passes.upload_pinned
    monkeypatch.setattr(plane_passes, "upload_pinned", lambda queue, host, buffer, staging, portable: (
        sent.append((queue.context.int_ptr, transfer._pinned_block(host) is not None,
                     staging is None or transfer._pinned_for(host, queue, portable))),
        real_upload(queue, host, buffer, staging, portable))[1])
    uvw, freq, vis, wgt, mask = wide_field(rng, 900, precision="single", masked=0.1)
    kw = dict(epsilon=1e-5, do_wgridding=True, mask=mask, precision="single",
              tuning={"fft": "mapped", "pinned_across_contexts": portable}, **IMAGE)
    one = clgrid.WGridder(uvw, freq, device=DEVICE, **kw)
    op = clgrid.WGridder(uvw, freq, device=[DEVICE] * 3, split="planes", **kw)
    assert all(e.device_fft is not None and e.staging is not None for e in op.engines)
    assert all(e.pinned_portable is portable for e in op.engines)
    expected = one.vis2dirty(vis, wgt)
    oracle = wgridder.vis2dirty(uvw=uvw, freq=freq, vis=vis.astype(np.complex128), wgt=wgt.astype(np.float64),
                                mask=mask, epsilon=1e-12, do_wgridding=True, npix_x=IMAGE["npix_x"],
                                npix_y=IMAGE["npix_y"], pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"])
    for call in range(3):
        sent.clear()
        image = op.vis2dirty(vis, wgt)
        assert relative_error(image, expected) <= 1e-6
        assert relative_error(image, oracle) <= 1e-5
        assert len(sent) == 2                                   # two devices added the sum after them
        for context, pinned, straight in sent:     # (pinned for the first device from the second call on)
            assert pinned or call == 0
            assert straight == (pinned and (portable or context == op.engines[0].queue.context.int_ptr))
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    assert relative_error(op.dirty2vis(dirty, wgt), one.dirty2vis(dirty, wgt)) <= 1e-6
    fixed = [clgrid.WGridder(uvw, freq, device=[DEVICE] * 3, split="planes", deterministic=True, **kw)
             for _ in range(2)]
    a, b = (f.vis2dirty(vis, wgt).view(np.uint32) for f in fixed)
    assert np.array_equal(a, b)


def test_a_device_adds_the_image_after_it_only_once_it_is_up(rng, monkeypatch):
    """The upload of the image of the devices after a device is held back a while on its
    transfer queue (a user event, set from a timer): the device's finish waits for it, and
    the image is one device's (a finish that did not wait would add whatever its output
    buffer held: the last call's sum, or nothing written)."""
    import threading

    import pyopencl as cl

    from clgrid.imaging import plane_passes

    timers = []

    def held_back(queue, host, buffer, staging, portable):
        gate = cl.UserEvent(queue.context)
        copy = cl.enqueue_copy(queue, buffer, host, is_blocking=False, wait_for=[gate])
        queue.flush()
        timers.append(threading.Timer(0.2, gate.set_status, (cl.command_execution_status.COMPLETE,)))
        timers[-1].start()
        return copy

    monkeypatch.setattr(plane_passes, "upload_pinned", held_back)
    uvw, freq, vis, wgt, _ = wide_field(rng, 600, precision="single")
    kw = dict(epsilon=1e-5, do_wgridding=True, precision="single", tuning={"fft": "mapped"}, **IMAGE)
    one = clgrid.WGridder(uvw, freq, device=DEVICE, **kw)
    op = clgrid.WGridder(uvw, freq, device=[DEVICE] * 2, split="planes", **kw)
    expected = one.vis2dirty(vis, wgt)
    try:
        for scale in (1, -3):                        # the second call's sum differs from the first's
            assert relative_error(op.vis2dirty(vis * np.float32(scale), wgt), expected * scale) <= 1e-6
    finally:
        for timer in timers:
            timer.join()
    assert len(timers) == 2


def test_a_device_issues_its_planes_before_it_waits_for_the_image_after_it(rng, monkeypatch):
    """vis2dirty on a device list, the device FFT's path: a device that adds the image of
    the devices after it flushes its queue after its last plane's kernels and before it
    waits for that image, so its planes run meanwhile.  (OpenCL issues enqueued commands
    at a flush or a wait: PoCL and Intel's runtime issue them at once, a GPU's driver may
    hold them until then, and the devices would take turns.)"""
    import pyopencl as cl

    from clgrid.imaging import engine as imaging_engine, plane_passes

    log = []
    real_flush, real_launch = cl.CommandQueue.flush, plane_passes.launch
    monkeypatch.setattr(cl.CommandQueue, "flush",
                        lambda self: (log.append(("flush", self.int_ptr)), real_flush(self))[1])
    monkeypatch.setattr(plane_passes, "launch", lambda kernel, queue, *args, **kw: (
        log.append(("launch", queue.int_ptr)), real_launch(kernel, queue, *args, **kw))[1])
    real_vis2dirty = imaging_engine.ImagingEngine.vis2dirty

    def vis2dirty(self, vis, wgt=None, progress=None, out=None, after=None):
        if after is not None:
            waited, queue = after, self.queue.int_ptr

            def after():
                log.append(("after", queue))
                waited()
        return real_vis2dirty(self, vis, wgt, progress, out, after)

    monkeypatch.setattr(imaging_engine.ImagingEngine, "vis2dirty", vis2dirty)
    uvw, freq, vis, wgt, _ = wide_field(rng, 600, precision="single")
    op = clgrid.WGridder(uvw, freq, device=[DEVICE] * 3, split="planes", epsilon=1e-5, do_wgridding=True,
                         precision="single", tuning={"fft": "mapped"}, **IMAGE)
    assert all(e.device_fft is not None for e in op.engines)
    op.vis2dirty(vis, wgt)
    waits = [i for i, (what, _) in enumerate(log) if what == "after"]
    assert len(waits) == 2
    for at in waits:
        queue = log[at][1]
        mine = [(i, what) for i, (what, q) in enumerate(log[:at]) if q == queue]
        planes = max(i for i, what in mine if what == "launch")        # the last plane's accumulate
        assert any(what == "flush" and i > planes for i, what in mine), "waited with its planes unflushed"


def test_slabs_take_exactly_the_samples_with_a_tap_on_their_planes(rng):
    """Double precision, 4 queues, |w| in two bands with empty planes between, and points
    exactly on every plane's edge (channel 0 at c: metres are wavelengths there): the
    masks are the samples with a tap on each slab as the planning places them, and the
    image and visibilities equal one device's to rounding."""
    freq = np.array([1.0, 1.3]) * C
    nrow = 900
    uvw = rng.uniform(-1, 1, (nrow, 3)) * np.array([2500.0, 2500.0, 1.0])
    uvw[:, 2] = np.where(rng.random(nrow) < 0.5, rng.uniform(0, 80, nrow), rng.uniform(450, 600, nrow))
    uvw[:2, 2] = [0.0, 600.0]
    kw = dict(epsilon=1e-9, do_wgridding=True, precision="double", **IMAGE)
    one = clgrid.WGridder(uvw, freq, device=DEVICE, **kw)
    g, half = one.geometry, one.geometry.kernel.support / 2.0
    edges = g.w_start + (np.arange(g.num_planes) + half) * g.dw
    edges = edges[(edges > 0) & (edges * 1.3 < 600.0)]
    rows = 2 + rng.choice(nrow - 2, 300, replace=False)
    uvw[rows, 2] = rng.choice(np.concatenate([edges, np.nextafter(edges, 0)]), rows.size) * \
        rng.choice([-1.0, 1.0], rows.size)
    one = clgrid.WGridder(uvw, freq, device=DEVICE, **kw)
    assert one.geometry == g
    host = stacked_positions(uvw, freq / C, None, (1.0, 1.0, 1.0), g, True)      # the planning's float64 twin
    planned = np.empty(nrow * freq.size, np.int64)
    planned[host["sample"]] = host["packed"][:, 3] & 0x7FFFFFFF
    first = imaging_split.first_planes(uvw, freq / C, None, g)
    assert np.array_equal(first.reshape(-1), planned)
    op = clgrid.WGridder(uvw, freq, device=[DEVICE] * 4, **kw)
    bounds = [(e.planes.start, e.planes.stop) for e in op.engines]
    masks = imaging_split.slab_masks(first, g, bounds)
    for (lo, hi), m, e in zip(bounds, masks, op.engines):
        taps = (planned[:, None] + np.arange(g.kernel.support)[None, :])
        assert np.array_equal(m.reshape(-1), np.any((taps >= lo) & (taps < hi), axis=1))
        assert e.num_kept == np.count_nonzero(m)
    vis = rng.normal(size=(nrow, 2)) + 1j * rng.normal(size=(nrow, 2))
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    assert relative_error(op.vis2dirty(vis), one.vis2dirty(vis)) <= 1e-12
    assert relative_error(op.dirty2vis(dirty), one.dirty2vis(dirty)) <= 1e-12


@pytest.mark.parametrize("precision", ["single", "double"])
def test_directions_balanced_at_other_slabs_each_take_their_own(rng, precision):
    """Weights that cut the two directions' slabs apart (taps almost free for vis2dirty,
    dear for dirty2vis): each device holds the samples of both its slabs, each direction's
    slabs partition the planes, progress counts each plane once, and image and
    visibilities are one device's (1e-6 single, rounding in double), bits repeated with
    ``deterministic``."""
    uvw, freq, vis, wgt, mask = wide_field(rng, 1200, precision=precision, masked=0.1)
    kw = dict(epsilon=1e-5 if precision == "single" else 1e-9, do_wgridding=True, mask=mask, center_x=0.01,
              precision=precision, **IMAGE)
    one = clgrid.WGridder(uvw, freq, device=DEVICE, **kw)
    tuning = {"split_sample_weight": 0.02, "split_sample_weight_dirty2vis": 50.0}
    op = clgrid.WGridder(uvw, freq, device=[DEVICE] * 3, tuning=tuning, **kw)
    g = op.geometry
    slabs = {d: [e.direction_planes[d] for e in op.engines] for d in ("vis2dirty", "dirty2vis")}
    assert slabs["vis2dirty"] != slabs["dirty2vis"]
    for ranges in slabs.values():                     # each direction: the planes cut in order
        taken = [r for r in ranges if len(r)]
        assert taken[0].start == 0 and taken[-1].stop == g.num_planes
        assert all(a.stop == b.start for a, b in zip(taken[:-1], taken[1:]))
    first = imaging_split.first_planes(uvw, freq / C, mask.astype(bool), g)
    for e, v, d in zip(op.engines, slabs["vis2dirty"], slabs["dirty2vis"]):
        held = [r for r in (v, d) if len(r)]
        assert e.planes == range(min(r.start for r in held), max(r.stop for r in held))
        assert e.num_kept == np.count_nonzero(imaging_split.touching(first, e.planes.start, e.planes.stop,
                                                                     g.kernel.support) & (first >= 0))
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(one.engines[0].real)
    calls = []
    image, predicted = op.vis2dirty(vis, wgt, progress=calls.append), op.dirty2vis(dirty, wgt)
    assert len(calls) == g.num_planes
    bound = 1e-6 if precision == "single" else 1e-12
    assert relative_error(image, one.vis2dirty(vis, wgt)) <= bound
    assert relative_error(predicted, one.dirty2vis(dirty, wgt)) <= bound
    assert not np.any(predicted[mask == 0])
    fixed = [clgrid.WGridder(uvw, freq, device=[DEVICE] * 3, tuning=tuning, deterministic=True, **kw)
             for _ in range(2)]
    runs = [(f.vis2dirty(vis, wgt), f.dirty2vis(dirty, wgt)) for f in fixed]
    assert all(np.array_equal(a.view(np.uint8), b.view(np.uint8)) for a, b in zip(*runs))


def test_stage_seconds_times_the_direction_planes_of_a_device(rng):
    """`ImagingEngine.stage_seconds` spreads (or interpolates) the planes the engine's
    vis2dirty (or dirty2vis) calls take, not every plane it holds the samples of."""
    uvw, freq, vis, wgt, _ = wide_field(rng, 600, precision="single")
    tuning = {"split_sample_weight": 0.02, "split_sample_weight_dirty2vis": 50.0}
    op = clgrid.WGridder(uvw, freq, device=[DEVICE] * 3, tuning=tuning, epsilon=1e-5, do_wgridding=True,
                         precision="single", **IMAGE)
    op.vis2dirty(vis, wgt)
    for e in op.engines:
        for direction, name, call in (("grid", "grid", "vis2dirty"), ("degrid", "degrid", "dirty2vis")):
            strategy = e.spreader if direction == "grid" else e.interpolator
            seen, real = [], getattr(strategy, name)
            setattr(strategy, name, lambda *args, plane, **kw: (seen.append(plane), real(*args, plane=plane, **kw))[1])
            try:
                e.stage_seconds(direction)
            finally:
                delattr(strategy, name)
            assert sorted(set(seen)) == [p for p in e.direction_planes[call]], (direction, e.planes)


def test_a_device_without_planes_in_a_direction_sits_its_calls_out(rng, monkeypatch):
    """Sixteen queues and weights far apart: some devices hold samples for one direction's
    slab only (the other's is empty); that direction's calls leave them out of the chain
    (no values sent, no image moved, no zeros added), and the image, visibilities and
    progress are still one device's."""
    from clgrid.imaging import engine as imaging_engine

    uvw, freq, vis, wgt, mask = wide_field(np.random.default_rng(5), 1200, precision="single", masked=0.1)
    kw = dict(epsilon=1e-5, do_wgridding=True, mask=mask, precision="single", **IMAGE)
    one = clgrid.WGridder(uvw, freq, device=DEVICE, **kw)
    op = clgrid.WGridder(uvw, freq, device=[DEVICE] * 16, **kw,
                         tuning={"split_sample_weight": 1e-3, "split_sample_weight_dirty2vis": 1e3})
    idle = {d: {id(e) for e in op.engines if not len(e.direction_planes[d])} for d in ("vis2dirty", "dirty2vis")}
    assert idle["dirty2vis"] and not idle["vis2dirty"]
    called = {"vis2dirty": [], "dirty2vis": []}
    for name in called:
        real = getattr(imaging_engine.ImagingEngine, name)
        monkeypatch.setattr(imaging_engine.ImagingEngine, name,
                            lambda self, *a, __real=real, __name=name, **k: (called[__name].append(id(self)),
                                                                             __real(self, *a, **k))[1])
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    steps = []
    image, predicted = op.vis2dirty(vis, wgt, progress=steps.append), op.dirty2vis(dirty, wgt)
    assert len(called["vis2dirty"]) == len(op.engines)
    assert sorted(called["dirty2vis"]) == sorted(id(e) for e in op.engines if id(e) not in idle["dirty2vis"])
    assert len(steps) == op.geometry.num_planes
    assert relative_error(image, one.vis2dirty(vis, wgt)) <= 1e-6
    assert relative_error(predicted, one.dirty2vis(dirty, wgt)) <= 1e-6
    assert not np.any(predicted[mask == 0])


def test_an_engine_refuses_direction_planes_outside_its_own():
    from clgrid.imaging.engine import _direction_planes

    held = range(3, 9)
    assert _direction_planes(None, held) == {"vis2dirty": held, "dirty2vis": held}
    assert _direction_planes({"dirty2vis": range(5, 9)}, held)["dirty2vis"] == range(5, 9)
    assert _direction_planes({"vis2dirty": range(4, 4)}, held)["vis2dirty"] == range(4, 4)
    for bad in ({"dirty2vis": range(2, 9)}, {"vis2dirty": range(3, 10)}, {"vis2dirty": (3, 9)},
                {"vis2dirty": range(3, 9, 2)}):
        with pytest.raises(ValueError, match="direction_planes"):
            _direction_planes(bad, held)
    with pytest.raises(ValueError, match="unknown direction"):
        _direction_planes({"grid": held}, held)


def test_progress_and_warnings_speak_for_the_whole_operator(rng):
    """Progress counts each plane once over the slabs; a device whose share has zero
    weight says nothing, and an image of nothing on every device warns once."""
    uvw, freq, vis, wgt, _ = wide_field(rng, 400, precision="single")
    op = clgrid.WGridder(uvw, freq, device=[DEVICE, DEVICE], split="rows", epsilon=1e-4, do_wgridding=True,
                         precision="single", **IMAGE)
    calls = []
    wgt[:200] = 0                                      # the first device's rows
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.any(op.vis2dirty(vis, wgt, progress=calls.append))
    assert calls == [1] * op.geometry.num_planes
    with pytest.warns(UserWarning, match="zero") as said:
        assert not np.any(op.vis2dirty(vis, np.zeros_like(wgt)))
    assert len([w for w in said if "zero" in str(w.message)]) == 1
    calls.clear()
    planes = clgrid.WGridder(uvw, freq, device=[DEVICE] * 3, epsilon=1e-4, do_wgridding=True, precision="single",
                             **IMAGE)
    planes.vis2dirty(vis, progress=calls.append)
    assert len(calls) == planes.geometry.num_planes
    # the second slab's samples all of zero weight: that device images nothing, and still
    # counts its planes (it returned without a word of them, and progress stopped short)
    g, last = planes.geometry, planes.engines[-1]
    first = imaging_split.first_planes(uvw, freq / C, None, g)
    weights = np.ones_like(wgt)
    weights[imaging_split.touching(first, last.planes.start, last.planes.stop, g.kernel.support)] = 0
    calls.clear()
    planes.vis2dirty(vis, weights, progress=calls.append)
    assert len(calls) == g.num_planes


def test_device_lists_refuse_what_cannot_work_naming_the_device(rng, monkeypatch):
    uvw, freq, vis, _, _ = wide_field(rng, 100, precision="single")
    kw = dict(epsilon=1e-5, do_wgridding=True, **IMAGE)
    with pytest.raises(ValueError, match=r"device=\[\]: an empty list"):
        clgrid.WGridder(uvw, freq, device=[], **kw)
    with pytest.raises(ValueError, match=r"device\[1\] = 'no such device"):
        clgrid.WGridder(uvw, freq, device=[DEVICE, "no such device"], **kw)
    with pytest.raises(ValueError, match="split must be one of"):
        clgrid.WGridder(uvw, freq, device=[DEVICE, DEVICE], split="facets", **kw)
    with pytest.raises(ValueError, match="split='planes' needs do_wgridding=True"):
        clgrid.WGridder(uvw, freq, device=[DEVICE, DEVICE], split="planes", **dict(kw, do_wgridding=False))
    real = imaging_devices.device_facts
    seen = []

    def second_lacks(what):
        def facts(device):                   # the second device check_devices looks at lacks ``what``
            found = real(device)
            if sys._getframe(1).f_code.co_name != "check_devices":
                return found
            seen.append(device)
            return dataclasses.replace(found, **what) if len(seen) % 2 == 0 else found
        return facts

    monkeypatch.setattr(imaging_devices, "device_facts", second_lacks(dict(fp64=False)))
    with pytest.raises(clgrid.DeviceCapabilityError, match=r"device\[1\] \(.*\): precision='double' needs"):
        clgrid.WGridder(uvw, freq, device=[DEVICE, DEVICE], precision="double", **kw)
    clgrid.WGridder(uvw, freq, device=[DEVICE, DEVICE], precision="single", **kw)     # single needs no fp64
    seen.clear()
    monkeypatch.setattr(imaging_devices, "device_facts", second_lacks(dict(global_memory=1 << 16)))
    with pytest.raises(clgrid.DeviceCapabilityError, match=r"device\[1\] \(.*\): its share of the operator needs"):
        clgrid.WGridder(uvw, freq, device=[DEVICE, DEVICE], precision="single", **kw)


def test_row_bounds_and_slab_bounds_share_out_everything(rng):
    keep = rng.random((1000, 3)) > 0.3
    keep[400:700] = False
    for parts in (1, 2, 3, 7):
        bounds = imaging_split.row_bounds(keep, 1000, 3, parts)
        assert len(bounds) == parts and bounds[0][0] == 0 and bounds[-1][1] == 1000
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
        counts = [np.count_nonzero(keep[a:b]) for a, b in bounds]
        assert max(counts) - min(counts) <= 2 * 3
    assert imaging_split.row_bounds(None, 2, 4, 3) == [(0, 1), (1, 2), (2, 2)]


def test_a_sample_of_rows_balances_as_all_rows_do(rng):
    """A planes split balanced on a sample of the rows (`wgridding._balance_rows`: random,
    not every k-th, which on time-ordered tracks sees few baselines) with the planes the
    exact |w| range reaches (`split.active_planes`: a sample misses the few samples of the
    highest planes, whose FFTs cost as much as any) cuts where all rows do, within a plane,
    for |w| without gaps between its extremes (as tracks give)."""
    from clgrid.imaging.geometry import abs_w_range, choose_geometry
    from clgrid.imaging.wgridding import _balance_rows

    nrow, nchan = 400_000, 4
    scale = np.linspace(1.3e9, 1.5e9, nchan) / C
    # most |w| small, few large, none missing up to the longest (an array's tracks: no gaps)
    w = 1500.0 * rng.random(nrow) ** 4 * rng.choice([-1.0, 1.0], nrow)
    uvw = np.column_stack([rng.uniform(-4e3, 4e3, (nrow, 2)), w])
    w_range = abs_w_range(uvw, scale, None)
    g = choose_geometry(2048, 2048, 1e-4, 1e-4, 1e-4, True, w_range, nrow * nchan, False, False, 0.0, 0.0, 1.1, 2.6,
                        "single", True)
    assert g.num_planes > 100, g.num_planes
    every = imaging_split.plane_counts(imaging_split.first_planes(uvw, scale, None, g), g)
    rows = _balance_rows(nrow, nchan)
    assert rows.size < nrow and np.all(np.diff(rows) >= 0)
    sampled = imaging_split.plane_counts(imaging_split.first_planes(uvw[rows], scale, None, g), g) * (nrow / rows.size)
    active = imaging_split.active_planes(w_range, g)
    reached = np.convolve(every, np.ones(g.kernel.support))[:g.num_planes] > 0
    assert np.array_equal(active, reached)        # (where |w| leaves no plane empty between its extremes)
    for slabs in (2, 3, 4):
        exact = imaging_split.slab_bounds(every, g, slabs, sample_weight=2.0)
        estimate = imaging_split.slab_bounds(sampled, g, slabs, sample_weight=2.0, active=active)
        assert max(abs(a[1] - b[1]) for a, b in zip(exact, estimate)) <= 1, (exact, estimate)
    assert _balance_rows(1000, 4) == slice(None)


def test_calls_on_one_operator_from_two_threads_take_turns(rng):
    """A vis2dirty and a dirty2vis of one planes-split operator from two threads: each
    device's engine waits for another device of its call while holding its lock, and the
    two directions chain the devices in opposite orders, so overlapping calls could each
    hold what the other waits for (a deadlock, seen with the interleaving forced).  The
    second call enters no device before the first returned, and both results are right."""
    import threading
    import time

    uvw, freq, vis, wgt, mask = wide_field(rng, 900, precision="single", masked=0.1)
    kw = dict(epsilon=1e-5, do_wgridding=True, precision="single", **IMAGE)
    one = clgrid.WGridder(uvw, freq, device=DEVICE, **kw)
    op = clgrid.WGridder(uvw, freq, device=[DEVICE] * 2, split="planes", **kw)
    e0, e1 = op.engines
    imaging, overlapped = threading.Event(), []
    real_v0, real_d1 = e0._vis2dirty, e1._dirty2vis

    def slow_v0(*a, **k):                # device 0's share of the vis2dirty, its engine's lock held
        imaging.set()
        time.sleep(0.5)
        try:
            return real_v0(*a, **k)
        finally:
            imaging.clear()

    def d1(*a, **k):
        overlapped.append(imaging.is_set())
        return real_d1(*a, **k)

    e0._vis2dirty, e1._dirty2vis = slow_v0, d1
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    results = {}
    first = threading.Thread(target=lambda: results.update(image=op.vis2dirty(vis, wgt)), daemon=True)
    first.start()
    assert imaging.wait(60)
    second = threading.Thread(target=lambda: results.update(vis=op.dirty2vis(dirty, wgt)), daemon=True)
    second.start()
    first.join(60)
    second.join(60)
    assert sorted(results) == ["image", "vis"] and overlapped == [False]
    assert relative_error(results["image"], one.vis2dirty(vis, wgt)) <= 1e-6
    assert relative_error(results["vis"], one.dirty2vis(dirty, wgt)) <= 1e-6


@pytest.mark.parametrize("direction", ["vis2dirty", "dirty2vis"])
def test_a_failing_device_is_the_error_raised(rng, monkeypatch, direction):
    """One device of a planes split fails: the device that would add its share after it
    (into an output nothing wrote: here a stale one of inf, as a recycled pinned block of
    an overflowed call holds) adds nothing, and the caller gets the real error, not an
    overflow reported on that output."""
    from clgrid.device import transfer
    from clgrid.imaging import wgridding as imaging_wgridding

    real_empty = transfer.host_empty

    def stale(shape, dtype, staging):
        out = real_empty(shape, dtype, staging)
        out[...] = np.inf
        return out

    monkeypatch.setattr(imaging_wgridding, "host_empty", stale)
    uvw, freq, vis, wgt, mask = wide_field(rng, 900, precision="single", masked=0.1)
    op = clgrid.WGridder(uvw, freq, device=[DEVICE] * 3, split="planes", epsilon=1e-5, do_wgridding=True,
                         precision="single", **IMAGE)
    assert len(op.engines) == 3
    # the device whose share the others' sums wait for: vis2dirty's last-but-one adds after the
    # last, dirty2vis's second after the first
    failing = op.engines[1]

    def lost(*args, **kwargs):
        raise RuntimeError("device lost")

    monkeypatch.setattr(failing, "_vis2dirty" if direction == "vis2dirty" else "_dirty2vis", lost)
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    with pytest.raises(RuntimeError, match="device lost"):
        op.vis2dirty(vis) if direction == "vis2dirty" else op.dirty2vis(dirty)


def recorded_results(monkeypatch, *modules) -> list:
    """The arrays ``host_empty`` gives in ``modules`` (results are written into them), in order."""
    from clgrid.device import transfer

    real_empty, made = transfer.host_empty, []

    def recording(shape, dtype, staging):
        made.append(real_empty(shape, dtype, staging))
        return made[-1]

    for module in modules:
        monkeypatch.setattr(module, "host_empty", recording)
    return made


def reported_count(error) -> int:
    """The count a `NonFiniteResultError` names ("N values of ... are inf or NaN ...")."""
    return int(str(error.value).split()[0])


@pytest.mark.parametrize("device", [DEVICE, [DEVICE, DEVICE]])
def test_an_overflow_in_added_shares_is_counted_once(rng, monkeypatch, device):
    """A planes split's dirty2vis adds the second device's share into the first's output:
    huge weights on samples with taps only on the last device's planes overflow there, and
    the error counts the non-finite visibilities of the output, each once (the tally of
    non-finite shares was added to the count of non-finite sums, up to 3 per visibility).
    One device (which writes, its tally the count) is the guard."""
    from clgrid.imaging import engine as imaging_engine
    from clgrid.imaging import wgridding as imaging_wgridding

    uvw, freq, vis, wgt, _ = wide_field(rng, int(rng.integers(600, 900)), precision="single")
    op = clgrid.WGridder(uvw, freq, device=device, split="planes", epsilon=1e-5, do_wgridding=True,
                         precision="single", **IMAGE)
    first = imaging_split.first_planes(uvw, freq / C, None, op.geometry)
    last = first >= op.engines[-1].planes.start          # no tap on an earlier device's planes
    assert 0 < np.count_nonzero(last) < last.size or not isinstance(device, list)
    wgt[last] = 1e38                                     # finite in float32; times the share, not
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    made = recorded_results(monkeypatch, imaging_engine, imaging_wgridding)
    with pytest.raises(NonFiniteResultError, match="visibilities") as error:
        op.dirty2vis(dirty, wgt)
    out = [a for a in made if a.shape == vis.shape][0]
    bad = ~np.isfinite(out)
    assert bad.any() and not bad[~last].any()
    assert reported_count(error) == np.count_nonzero(bad)


def test_an_overflow_in_an_added_image_is_counted_once(rng, monkeypatch):
    """vis2dirty on a device list adds each device's image to the next one's as it comes
    down (the device FFT's path): huge values in the first device's rows make its image
    non-finite, and the error counts the non-finite pixels of the sum, each once (the
    device's own tally was added to the count of non-finite sums: twice each)."""
    from clgrid.imaging import wgridding as imaging_wgridding

    uvw, freq, vis, wgt, _ = wide_field(rng, int(rng.integers(600, 900)), precision="single")
    op = clgrid.WGridder(uvw, freq, device=[DEVICE, DEVICE], split="rows", epsilon=1e-5, do_wgridding=True,
                         precision="single", tuning={"fft": "mapped"}, **IMAGE)
    assert len(op.engines) == 2 and all(e.device_fft is not None for e in op.engines)
    vis[op._rows[0]] *= np.float32(1e37)                   # finite; their sums on the grid are not
    made = recorded_results(monkeypatch, imaging_wgridding)
    with pytest.raises(NonFiniteResultError, match="image") as error:
        op.vis2dirty(vis, wgt)
    bad = np.count_nonzero(~np.isfinite(made[0]))
    assert bad > 0 and reported_count(error) == bad


def test_two_finite_images_whose_sum_overflows_are_counted(rng, monkeypatch):
    """Each device's image finite (up to 0.6 of float32's largest; one device's operator
    on its rows makes it without complaint), their sum not: the device that adds counts
    the non-finite sums (finish's tally[2]), not its own image's non-finite pixels (none
    here), and the error names as many as the image holds.  A point source where the
    grid correction is least (a corner: divided by the correction before the sum, the
    image there is larger than on the device)."""
    from clgrid.imaging import wgridding as imaging_wgridding

    uvw, freq, _, _, _ = wide_field(rng, int(rng.integers(600, 900)), precision="single")
    # (one plane: no partial sums of planes beyond the image's largest value)
    kw = dict(epsilon=1e-5, do_wgridding=False, precision="single", tuning={"fft": "mapped"}, **IMAGE)
    op = clgrid.WGridder(uvw, freq, device=[DEVICE, DEVICE], split="rows", **kw)
    assert len(op.engines) == 2 and all(e.device_fft is not None for e in op.engines)
    source = np.zeros((IMAGE["npix_x"], IMAGE["npix_y"]), np.float32)
    source[np.unravel_index(np.argmin(op.engine.pixels.correction_rows(slice(None))), source.shape)] = 1
    vis = clgrid.WGridder(uvw, freq, device=DEVICE, **kw).dirty2vis(source)
    alone = [clgrid.WGridder(uvw[rows], freq, device=DEVICE, **kw) for rows in op._rows]
    largest = max(float(np.abs(a.vis2dirty(vis[rows])).max()) for a, rows in zip(alone, op._rows))
    vis *= np.float32(0.6 * np.finfo(np.float32).max / largest)
    for a, rows in zip(alone, op._rows):
        assert np.all(np.isfinite(a.vis2dirty(vis[rows])))
    made = recorded_results(monkeypatch, imaging_wgridding)
    with pytest.raises(NonFiniteResultError, match="image") as error:
        op.vis2dirty(vis)
    bad = np.count_nonzero(~np.isfinite(made[0]))
    assert bad > 0 and reported_count(error) == bad


def test_two_operators_called_from_two_threads_say_their_own_warnings(rng):
    """Two device-list operators called at once from two threads, in the interleaving that
    broke the gathering through `warnings.catch_warnings` (process-wide state: A's gathering
    starts, B's starts, A's devices warn and A's call returns, then B's devices warn): A,
    whose every device images nothing, says it once, from its call; B, one of whose
    devices images nothing, says nothing.  (Before, A's warnings went into B's gathering,
    B's device warned past it, and what B then said went to A's finished list.)"""
    import threading

    uvw, freq, vis, wgt, _ = wide_field(rng, int(rng.integers(300, 500)), precision="single")
    kw = dict(device=[DEVICE, DEVICE], split="rows", epsilon=1e-4, do_wgridding=True, precision="single", **IMAGE)
    a, b = clgrid.WGridder(uvw, freq, **kw), clgrid.WGridder(uvw, freq, **kw)
    wgt_b = wgt.copy()
    wgt_b[b._rows[1]] = 0                                   # B's second device: nothing to image
    a_calling, b_calling, a_returned = threading.Event(), threading.Event(), threading.Event()
    for e in a.engines:
        held_until(e, "_vis2dirty", a_calling, b_calling)      # A's devices warn once B's call is in
    for e in b.engines:
        held_until(e, "_vis2dirty", b_calling, a_returned)     # B's once A's call returned
    results, line = {}, [None]

    def call_a():
        line[0] = sys._getframe().f_lineno + 1
        results["a"] = a.vis2dirty(vis, np.zeros_like(wgt))
        a_returned.set()

    def call_b():
        assert a_calling.wait(60)
        results["b"] = b.vis2dirty(vis, wgt_b)

    said = warnings_of_two_threads(call_a, call_b)
    assert sorted(results) == ["a", "b"]
    assert not np.any(results["a"]) and np.any(results["b"])
    assert [(w.category, w.filename, w.lineno) for w in said] == [(EmptyInputWarning, __file__, line[0])]
    assert "every unmasked visibility times its weight is zero" in str(said[0].message)


def test_planes_per_direction_partitions_add_up_to_the_whole(rng):
    """``WGridder(planes={"vis2dirty": .., "dirty2vis": ..})`` on one device: two operators
    whose directions cut the planes at other places hold the samples of the union of
    their planes, and each direction's two calls add up to the whole operator's (rounding,
    in double); a part with no planes in a direction gives zeros there."""
    uvw, freq, vis, wgt, mask = wide_field(rng, 900, precision="double", masked=0.1)
    kw = dict(epsilon=1e-9, do_wgridding=True, mask=mask, center_x=0.01, precision="double", **IMAGE)
    whole = clgrid.WGridder(uvw, freq, device=DEVICE, **kw)
    g = whole.geometry
    assert g.num_planes >= 6
    a, b = g.num_planes // 3, 2 * g.num_planes // 3
    low = clgrid.WGridder(uvw, freq, device=DEVICE, geometry=g, planes={"vis2dirty": (0, a), "dirty2vis": (0, b)}, **kw)
    high = clgrid.WGridder(uvw, freq, device=DEVICE, geometry=g,
                           planes={"vis2dirty": (a, g.num_planes), "dirty2vis": (b, g.num_planes)}, **kw)
    assert (low.planes, high.planes) == (range(0, b), range(a, g.num_planes))
    first = imaging_split.first_planes(uvw, freq / C, mask.astype(bool), g)
    for op in (low, high):
        held = imaging_split.touching(first, op.planes.start, op.planes.stop, g.kernel.support) & (first >= 0)
        assert op.engine.num_kept == np.count_nonzero(held)
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    assert relative_error(low.vis2dirty(vis, wgt) + high.vis2dirty(vis, wgt), whole.vis2dirty(vis, wgt)) <= 1e-12
    assert relative_error(low.dirty2vis(dirty, wgt) + high.dirty2vis(dirty, wgt), whole.dirty2vis(dirty, wgt)) <= 1e-12
    none = clgrid.WGridder(uvw, freq, device=DEVICE, geometry=g, planes={"vis2dirty": (a, a), "dirty2vis": (0, b)},
                           **kw)
    assert not np.any(none.vis2dirty(vis, wgt))
    assert relative_error(none.dirty2vis(dirty, wgt), low.dirty2vis(dirty, wgt)) <= 1e-14


@pytest.mark.parametrize("planes, match", [
    ({"vis2dirty": (0, 2), "degrid": (0, 2)}, "keys"),
    ({}, "keys"),
    ({"vis2dirty": (2, 1)}, r"planes\['vis2dirty'\]"),
    ({"dirty2vis": (0, 10 ** 6)}, r"planes\['dirty2vis'\]"),
    ({"vis2dirty": (1, 1), "dirty2vis": (3, 3)}, "some direction a plane"),
    ((3, 1), "planes must be"),
])
def test_bad_planes_per_direction_are_refused_by_name(rng, planes, match):
    uvw, freq, _, _, _ = wide_field(rng, 200, precision="single")
    kw = dict(epsilon=1e-5, do_wgridding=True, precision="single", **IMAGE)
    g = clgrid.WGridder(uvw, freq, device=DEVICE, **kw).geometry
    with pytest.raises(ValueError, match=match):
        clgrid.WGridder(uvw, freq, device=DEVICE, geometry=g, planes=planes, **kw)


@pytest.mark.parametrize("split", ["planes", "rows"])
def test_planes_per_direction_on_a_device_list_give_the_one_devices(rng, monkeypatch, split):
    """``planes`` per direction with a device list (a `clgrid.dask` slab task's operator on a
    worker that holds several devices): each direction's planes cut between the devices
    (split by planes) or taken by each (by rows), the image and visibilities those of one
    device with the same planes (rounding, in double); a direction with no planes gives
    zeros, every entry written (results poisoned)."""
    from clgrid.imaging import wgridding as imaging_wgridding

    poison_results(monkeypatch, imaging_wgridding)
    uvw, freq, vis, wgt, mask = wide_field(rng, 900, precision="double", masked=0.1)
    kw = dict(epsilon=1e-9, do_wgridding=True, mask=mask, precision="double", **IMAGE)
    g = clgrid.WGridder(uvw, freq, device=DEVICE, **kw).geometry
    a, b = g.num_planes // 3, 2 * g.num_planes // 3
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    for planes in ({"vis2dirty": (0, b), "dirty2vis": (a, g.num_planes)}, {"vis2dirty": (a, a), "dirty2vis": (0, b)},
                   {"vis2dirty": (0, b), "dirty2vis": (b, b)}):
        one = clgrid.WGridder(uvw, freq, device=DEVICE, geometry=g, planes=planes, **kw)
        two = clgrid.WGridder(uvw, freq, device=[DEVICE, DEVICE], geometry=g, planes=planes, split=split, **kw)
        assert two.planes == one.planes and len(two.engines) == 2
        for direction, (lo, hi) in planes.items():
            taken = sorted(p for e in two.engines for p in e.direction_planes[direction])
            assert taken == sorted(list(range(lo, hi)) * (2 if split == "rows" else 1)), (direction, taken)
        for got, want in ((two.vis2dirty(vis, wgt), one.vis2dirty(vis, wgt)),
                          (two.dirty2vis(dirty, wgt), one.dirty2vis(dirty, wgt))):
            assert np.all(np.isfinite(got))
            assert (not np.any(got) and not np.any(want)) or relative_error(got, want) <= 1e-12
        assert np.any(one.dirty2vis(dirty, wgt)) or np.any(one.vis2dirty(vis, wgt))


def test_direction_slabs_are_each_directions_slab_bounds_paired(rng):
    """`direction_slabs`: each direction's slabs are `slab_bounds` with its own weight, and
    a slab holds from the lowest to the highest plane of its pair."""
    uvw, freq, _, _, _ = wide_field(rng, 1500, precision="single")
    g = clgrid.WGridder(uvw, freq, device=DEVICE, epsilon=1e-5, do_wgridding=True, precision="single",
                        **IMAGE).geometry
    counts = imaging_split.plane_counts(imaging_split.first_planes(uvw, freq / C, None, g), g)
    weights = {"vis2dirty": 0.02, "dirty2vis": 50.0}
    slabs = imaging_split.direction_slabs(counts, g, 3, weights)
    for d in ("vis2dirty", "dirty2vis"):
        assert [calls[d] for _, calls in slabs] == imaging_split.slab_bounds(counts, g, 3, sample_weight=weights[d])
    assert any(calls["vis2dirty"] != calls["dirty2vis"] for _, calls in slabs)
    for held, calls in slabs:
        taken = [s for s in calls.values() if s[0] < s[1]]
        assert held == (min(lo for lo, _ in taken), max(hi for _, hi in taken))


def test_dask_slab_weights_fall_back_to_the_device_lists():
    """`sample_weight` over "dask": ``tuning``'s Dask key, else its device-list key, else the
    table's Dask key, where 0 (generic) means the device list's; over "devices" the Dask
    keys are never read; bad values refused as any tuning override."""
    from clgrid.device.tuning import TuningTableError

    from clgrid.device.tuning import resolve_tuning

    weight = imaging_devices.sample_weight
    table = {d: weight(DEVICE, None, d) for d in ("vis2dirty", "dirty2vis")}
    facts = imaging_devices.device_facts(imaging_devices.select_device(DEVICE))
    own = resolve_tuning("wgridding", None, facts)["dask_split_sample_weight"]    # generic 0, an H100's 1.5
    assert weight(DEVICE, None, "vis2dirty", over="dask") == (own or table["vis2dirty"])     # 0: the list's
    assert weight(DEVICE, {"split_sample_weight": 2.5}, "vis2dirty", over="dask") == 2.5
    assert weight(DEVICE, {"split_sample_weight": 2.5, "dask_split_sample_weight": 0.5}, over="dask") == 0.5
    assert weight(DEVICE, {"dask_split_sample_weight_dirty2vis": 0.25}, "dirty2vis", over="dask") == 0.25
    assert weight(DEVICE, {"dask_split_sample_weight": 0.5}, "vis2dirty") == table["vis2dirty"]
    # 0 in ``tuning`` means what the table's 0 means: the device list's (``tuning``'s, else the table's)
    assert weight(DEVICE, {"dask_split_sample_weight": 0.0}, over="dask") == table["vis2dirty"]
    assert weight(DEVICE, {"dask_split_sample_weight_dirty2vis": 0.0, "split_sample_weight_dirty2vis": 3.0},
                  "dirty2vis", over="dask") == 3.0
    with pytest.raises(TuningTableError, match="dask_split_sample_weight"):
        weight(DEVICE, {"dask_split_sample_weight": "heavy"}, over="dask")
    with pytest.raises(ValueError, match="over one of"):
        weight(DEVICE, None, over="threads")


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_sparse_share_chooses_who_picks_a_parts_values_not_the_result(rng, share):
    """`[wgridding] sparse_share` (tuning): a device's share of the planes that keeps fewer
    than that share of its rows' samples has its values picked by the host each call (0:
    never, every sample goes up; 1: wherever it keeps fewer than all), and the image and
    visibilities are one device's either way (the prefetch of a one-call list follows the
    same choice)."""
    uvw, freq, vis, wgt, mask = wide_field(rng, 1200, precision="single", masked=0.1)
    kw = dict(epsilon=1e-5, do_wgridding=True, mask=mask, precision="single", **IMAGE)
    one = clgrid.WGridder(uvw, freq, device=DEVICE, **kw)
    op = clgrid.WGridder(uvw, freq, device=[DEVICE] * 3, tuning={"sparse_share": share}, **kw)
    picked = [part.index is not None for e in op.engines for part in e._parts]
    assert all(e.sparse_share == share for e in op.engines)
    assert picked == [share == 1.0] * len(picked)          # (every share keeps fewer than all: masked, sliced by planes)
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    assert relative_error(op.vis2dirty(vis, wgt), one.vis2dirty(vis, wgt)) <= 1e-6
    assert relative_error(op.dirty2vis(dirty, wgt), one.dirty2vis(dirty, wgt)) <= 1e-6
    called = clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, wgt=wgt, device=[DEVICE] * 3, tuning={"sparse_share": share},
                              **{k: v for k, v in kw.items() if k != "precision"})     # (single: vis's dtype says)
    assert relative_error(called, one.vis2dirty(vis, wgt)) <= 1e-6
