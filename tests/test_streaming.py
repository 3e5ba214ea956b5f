"""Points beyond the device (clgrid/imaging/stream.py, `ImagingEngine`'s streaming): an
operator whose points do not fit its device's memory at once takes them through it slab
by slab of w-planes (a plane's rows in groups where its own points do not fit), and its
image and visibilities agree with ducc0 at epsilon=1e-12 within epsilon and with the same
operator on a device that holds them all; every buffer live at once stays within the
device.  The real PoCL limit (POCL_MEMORY_LIMIT) runs in a subprocess."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import clgrid
from clgrid.imaging import engine as engine_module
from clgrid.imaging import stream as stream_module
from clgrid.imaging.geometry import choose_geometry
from clgrid.imaging.split import first_planes
from clgrid.imaging.stream import stream_schedule
from clgrid.tools.buffers import BufferTracker
from conftest import relative_error, wide_field

ducc0_wgridder = pytest.importorskip("ducc0.wgridder", reason="ducc0 is the oracle (the compare extra)")

DEVICE = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
IMAGE = dict(npix_x=64, npix_y=48, pixsize_x=4e-3, pixsize_y=5e-3)


def small_device(monkeypatch, memory: int):
    """The engine sees its device with ``memory`` bytes of global memory."""
    real = engine_module.device_facts
    monkeypatch.setattr(engine_module, "device_facts",
                        lambda device: dataclasses.replace(real(device), global_memory=memory))


@pytest.mark.parametrize("keywords,device", [
    (dict(do_wgridding=True, center_x=0.01, flip_v=True), DEVICE),
    (dict(do_wgridding=True, flip_u=True, divide_by_n=False, tuning={"fft": "mapped"}), DEVICE),
    (dict(do_wgridding=True, precision="single", center_y=-0.02), [DEVICE, DEVICE]),
    (dict(do_wgridding=True, center_x=-0.01,            # the two directions' slabs apart (test_devices)
          tuning={"split_sample_weight": 0.02, "split_sample_weight_dirty2vis": 50.0}), [DEVICE, DEVICE, DEVICE]),
    (dict(do_wgridding=False, tuning={"spread": "bins"}), DEVICE),
])
def test_points_beyond_the_device_are_streamed_and_agree_with_ducc0_and_the_kept_operator(rng, monkeypatch,
                                                                                         keywords, device):
    """1.5 MiB of device memory for 24000 samples whose points need 3.5 to 7: the engine
    streams (several slabs with w; without w, the one plane's rows in groups), says so,
    never holds more than the device, and its results are the kept operator's."""
    uvw, freq, vis, wgt, mask = wide_field(rng, 1500, np.linspace(1.0e8, 1.6e8, 16), masked=0.1)
    single = keywords.get("precision") == "single"
    eps = 1e-4 if single else 1e-7
    args = dict(uvw=uvw, freq=freq, mask=mask, epsilon=eps, **IMAGE, **keywords)
    kept = clgrid.WGridder(device=device, **args)
    assert all(e.streamed is None for e in kept.engines)
    memory = 3 << 19
    small_device(monkeypatch, memory)
    live = BufferTracker().install(monkeypatch)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        op = clgrid.WGridder(device=device, **args)
    streamed = [e.streamed for e in op.engines]
    assert all(s is not None and s.replanned for s in streamed)
    assert [w for w in said if issubclass(w.category, clgrid.StreamedWarning)
            and "streamed through it" in str(w.message)]
    if keywords["do_wgridding"]:
        assert all(s.slabs > 1 for s in streamed)
    else:
        assert streamed[0].slabs == 1 and streamed[0].groups > 1
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    image, got_vis = op.vis2dirty(vis, wgt), op.dirty2vis(dirty, wgt)
    for e in op.engines:
        assert e.device_bytes() <= memory * stream_module.DEVICE_SHARE
    # every buffer of both engines (device lists: two) live at once
    assert live.peak <= len(op.engines) * memory * stream_module.DEVICE_SHARE, live.peak
    same = 1e-5 if single else 1e-12
    image2, vis2 = op.vis2dirty(vis, wgt), op.dirty2vis(dirty, wgt)      # again: planned again, the same
    assert relative_error(image2, image) <= same and relative_error(vis2, got_vis) <= same
    monkeypatch.undo()
    assert relative_error(image, kept.vis2dirty(vis, wgt)) <= same
    assert relative_error(got_vis, kept.dirty2vis(dirty, wgt)) <= same
    ducc = {k: v for k, v in args.items() if k not in ("epsilon", "precision", "tuning")}
    d2v = {k: v for k, v in ducc.items() if not k.startswith("npix")}
    ref = ducc0_wgridder.vis2dirty(vis=vis, wgt=wgt, epsilon=1e-12, **ducc)
    ref_vis = ducc0_wgridder.dirty2vis(dirty=dirty, wgt=wgt, epsilon=1e-12, **d2v)
    assert relative_error(image, ref) <= eps
    assert relative_error(got_vis, ref_vis) <= eps


def test_the_schedule_covers_every_plane_and_row_within_its_capacity(rng):
    uvw, freq, _, _, mask = wide_field(rng, 700, np.linspace(1.0e8, 1.6e8, 5), masked=0.1)
    keep = mask != 0
    scale = freq / 299792458.0
    w = np.abs(uvw[:, 2:3] * scale)
    g = choose_geometry(64, 48, 4e-3, 5e-3, 1e-6, True, (w[keep].min(), w[keep].max()), int(keep.sum()))
    first = first_planes(uvw, scale, keep, g)
    support = g.kernel.support
    for capacity in (50, 400, 10 ** 6):
        slabs, touch, kept = stream_schedule(uvw, scale, keep, g, range(g.num_planes), capacity)
        assert kept == keep.sum()
        assert [p for s in slabs for p in s.planes] == list(range(g.num_planes))
        for s in slabs:
            touching = (first >= s.planes.start - support + 1) & (first < s.planes.stop) & (first >= 0)
            assert s.points == touching.sum()
            rows = [r for group in s.groups for r in range(*group.indices(uvw.shape[0]))]
            assert rows == list(range(uvw.shape[0]))
            if len(s.groups) > 1:
                assert len(s.planes) == 1 and s.points > capacity
            for group in s.groups:
                assert touching[group].sum() <= capacity or group.stop - group.start == 1
        for p in range(g.num_planes):
            assert touch[p] == ((first >= p - support + 1) & (first <= p) & (first >= 0)).sum()
        assert (capacity >= kept) == (len(slabs) == 1 and len(slabs[0].groups) == 1)


def test_a_device_that_cannot_hold_the_grid_and_one_part_is_refused_by_name(rng, monkeypatch):
    uvw, freq, vis, wgt, mask = wide_field(rng, 200, np.linspace(1.0e8, 1.6e8, 16), masked=0.1)
    small_device(monkeypatch, 1 << 14)
    with pytest.raises(clgrid.DeviceCapabilityError, match=r"grid and one part of \d+ samples' set-up need"):
        clgrid.WGridder(uvw, freq, epsilon=1e-6, device=DEVICE, do_wgridding=True, **IMAGE)


VIS_BEYOND_THE_DEVICE = textwrap.dedent("""
    import json, sys, warnings
    import numpy as np
    import pytest
    import clgrid, ducc0.wgridder as wg
    from clgrid.device.runtime import device_facts, get_queue
    from clgrid.tools.buffers import BufferTracker
    rng = np.random.default_rng(int(sys.argv[1]))
    nrow, nchan, eps = 3000, 5600, 1e-5
    freq = np.linspace(1.0e8, 1.5e8, nchan)
    uvw = rng.uniform(-1, 1, (nrow, 3)) * np.array([2500.0, 2500.0, 600.0])
    vis = rng.normal(size=(nrow, nchan)) + 1j * rng.normal(size=(nrow, nchan))
    wgt = rng.uniform(0.5, 1.0, (nrow, nchan))
    n, pix = 48, 0.4 / (2500 * 1.5e8 / 299792458.0)
    facts = device_facts(get_queue("pocl").device)
    live = BufferTracker().install(pytest.MonkeyPatch())
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        op = clgrid.WGridder(uvw, freq, n, n, pix, pix, eps, False, device="pocl", nthreads=2)
    image = op.vis2dirty(vis, wgt)
    dirty = rng.normal(size=(n, n))
    got_vis = op.dirty2vis(dirty, wgt)
    kw = dict(uvw=uvw, freq=freq, wgt=wgt, pixsize_x=pix, pixsize_y=pix, do_wgridding=False, epsilon=1e-12,
              nthreads=2)
    ref, ref_vis = wg.vis2dirty(vis=vis, npix_x=n, npix_y=n, **kw), wg.dirty2vis(dirty=dirty, **kw)
    err = lambda a, b: float(np.linalg.norm(a - b) / np.linalg.norm(b))
    e = op.engine
    print(json.dumps(dict(max_allocation=facts.max_allocation, global_memory=facts.global_memory,
                          vis_bytes=vis.size * 16, every_point=e.device_bytes() if e.streamed is None
                          else e.streamed.every_point, streamed=e.streamed is not None and vars(e.streamed),
                          warned=[str(w.message) for w in said if issubclass(w.category, clgrid.StreamedWarning)],
                          peak=live.peak, image_error=err(image, ref), vis_error=err(got_vis, ref_vis))))
""")


@pytest.mark.slow
@pytest.mark.skipif(DEVICE != "pocl", reason="POCL_MEMORY_LIMIT shrinks PoCL's device only")
def test_visibilities_beyond_one_pocl_buffer_and_the_device_are_streamed(rng):
    """POCL_MEMORY_LIMIT=1 (GB): PoCL's device reports 1 GiB, its largest buffer 256 MiB.
    1.68e7 samples: the visibilities (complex128) 269 MB, beyond one buffer; their points
    about 1.6 GiB, beyond the device.  (PoCL does not refuse more than its global memory
    in all: the buffers live at once are counted.)"""
    env = dict(os.environ, POCL_MEMORY_LIMIT="1", PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", VIS_BEYOND_THE_DEVICE, str(int(rng.integers(2 ** 31)))],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["max_allocation"] == 2 ** 28 and got["global_memory"] == 2 ** 30
    assert got["vis_bytes"] > got["max_allocation"] and got["every_point"] > got["global_memory"]
    assert got["streamed"] and got["warned"] and "streamed through it" in got["warned"][0]
    assert got["peak"] <= got["global_memory"] * 0.9
    assert got["image_error"] <= 1e-5 and got["vis_error"] <= 1e-5


def test_no_buffer_passes_the_largest_the_device_allows(rng, monkeypatch):
    """A 1 MiB largest buffer and epsilon 1e-12 in double: the "rows" spread keeps 2 W = 32
    doubles a point, so its parts are cut by those, not by the plan's 16 bytes a sample."""
    uvw, freq, vis, wgt, mask = wide_field(rng, 1500, np.linspace(1.0e8, 1.6e8, 16), masked=0.1)
    largest = 1 << 20
    real = engine_module.device_facts
    monkeypatch.setattr(engine_module, "device_facts",
                        lambda device: dataclasses.replace(real(device), max_allocation=largest))
    live = BufferTracker().install(monkeypatch)
    sizes, made = [], live._made
    monkeypatch.setattr(live, "_made", lambda key, size: (sizes.append(size), made(key, size)))
    args = dict(uvw=uvw, freq=freq, mask=mask, epsilon=1e-12, do_wgridding=True, **IMAGE)
    op = clgrid.WGridder(device=DEVICE, tuning={"spread": "rows"}, **args)
    assert op.engine.geometry.kernel.support >= 12 and len(op.plans) > 1
    image = op.vis2dirty(vis, wgt)
    assert max(sizes) <= largest, max(sizes)
    ducc = {k: v for k, v in args.items() if k != "epsilon"}
    assert relative_error(image, ducc0_wgridder.vis2dirty(vis=vis, wgt=wgt, epsilon=1e-12, **ducc)) <= 1e-11


@pytest.mark.parametrize("keywords", [dict(do_wgridding=True), dict(do_wgridding=True, tuning={"fft": "mapped"})])
def test_the_next_group_is_planned_on_its_own_queue_and_thread_while_the_current_one_is_spread(rng, monkeypatch,
                                                                                             keywords):
    """A streaming call plans every group on the preparer (a second queue, a thread of its
    own), the next group's planning handed over as the current one goes onto the device, so
    that the engine's queue never waits for the host's planning between groups; the image
    and visibilities are the kept operator's."""
    import threading
    uvw, freq, vis, wgt, mask = wide_field(rng, 1500, np.linspace(1.0e8, 1.6e8, 16), masked=0.1)
    args = dict(uvw=uvw, freq=freq, mask=mask, epsilon=1e-7, device=DEVICE, **IMAGE, **keywords)
    kept = clgrid.WGridder(**args)
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    want_image, want_vis = kept.vis2dirty(vis, wgt), kept.dirty2vis(dirty, wgt)
    small_device(monkeypatch, 3 << 19)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", clgrid.StreamedWarning)
        op = clgrid.WGridder(**args)
    engine = op.engine
    assert engine.streamed.slabs > 2 and stream_module.STREAM_OVERLAP
    planned, entered = [], []
    make_part, enter = engine_module.ImagingEngine._make_part, engine_module.ImagingEngine._stream_enter

    def recording_make_part(self, *a, on=None, **k):
        planned.append((threading.current_thread() is threading.main_thread(), on))
        return make_part(self, *a, on=on, **k)

    def recording_enter(self, slab, group):
        before = self._call.next
        enter(self, slab, group)
        call = self._call
        if call.next != before:         # (a slab of several planes is entered once)
            entered.append(((slab, group), call.order[call.next] if call.next < len(call.order) else None))

    monkeypatch.setattr(engine_module.ImagingEngine, "_make_part", recording_make_part)
    monkeypatch.setattr(engine_module.ImagingEngine, "_stream_enter", recording_enter)
    image, got_vis = op.vis2dirty(vis, wgt), op.dirty2vis(dirty, wgt)
    assert planned and all(not main and on is engine._prep for main, on in planned)
    assert engine._prep.queue is not engine.queue and engine._prep.spreader is not engine.spreader
    assert engine._prep.queue.device == engine.queue.device
    assert len(entered) % 2 == 0
    for call in (entered[:len(entered) // 2], entered[len(entered) // 2:]):     # vis2dirty, dirty2vis
        groups = [at for at, _ in call]
        assert len(set(groups)) == len(groups) > 2
        # as a group goes onto the device, the one after it is the one being planned
        assert [following for _, following in call] == groups[1:] + [None]
    assert engine._parts == [] and engine._call is None
    assert relative_error(image, want_image) <= 1e-12
    assert relative_error(got_vis, want_vis) <= 1e-12
    monkeypatch.setattr(stream_module, "STREAM_OVERLAP", False)        # in turn, on this thread: the same
    planned.clear()
    assert relative_error(op.vis2dirty(vis, wgt), want_image) <= 1e-12
    assert relative_error(op.dirty2vis(dirty, wgt), want_vis) <= 1e-12
    assert planned and all(main for main, _ in planned)


def test_a_streamed_call_refused_midway_leaves_no_planning_behind(rng, monkeypatch):
    """Bad values refused in a streamed call (NaN visibilities, counted as the groups go
    through; a NaN image, found on the device before the planes): the same errors as the
    kept operator's, no planning thread left, and the next call is right."""
    import threading
    uvw, freq, vis, wgt, mask = wide_field(rng, 1500, np.linspace(1.0e8, 1.6e8, 16), masked=0.1)
    args = dict(uvw=uvw, freq=freq, mask=mask, epsilon=1e-7, device=DEVICE, do_wgridding=True,
                tuning={"fft": "mapped"}, **IMAGE)
    kept = clgrid.WGridder(**args)
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    small_device(monkeypatch, 3 << 19)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", clgrid.StreamedWarning)
        op = clgrid.WGridder(**args)
    assert op.engine.streamed is not None
    bad_vis, bad_dirty = vis.copy(), dirty.copy()
    bad_vis[np.nonzero(mask)[0][-1], np.nonzero(mask)[1][-1]] = np.nan
    bad_dirty[3, 4] = np.inf
    with pytest.raises(ValueError, match="vis has NaN or infinite entries where not masked"):
        op.vis2dirty(bad_vis, wgt)
    with pytest.raises(ValueError, match="dirty has NaN or infinite entries"):
        op.dirty2vis(bad_dirty, wgt)
    assert not [t for t in threading.enumerate() if t.name.startswith("clgrid-stream")]
    assert op.engine._parts == [] and op.engine._call is None
    assert relative_error(op.vis2dirty(vis, wgt), kept.vis2dirty(vis, wgt)) <= 1e-12
    assert relative_error(op.dirty2vis(dirty, wgt), kept.dirty2vis(dirty, wgt)) <= 1e-12


def test_a_streamed_sum_that_overflows_only_across_slabs_is_refused(rng, monkeypatch):
    """Single precision, streamed dirty2vis: each slab's share of a sample is added into the
    output as its group leaves.  Weights chosen so that every weighted share is finite
    (0.9 of float32's largest at most) but a sample's shares from two slabs sum beyond it:
    the call raises, counting the output's non-finite visibilities, each once (the count
    of the additions across slabs was dropped: inf came back silently)."""
    from clgrid.errors import NonFiniteResultError

    uvw, freq, vis, _, mask = wide_field(rng, 1500, np.linspace(1.0e8, 1.6e8, 16), masked=0.1)
    small_device(monkeypatch, 3 << 19)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", clgrid.StreamedWarning)
        op = clgrid.WGridder(uvw=uvw, freq=freq, mask=mask, epsilon=1e-5, device=DEVICE, do_wgridding=True,
                             precision="single", **IMAGE)
    engine = op.engine
    assert engine.streamed is not None and engine.streamed.slabs > 2
    dirty = np.zeros((IMAGE["npix_x"], IMAGE["npix_y"]), np.float32)
    dirty[IMAGE["npix_x"] // 2, IMAGE["npix_y"] // 2] = 1e30    # at the centre: every sample's shares sum to 1e30
    shares, scatter = [], engine_module.ImagingEngine._scatter_parts

    def recording(self, out, *args, **kwargs):                  # each group's share: what it adds
        before = out.copy()
        got = scatter(self, out, *args, **kwargs)
        shares.append(out - before)
        return got

    monkeypatch.setattr(engine_module.ImagingEngine, "_scatter_parts", recording)
    whole = op.dirty2vis(dirty)
    monkeypatch.setattr(engine_module.ImagingEngine, "_scatter_parts", scatter)
    shares = np.stack(shares)
    largest = np.max(np.maximum(np.abs(shares.real), np.abs(shares.imag)), axis=0)
    limit = float(np.finfo(np.float32).max)
    wgt = np.ones(vis.shape, np.float32)
    kept = largest > 0
    wgt[kept] = (0.9 * limit / largest[kept]).astype(np.float32)     # each weighted share finite
    with np.errstate(over="ignore"):
        summed = np.maximum(np.abs(whole.real), np.abs(whole.imag)) * wgt.astype(np.float64)
    assert np.all(np.isfinite(wgt)) and np.count_nonzero(summed > 1.01 * limit) > 0    # sums beyond float32
    made = []
    real_empty = engine_module.host_empty
    monkeypatch.setattr(engine_module, "host_empty", lambda *a: made.append(real_empty(*a)) or made[-1])
    with pytest.raises(NonFiniteResultError, match="complex64 visibilities") as error:
        op.dirty2vis(dirty, wgt)
    out = [a for a in made if a.shape == vis.shape][-1]
    bad = np.count_nonzero(~np.isfinite(out))
    assert bad >= np.count_nonzero(summed > 1.01 * limit)
    assert int(str(error.value).split()[0]) == bad
