"""Recentred w term (ImageGeometry.tilt_x/tilt_y, geometry.recentre_tilt): an off-centre
image gridded with the tilted w term n - 1 + tilt . (x, y), its points at
(u + tilt_x w, v + tilt_y w), needs about a centred image's w-planes (ducc0 0.42's count)
and agrees with ducc0 at 1e-12 and a direct sum, on every path."""

import os

import numpy as np
import pytest

import clgrid
from clgrid.imaging.geometry import abs_w_range, choose_geometry
from conftest import relative_error, wide_field

ducc0_wgridder = pytest.importorskip("ducc0.wgridder", reason="ducc0 is the oracle (the compare extra)")
DEVICE = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
C = 299792458.0


def test_an_off_centre_field_needs_a_centred_fields_planes_as_ducc0(rng, capfd):
    uvw = rng.uniform(-1, 1, (3000, 3)) * np.array([3000.0, 3000.0, 6000.0])
    freq = np.array([1.2e8])
    vis = np.ones((3000, 1), np.complex128)
    kw = dict(npix_x=256, npix_y=256, pixsize_x=6e-4, pixsize_y=6e-4, epsilon=1e-5, do_wgridding=True)
    planes = {}
    for cx in (0.0, 0.25):
        op = clgrid.WGridder(uvw, freq, center_x=cx, device=DEVICE, **kw)
        planes[cx] = op.geometry.num_planes
        ducc0_wgridder.vis2dirty(uvw=uvw, freq=freq, vis=vis, center_x=cx, verbosity=1, nthreads=1, **kw)
        text = capfd.readouterr().out
        ducc = int(text.split("grid=(")[1].split(")")[0].split("x")[2])
        assert planes[cx] <= ducc + 2, (cx, planes[cx], ducc)
    untilted = choose_geometry(256, 256, 6e-4, 6e-4, 1e-5, True, abs_w_range(uvw, freq / C, None), 3000,
                               center_x=0.25)
    assert planes[0.25] < 1.2 * planes[0.0] and untilted.num_planes > 3 * planes[0.25]


@pytest.mark.parametrize("single,fft,flips,divide_by_n", [
    (False, "host", (False, False, False), True),
    (False, "mapped", (True, False, True), False),
    (True, "host", (False, True, False), True),
    (True, "mapped", (True, True, True), True),
])
def test_off_centre_images_against_ducc0(rng, single, fft, flips, divide_by_n):
    uvw, freq, vis, wgt, _ = wide_field(rng, 1500, w=900.0)
    args = dict(uvw=uvw, freq=freq, npix_x=96, npix_y=80, pixsize_x=4e-3, pixsize_y=5e-3, do_wgridding=True,
                center_x=0.3, center_y=-0.2, flip_u=flips[0], flip_v=flips[1], flip_w=flips[2],
                divide_by_n=divide_by_n)
    eps = 1e-4 if single else 1e-9
    cd, rd = (np.complex64, np.float32) if single else (np.complex128, np.float64)
    ref = ducc0_wgridder.vis2dirty(vis=vis, wgt=wgt, epsilon=1e-12, **args)
    dirty = rng.normal(size=ref.shape)
    d2v = {k: v for k, v in args.items() if not k.startswith("npix")}
    ref_vis = ducc0_wgridder.dirty2vis(dirty=dirty, wgt=wgt, epsilon=1e-12, **d2v)
    op = clgrid.WGridder(uvw, freq, epsilon=eps, precision="single" if single else "double", device=DEVICE,
                         tuning={"fft": fft}, **{k: v for k, v in args.items() if k not in ("uvw", "freq")})
    assert op.geometry.tilted
    assert relative_error(op.vis2dirty(vis.astype(cd), wgt.astype(rd)), ref) <= eps
    assert relative_error(op.dirty2vis(dirty.astype(rd), wgt.astype(rd)), ref_vis) <= eps


def test_facets_off_the_centre_need_fewer_planes_and_agree_with_ducc0(rng):
    """A 3 x 3 cut of a wide field: each recentred facet needs about a ninth of the whole
    field's planes."""
    uvw, freq, vis, _, _ = wide_field(rng, 2000, (1.0e8,), w=1500.0, weights=None)
    args = dict(npix_x=192, npix_y=192, pixsize_x=2e-3, pixsize_y=2e-3, do_wgridding=True, epsilon=1e-6)
    whole = clgrid.WGridder(uvw, freq, device=DEVICE, facets=(1, 1), **args)
    faceted = clgrid.WGridder(uvw, freq, device=DEVICE, facets=(3, 3), **args)
    planes = [op.geometry.num_planes for _, op in faceted.faceted.operators()]
    support = whole.geometry.kernel.support
    assert max(planes) - support < (whole.geometry.num_planes - support) / 4, (planes, whole.geometry.num_planes)
    ref = ducc0_wgridder.vis2dirty(uvw=uvw, freq=freq, vis=vis, **dict(args, epsilon=1e-12))
    assert relative_error(faceted.vis2dirty(vis), ref) <= 1e-6


def test_regions_of_a_recentred_geometry_hold_every_tap(rng):
    from clgrid.imaging.geometry import abs_w_range, flip_signs
    from clgrid.imaging.regions import plane_regions
    from clgrid.planning.host import stacked_positions

    uvw = rng.uniform(-1, 1, (4000, 3)) * np.array([2500.0, 2500.0, 2000.0])
    freq = np.array([1.0e8, 1.2e8])
    scale, signs = freq / C, flip_signs(True, False, True)
    g = choose_geometry(512, 512, 1e-3, 1e-3, 1e-6, True, abs_w_range(uvw, scale, None), uvw.shape[0] * 2, True,
                        False, 0.2, -0.1, recentre=True)
    assert g.tilted
    regions = plane_regions(uvw, scale, None, signs, g, workers=2)
    packed = stacked_positions(uvw, scale, None, signs, g, fold=True)["packed"].view(np.uint32).astype(np.int64)
    taps = np.arange(g.kernel.support)
    for p in range(g.num_planes):
        on = ((packed[:, 3] & 0x7FFFFFFF) <= p) & ((packed[:, 3] & 0x7FFFFFFF) + g.kernel.support > p)
        rows, cols = np.zeros(g.nu, bool), np.zeros(g.nv, bool)
        for r in regions.at(p).rows:
            rows[r] = True
        for c in regions.at(p).cols:
            cols[c] = True
        assert rows[(packed[on, 0][:, None] + taps) % g.nu].all() and cols[(packed[on, 1][:, None] + taps) % g.nv].all()
