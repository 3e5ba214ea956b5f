"""A one-call operator's values sent up while its points are planned (clgrid.imaging.prefetch),
exercised on this CPU device with pinned staging forced on (a discrete device's path;
deterministic operators, so that images compare bit for bit): the first call takes them
without sending them again and gives the image of an operator without prefetch; other
values, weights, or a dirty2vis first are still right."""

import os

import numpy as np
import pytest

import clgrid
from clgrid.device import transfer
from clgrid.imaging import engine as imaging_engine
from clgrid.imaging import prefetch as imaging_prefetch
from conftest import wide_field

DEVICE = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
IMAGE = dict(npix_x=64, npix_y=48, pixsize_x=5e-3, pixsize_y=6e-3)


@pytest.fixture
def staged(monkeypatch):
    """Pinned staging in 4 KiB pieces on every queue, and a count of the calls' uploads."""
    stagings = {}

    def staging(queue):
        return stagings.setdefault(queue.int_ptr, transfer.Staging(queue, piece=4096))

    monkeypatch.setattr(imaging_engine, "shared_staging", staging)
    monkeypatch.setattr(imaging_prefetch, "shared_staging", staging)
    sent = []
    real = imaging_engine.ImagingEngine._upload_held

    def counted(self, part, vis, wgt, on=None):
        sent.append(vis is not None)
        return real(self, part, vis, wgt, on)

    monkeypatch.setattr(imaging_engine.ImagingEngine, "_upload_held", counted)
    return sent


@pytest.mark.parametrize("weighted", [False, True])
def test_prefetched_values_are_taken_once_and_give_the_same_image(rng, staged, weighted):
    uvw, freq, vis, wgt, _ = wide_field(rng, 700, (1.0e8, 1.2e8), w=500.0, precision="single")
    wgt = wgt if weighted else None
    kw = dict(epsilon=1e-5, do_wgridding=True, precision="single", device=DEVICE, deterministic=True, **IMAGE)
    plain = clgrid.WGridder(uvw, freq, **kw)
    expected = plain.vis2dirty(vis, wgt)
    staged.clear()
    op = clgrid.WGridder(uvw, freq, prefetch={"vis": vis, "wgt": wgt}, **kw)
    assert op.engine.staging is not None
    image = op.vis2dirty(vis, wgt)
    assert staged == []                                     # the call sent nothing: the set-up had
    np.testing.assert_array_equal(image, expected)
    other = (rng.normal(size=vis.shape) + 1j * rng.normal(size=vis.shape)).astype(np.complex64)
    np.testing.assert_array_equal(op.vis2dirty(other, wgt), plain.vis2dirty(other, wgt))
    assert staged and staged[-1]                            # used once: later calls send theirs


def test_prefetch_of_other_values_or_a_dirty2vis_first_stays_right(rng, staged):
    uvw, freq, vis, wgt, _ = wide_field(rng, 700, (1.0e8, 1.2e8), w=500.0, precision="single")
    kw = dict(epsilon=1e-5, do_wgridding=True, precision="single", device=DEVICE, deterministic=True, **IMAGE)
    plain = clgrid.WGridder(uvw, freq, **kw)
    other = vis * np.complex64(2 - 1j)
    op = clgrid.WGridder(uvw, freq, prefetch={"vis": vis}, **kw)
    np.testing.assert_array_equal(op.vis2dirty(other), plain.vis2dirty(other))       # not the prefetched
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    op = clgrid.WGridder(uvw, freq, prefetch={"vis": vis, "wgt": wgt}, **kw)
    np.testing.assert_array_equal(op.dirty2vis(dirty, wgt), plain.dirty2vis(dirty, wgt))
    np.testing.assert_array_equal(op.vis2dirty(vis, wgt), plain.vis2dirty(vis, wgt))
    with pytest.raises(ValueError, match=r"prefetch's vis must have shape \(700, 2\)"):
        clgrid.WGridder(uvw, freq, prefetch={"vis": vis[:5]}, **kw)
    with pytest.raises(ValueError, match=r"prefetch must be"):
        clgrid.WGridder(uvw, freq, prefetch=(vis, None), **kw)
    with pytest.raises(ValueError, match=r"prefetch must be"):
        clgrid.WGridder(uvw, freq, prefetch={"vis": vis, "dirty": dirty}, **kw)
    with pytest.raises(ValueError, match=r"prefetch must be"):
        clgrid.WGridder(uvw, freq, prefetch={"wgt": wgt}, **kw)


def test_one_call_and_device_lists_prefetch(rng, staged):
    """clgrid.vis2dirty prefetches for its one call (the dense share of a device list too)
    and equals ducc0 at 1e-12 to epsilon."""
    from conftest import optional, relative_error

    wgridder = optional("ducc0.wgridder", "test")
    uvw, freq, vis, wgt, _ = wide_field(rng, 900, (1.0e8, 1.2e8), w=500.0, precision="single")
    common = dict(uvw=uvw, freq=freq, wgt=wgt, do_wgridding=True, pixsize_x=IMAGE["pixsize_x"],
                  pixsize_y=IMAGE["pixsize_y"], npix_x=IMAGE["npix_x"], npix_y=IMAGE["npix_y"])
    exact = wgridder.vis2dirty(vis=vis.astype(np.complex128), **dict(common, wgt=wgt.astype(np.float64)),
                               epsilon=1e-12)
    for device in (DEVICE, [DEVICE, DEVICE]):
        staged.clear()
        image = clgrid.vis2dirty(vis=vis, epsilon=1e-5, device=device, **common)
        assert relative_error(image, exact) <= 1e-5
        if device == DEVICE:
            assert staged == []
        dirty = rng.normal(size=image.shape)
        common_d = {k: v for k, v in common.items() if k not in ("npix_x", "npix_y")}
        predicted = clgrid.dirty2vis(dirty=dirty.astype(np.float32), epsilon=1e-5, device=device,
                                     tuning={"fft": "mapped"}, **common_d)
        truth = wgridder.dirty2vis(dirty=dirty, **dict(common_d, wgt=wgt.astype(np.float64)), epsilon=1e-12)
        assert relative_error(predicted, truth) <= 1e-5


def test_a_device_lists_picking_shares_take_their_values_at_the_end_of_their_set_up(rng, staged):
    """A device list's shares whose values the host picks (every share here: ``sparse_share``
    1 by tuning) pick and send the prefetched values at the end of their set-up; the
    first call sends nothing and gives the image of the same list without prefetch to the
    bit (deterministic); other values later are sent by the call."""
    uvw, freq, vis, wgt, _ = wide_field(rng, 900, (1.0e8, 1.2e8), w=500.0, precision="single")
    kw = dict(epsilon=1e-5, do_wgridding=True, precision="single", deterministic=True, tuning={"sparse_share": 1.0},
              **IMAGE)
    one = clgrid.WGridder(uvw, freq, device=[DEVICE, DEVICE], split="planes", **kw)
    staged.clear()
    op = clgrid.WGridder(uvw, freq, device=[DEVICE, DEVICE], split="planes", prefetch={"vis": vis, "wgt": wgt}, **kw)
    assert len(op.engines) == 2 and all(e._parts[0].index is not None for e in op.engines)     # both pick
    assert staged == [True, True]                           # picked and sent by the set-up
    staged.clear()
    np.testing.assert_array_equal(op.vis2dirty(vis, wgt), one.vis2dirty(vis, wgt))
    assert staged == [True, True]                           # the list without prefetch's call only
    staged.clear()
    other = (rng.normal(size=vis.shape) + 1j * rng.normal(size=vis.shape)).astype(np.complex64)
    np.testing.assert_array_equal(op.vis2dirty(other, wgt), one.vis2dirty(other, wgt))
    assert staged == [True] * 4


def test_a_picking_shares_failed_upload_in_its_set_up_is_a_warning(rng, staged, monkeypatch):
    """Values picked and sent at the end of a share's set-up whose upload fails (pinned
    memory ran out, say) are, as a prefetch's failed copy, not the operator's error: a
    warning says so, the operator is made, and its first call sends the values itself
    and gives the list's image without prefetch."""
    uvw, freq, vis, wgt, _ = wide_field(rng, 900, (1.0e8, 1.2e8), w=500.0, precision="single")
    kw = dict(epsilon=1e-5, do_wgridding=True, precision="single", deterministic=True, tuning={"sparse_share": 1.0},
              **IMAGE)
    one = clgrid.WGridder(uvw, freq, device=[DEVICE, DEVICE], split="planes", **kw)
    real = imaging_engine.ImagingEngine._upload_held

    def failing(self, part, vis, wgt, on=None):
        if not hasattr(self, "device_fft"):              # (the set-up's: before its FFT is chosen)
            raise RuntimeError("pinned memory ran out")
        return real(self, part, vis, wgt, on)

    monkeypatch.setattr(imaging_engine.ImagingEngine, "_upload_held", failing)
    with pytest.warns(RuntimeWarning, match="pinned memory ran out"):
        op = clgrid.WGridder(uvw, freq, device=[DEVICE, DEVICE], split="planes", prefetch={"vis": vis, "wgt": wgt},
                             **kw)
    np.testing.assert_array_equal(op.vis2dirty(vis, wgt), one.vis2dirty(vis, wgt))


def test_prefetched_arrays_are_held_until_taken(rng, staged):
    """An array given only as ``prefetch`` (dropped by the caller) stays the operator's until
    the first call: another array made afterwards cannot take its address and pass for it
    (the key is the memory; before, a new array of the same shape came at the freed
    address at once and the call imaged the old values)."""
    uvw, freq, vis, wgt, _ = wide_field(rng, 700, (1.0e8, 1.2e8), w=500.0, precision="single")
    kw = dict(epsilon=1e-5, do_wgridding=True, precision="single", device=DEVICE, deterministic=True, **IMAGE)
    plain = clgrid.WGridder(uvw, freq, **kw)

    def made():
        return (rng.normal(size=vis.shape) + 1j * rng.normal(size=vis.shape)).astype(np.complex64)

    for _ in range(3):
        op = clgrid.WGridder(uvw, freq, prefetch={"vis": made()}, **kw)
        assert op.engine._prefetched is not None
        op.engine._prefetched.done.result()               # the copy over, as a slow caller would find it
        later = made()
        np.testing.assert_array_equal(op.vis2dirty(later), plain.vis2dirty(later))


def test_no_prefetch_where_its_buffers_would_not_fit_beside_the_planning(rng, staged, monkeypatch):
    """The early buffers live beside the planning's scratch (the engine's memory model counts
    the set-up and the call apart): a device without room for both gets no prefetch, and
    the call sends the values itself."""
    uvw, freq, vis, wgt, _ = wide_field(rng, 700, (1.0e8, 1.2e8), w=500.0, precision="single")
    monkeypatch.setattr(imaging_prefetch, "DEVICE_SHARE", 1e-9)
    kw = dict(epsilon=1e-5, do_wgridding=True, precision="single", device=DEVICE, deterministic=True, **IMAGE)
    op = clgrid.WGridder(uvw, freq, prefetch={"vis": vis}, **kw)
    assert op.engine._prefetched is None
    staged.clear()
    np.testing.assert_array_equal(op.vis2dirty(vis), clgrid.WGridder(uvw, freq, **kw).vis2dirty(vis))
    assert staged and staged[0]


def test_prefetch_is_checked_where_facets_leave_it_unused(rng):
    """A faceted operator does not prefetch, but a malformed ``prefetch`` is still refused by
    name (it returned before the check and was ignored silently), before any facet is made."""
    uvw, freq, vis, wgt, _ = wide_field(rng, int(rng.integers(50, 200)), (1.0e8, 1.2e8), w=500.0, precision="single")
    kw = dict(epsilon=1e-5, do_wgridding=True, precision="single", device=DEVICE, facets=(2, 1), **IMAGE)
    for junk, match in (((vis, None), r"prefetch must be"), ({"wgt": wgt}, r"prefetch must be"),
                        ({"vis": vis[1:]}, r"prefetch's vis must have shape"),
                        ({"vis": vis, "wgt": wgt[:, :1]}, r"prefetch's wgt must have shape")):
        with pytest.raises(ValueError, match=match):
            clgrid.WGridder(uvw, freq, prefetch=junk, **kw)
    op = clgrid.WGridder(uvw, freq, prefetch={"vis": vis, "wgt": wgt}, **kw)     # well formed: taken, unused
    assert op.faceted is not None


def test_a_failed_prefetch_is_sent_again_by_the_call_with_a_warning(rng, staged, monkeypatch):
    """The background copy fails: the error is not raised in the set-up, in a call that
    does not take those values (a dirty2vis, other values) or in the one that does (it
    was); each operator warns once and its calls send their values as without prefetch
    (a device list's devices, each failing, warn once for the call)."""
    import warnings

    def broken(*args, **kwargs):
        raise RuntimeError("transfer lost")

    monkeypatch.setattr(imaging_prefetch, "upload", broken)        # the background copy's only
    uvw, freq, vis, wgt, _ = wide_field(rng, 700, (1.0e8, 1.2e8), w=500.0, precision="single")
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    kw = dict(epsilon=1e-5, do_wgridding=True, precision="single", deterministic=True, **IMAGE)
    plain = clgrid.WGridder(uvw, freq, device=DEVICE, **kw)
    expected, predicted = plain.vis2dirty(vis, wgt), plain.dirty2vis(dirty, wgt)
    for device, first in ((DEVICE, "vis2dirty"), (DEVICE, "dirty2vis"), ([DEVICE, DEVICE], "vis2dirty")):
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            op = clgrid.WGridder(uvw, freq, device=device, split="rows", prefetch={"vis": vis, "wgt": wgt}, **kw)
            assert all(e._prefetched is not None for e in op.engines)
            staged.clear()
            if first == "dirty2vis":
                np.testing.assert_array_equal(op.dirty2vis(dirty, wgt), predicted)
            image = op.vis2dirty(vis, wgt)
            assert staged and staged[-1]                               # the call sent them
            op.vis2dirty(vis, wgt)
        lost = [w for w in said if "transfer lost" in str(w.message)]
        assert len(lost) == 1 and lost[0].category is RuntimeWarning, [str(w.message) for w in said]
        if device == DEVICE:
            np.testing.assert_array_equal(image, expected)
        else:
            assert np.max(np.abs(image - expected)) <= 1e-5 * np.max(np.abs(expected))


def test_a_failed_prefetch_warns_from_the_callers_line(rng, staged, monkeypatch):
    """The failed copy's RuntimeWarning names the caller's line (this file, the line of
    the call that found it), however deep in clgrid it is found: a `WGridder` call on one
    device or a device list (vis2dirty, or a dirty2vis first), and `clgrid.vis2dirty` on
    either (its operator a level further down).  Before, a fixed stack level named
    clgrid/imaging/engine.py (`_gather_parts`) or clgrid/imaging/wgridding.py."""
    import sys
    import warnings

    def broken(*args, **kwargs):
        raise RuntimeError("transfer lost")

    monkeypatch.setattr(imaging_prefetch, "upload", broken)
    uvw, freq, vis, wgt, _ = wide_field(rng, int(rng.integers(500, 800)), (1.0e8, 1.2e8), w=500.0,
                                        precision="single")
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"])).astype(np.float32)
    kw = dict(epsilon=1e-5, do_wgridding=True, **IMAGE)                 # (single precision: vis's dtype)
    for device, first in ((DEVICE, "vis2dirty"), (DEVICE, "dirty2vis"), ([DEVICE, DEVICE], "vis2dirty"),
                          ([DEVICE, DEVICE], "dirty2vis"), (DEVICE, "clgrid.vis2dirty"),
                          ([DEVICE, DEVICE], "clgrid.vis2dirty")):
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            if first == "clgrid.vis2dirty":
                line = sys._getframe().f_lineno + 1
                clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, wgt=wgt, device=device, **kw)
            else:
                op = clgrid.WGridder(uvw, freq, device=device, split="rows", precision="single",
                                     prefetch={"vis": vis, "wgt": wgt}, **kw)
                assert all(e._prefetched is not None for e in op.engines)
                line = sys._getframe().f_lineno + 1
                getattr(op, first)(dirty if first == "dirty2vis" else vis, wgt)
        lost = [(w.category, w.filename, w.lineno) for w in said if "transfer lost" in str(w.message)]
        assert lost == [(RuntimeWarning, __file__, line)], (device, first, lost)
