"""Facets (clgrid/imaging/facets.py): an image made as facets, each its own operator, agrees
with ducc0 at epsilon=1e-12 and with the unfaceted image within epsilon; a padded grid
larger than one PoCL buffer (POCL_MEMORY_LIMIT) is imaged as facets without being
asked; an image the host cannot hold is refused by name before any work."""

import os
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import clgrid
from clgrid.imaging import facets as facets_module
from clgrid.imaging import memory as memory_module
from clgrid.imaging.facets import DeviceLimits, facet_layout, plan_facets
from clgrid.imaging.geometry import choose_geometry, image_fields, flip_signs
from conftest import held_until, relative_error, warnings_of_two_threads, wide_field

ducc0_wgridder = pytest.importorskip("ducc0.wgridder", reason="ducc0 is the oracle (the compare extra)")

DEVICE = os.environ.get("CLGRID_TEST_DEVICE", "pocl")
C = 299792458.0


IMAGE = dict(npix_x=128, npix_y=96, pixsize_x=4e-3, pixsize_y=5e-3)


@pytest.mark.parametrize("facets,single,keywords", [
    ((2, 2), False, dict(center_x=0.02, center_y=-0.03)),
    ((3, 2), False, dict(flip_u=True, flip_v=True, center_x=-0.01, divide_by_n=False)),
    ((2, 3), True, dict(flip_w=True, center_y=0.04)),
    ((4, 1), False, dict(do_wgridding=False)),
])
def test_forced_facets_agree_with_ducc0_and_the_whole_image(rng, facets, single, keywords):
    uvw, freq, vis, wgt, _ = wide_field(rng, 1200)
    keywords = dict(dict(do_wgridding=True), **keywords)
    eps = 1e-4 if single else 1e-9
    cd, rd = (np.complex64, np.float32) if single else (np.complex128, np.float64)
    args = dict(uvw=uvw, freq=freq, **IMAGE, **keywords)
    d2v = {k: v for k, v in args.items() if not k.startswith("npix")}
    dirty = rng.normal(size=(IMAGE["npix_x"], IMAGE["npix_y"]))
    ref = ducc0_wgridder.vis2dirty(vis=vis, wgt=wgt, epsilon=1e-12, **args)
    ref_vis = ducc0_wgridder.dirty2vis(dirty=dirty, wgt=wgt, epsilon=1e-12, **d2v)
    faceted = clgrid.WGridder(uvw, freq, epsilon=eps, precision="single" if single else "double", device=DEVICE,
                              facets=facets, **IMAGE, **keywords)
    assert len(faceted.faceted.facets) == facets[0] * facets[1]
    first_facet = next(faceted.faceted.operators())[1]
    assert faceted.queue is first_facet.queue and len(faceted.plans) >= len(faceted.faceted.facets)
    whole = clgrid.WGridder(uvw, freq, epsilon=eps, precision="single" if single else "double", device=DEVICE,
                            facets=(1, 1), **IMAGE, **keywords)
    assert whole.faceted is None
    image = faceted.vis2dirty(vis.astype(cd), wgt.astype(rd))
    got_vis = faceted.dirty2vis(dirty.astype(rd), wgt.astype(rd))
    assert image.dtype == rd and image.shape == ref.shape and got_vis.dtype == cd and got_vis.shape == vis.shape
    assert relative_error(image, ref) <= eps and relative_error(got_vis, ref_vis) <= eps
    assert relative_error(image, whole.vis2dirty(vis.astype(cd), wgt.astype(rd))) <= 2 * eps
    assert relative_error(got_vis, whole.dirty2vis(dirty.astype(rd), wgt.astype(rd))) <= 2 * eps
    # the one-call functions take the keyword too
    once = clgrid.vis2dirty(vis=vis.astype(cd), wgt=wgt.astype(rd), epsilon=eps, device=DEVICE, facets=facets,
                            **args)
    assert relative_error(once, ref) <= eps


def test_a_dipole_across_facet_borders_stays_within_epsilon(rng):
    """Facet errors add: two opposite pixels either side of a border give visibilities
    far smaller than either facet's, which one grid's correlated errors would hide."""
    uvw, freq, _, _, _ = wide_field(rng, 1500)
    dirty = np.zeros((IMAGE["npix_x"], IMAGE["npix_y"]))
    x, y = IMAGE["npix_x"] // 2, IMAGE["npix_y"] // 4
    dirty[x - 1, y], dirty[x, y] = 1.0, -1.0          # across the border of 2 and of 4 facets a side
    dirty[x - 1, 3 * y], dirty[x, 3 * y] = -0.5, 0.5
    args = dict(uvw=uvw, freq=freq, do_wgridding=True, pixsize_x=IMAGE["pixsize_x"], pixsize_y=IMAGE["pixsize_y"])
    ref = ducc0_wgridder.dirty2vis(dirty=dirty, epsilon=1e-12, **args)
    # (4, 4) at 1e-4 measured 1.2e-4 with every facet at epsilon itself (not / sqrt(16))
    for facets, eps in (((4, 4), 1e-4), ((2, 2), 1e-8)):
        got = clgrid.dirty2vis(dirty=dirty, epsilon=eps, device=DEVICE, facets=facets, **args)
        assert relative_error(got, ref) <= eps, (facets, eps)


@pytest.mark.parametrize("flip_u,flip_v", [(False, False), (True, False), (True, True)])
def test_facets_put_their_pixels_where_the_whole_image_has_them(flip_u, flip_v):
    npix_x, npix_y, px, py, cx, cy = 100, 74, 3e-3, 2e-3, 0.05, -0.02
    signs = flip_signs(flip_u, flip_v, False)
    whole, _ = image_fields(npix_x, npix_y, px, py, True, signs, cx, cy)
    x = (np.arange(npix_x) - npix_x // 2) * px + whole["center_x"]
    y = (np.arange(npix_y) - npix_y // 2) * py + whole["center_y"]
    layout = facet_layout(npix_x, npix_y, px, py, (3, 2), cx, cy, flip_u, flip_v)
    covered = np.zeros((npix_x, npix_y), int)
    for f in layout:
        assert f.npix_x % 2 == 0 and f.npix_y % 2 == 0
        mine, _ = image_fields(f.npix_x, f.npix_y, px, py, True, signs, f.center_x, f.center_y)
        fx = (np.arange(f.npix_x) - f.npix_x // 2) * px + mine["center_x"]
        fy = (np.arange(f.npix_y) - f.npix_y // 2) * py + mine["center_y"]
        np.testing.assert_allclose(fx, x[f.rows], rtol=0, atol=1e-15)
        np.testing.assert_allclose(fy, y[f.cols], rtol=0, atol=1e-15)
        covered[f.rows, f.cols] += 1
    assert np.all(covered == 1)


def test_each_facet_chooses_its_own_w_planes():
    """Off the phase centre the range of n - 1 over a facet is narrower: fewer w-planes."""
    npix, pix = 1536, 2e-4                                # an 18 degree field
    kw = dict(epsilon=1e-5, do_wgridding=True, flip_u=False, flip_v=False, center_x=0.0, center_y=0.0,
              sigma_min=1.1, sigma_max=2.6, precision="double", npix_x=npix, npix_y=npix, pixsize_x=pix,
              pixsize_y=pix)
    w_range, num = (0.0, 3000.0), 10 ** 6
    whole = choose_geometry(npix, npix, pix, pix, 1e-5, True, w_range, num, precision="double")
    layout, geometries = plan_facets((3, 3), whole, kw, w_range, num, None)
    centre = geometries[4]
    assert centre.npix_x == centre.npix_y == npix // 3 and layout[4].center_x == layout[4].center_y == 0.0
    assert centre.num_planes < whole.num_planes / 4
    assert max(g.num_planes for g in geometries) <= whole.num_planes * 1.2


def test_automatic_facets_only_where_the_grid_does_not_fit():
    kw = dict(epsilon=1e-6, do_wgridding=False, flip_u=False, flip_v=False, center_x=0.0, center_y=0.0,
              sigma_min=1.1, sigma_max=2.6, precision="double", npix_x=1024, npix_y=512, pixsize_x=1e-4,
              pixsize_y=1e-4)
    whole = choose_geometry(1024, 512, 1e-4, 1e-4, 1e-6, False, None, 100, precision="double")
    size = whole.nu * whole.nv * 16
    roomy = DeviceLimits(size, 8 * size)
    assert plan_facets(None, whole, kw, None, 100, None, roomy) is None
    tight = DeviceLimits(size - 1, 8 * size)
    layout, geometries = plan_facets(None, whole, kw, None, 100, None, tight)
    assert len(layout) > 1 and all(g.nu * g.nv * 16 <= size - 1 for g in geometries)
    # the fewest: with a buffer a third of the grid, not a facet more than needed
    third = DeviceLimits(size // 3, 8 * size)
    layout, geometries = plan_facets(None, whole, kw, None, 100, None, third)
    assert all(g.nu * g.nv * 16 <= size // 3 for g in geometries) and len(layout) <= 6
    # half the device's memory bounds the grid too
    layout, _ = plan_facets(None, whole, kw, None, 100, None, DeviceLimits(size, size))
    assert len(layout) > 1
    assert plan_facets((1, 1), whole, kw, None, 100, None, tight) is None


GRID_BEYOND_ONE_BUFFER = textwrap.dedent("""
    import json, sys
    import numpy as np
    import clgrid, ducc0.wgridder as wg
    from clgrid.device.runtime import device_facts, get_queue
    rng = np.random.default_rng(int(sys.argv[1]))
    uvw = rng.uniform(-1, 1, (1500, 3)) * np.array([2500.0, 2500.0, 600.0])
    freq = np.array([1.0e8])
    vis = rng.normal(size=(1500, 1)) + 1j * rng.normal(size=(1500, 1))
    n, pix = 2400, 0.45 / (2500 * 1e8 / 299792458.0)
    facts = device_facts(get_queue("pocl").device)
    op = clgrid.WGridder(uvw, freq, n, n, pix, pix, 1e-12, False, device="pocl")
    whole = op.geometry.nu * op.geometry.nv * 16
    kw = dict(uvw=uvw, freq=freq, pixsize_x=pix, pixsize_y=pix, do_wgridding=False, epsilon=1e-12, nthreads=2)
    image = op.vis2dirty(vis)
    ref = wg.vis2dirty(vis=vis, npix_x=n, npix_y=n, **kw)
    dirty = rng.normal(size=(n, n))
    got_vis, ref_vis = op.dirty2vis(dirty), wg.dirty2vis(dirty=dirty, **kw)
    err = lambda a, b: float(np.linalg.norm(a - b) / np.linalg.norm(b))
    print(json.dumps(dict(max_allocation=facts.max_allocation, whole_grid=whole,
                          facets=len(op.faceted.facets) if op.faceted else 0,
                          facet_grids=[o.geometry.nu * o.geometry.nv * 16 for _, o in op.faceted.operators()],
                          image_error=err(image, ref), vis_error=err(got_vis, ref_vis))))
""")


@pytest.mark.slow
@pytest.mark.skipif(DEVICE != "pocl", reason="POCL_MEMORY_LIMIT shrinks PoCL's device only")
def test_a_grid_beyond_one_pocl_buffer_is_imaged_as_facets(rng):
    """POCL_MEMORY_LIMIT=1 (GB): PoCL's largest buffer is a quarter of it, 256 MiB; a 2400^2
    image at epsilon 1e-12 in double has a 269 MiB padded grid."""
    import json

    env = dict(os.environ, POCL_MEMORY_LIMIT="1", PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", GRID_BEYOND_ONE_BUFFER, str(int(rng.integers(2 ** 31)))],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["max_allocation"] == 2 ** 28 and got["whole_grid"] > got["max_allocation"]
    assert got["facets"] >= 2 and max(got["facet_grids"]) <= got["max_allocation"]
    assert got["image_error"] <= 1e-12 and got["vis_error"] <= 1e-12


def test_an_image_the_host_cannot_hold_is_refused_by_name_before_any_work(rng, monkeypatch):
    uvw, freq, vis, _, _ = wide_field(rng, 50)

    def no_work(*args, **kwargs):
        raise AssertionError("work started")

    monkeypatch.setattr(facets_module, "plan_facets", no_work)
    monkeypatch.setattr(clgrid.imaging.wgridding, "ImagingEngine", no_work)
    t = time.perf_counter()
    npix = 2 ** 22                                      # 128 TiB of float64 pixels
    with pytest.raises(clgrid.HostMemoryError, match=rf"{npix} x {npix} image .* needs about .* GiB .* available"):
        clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, npix_x=npix, npix_y=npix, pixsize_x=1e-8, pixsize_y=1e-8,
                         epsilon=1e-6, device=DEVICE)
    assert time.perf_counter() - t < 5
    # visibilities out: 50 rows x 2000 channels, 1.5 MiB, with 1 MiB available
    monkeypatch.setattr(memory_module, "host_memory_available", lambda: 2 ** 20)
    with pytest.raises(MemoryError, match="visibilities out 0.00"):     # a MemoryError to whoever catches those
        clgrid.dirty2vis(uvw=uvw, freq=np.linspace(1e8, 2e8, 2000), dirty=np.zeros((64, 64)), pixsize_x=1e-3,
                         pixsize_y=1e-3, epsilon=1e-6, device=DEVICE)


def test_host_memory_counts_the_operator_and_allows_what_fits(rng, monkeypatch):
    """On a CPU device the device's buffers are host memory: with 32 MiB available, an
    operator of 2 x 10^5 samples (60 MB of buffers in double) is refused, naming them; with
    the real figure it runs."""
    uvw, freq, vis, _, _ = wide_field(rng, 100_000)
    args = dict(uvw=uvw, freq=freq, npix_x=64, npix_y=64, pixsize_x=4e-3, pixsize_y=4e-3, epsilon=1e-6,
                do_wgridding=True, device=DEVICE)
    monkeypatch.setattr(memory_module, "host_memory_available", lambda: 32 * 2 ** 20)
    if facets_module.device_limits(DEVICE).shares_host_memory:
        with pytest.raises(clgrid.HostMemoryError, match="device buffers"):
            clgrid.WGridder(**args)
    monkeypatch.undo()
    assert clgrid.vis2dirty(vis=vis, **args).shape == (64, 64)


def test_facets_refused_with_a_shared_geometry_or_planes_and_bad_keywords(rng):
    uvw, freq, _, _, _ = wide_field(rng, 100)
    op = clgrid.WGridder(uvw, freq, epsilon=1e-5, do_wgridding=True, device=DEVICE, **IMAGE)
    with pytest.raises(ValueError, match="facets=.*geometry= or planes="):
        clgrid.WGridder(uvw, freq, epsilon=1e-5, do_wgridding=True, device=DEVICE, geometry=op.geometry,
                        facets=(2, 2), **IMAGE)
    for bad in ((0, 2), (2,), "many", (2.5, 2)):
        with pytest.raises(ValueError, match="facets must be"):
            clgrid.WGridder(uvw, freq, epsilon=1e-5, device=DEVICE, facets=bad, **IMAGE)
    with pytest.raises(ValueError, match="under 16 pixels"):
        clgrid.WGridder(uvw, freq, epsilon=1e-5, device=DEVICE, facets=(9, 1), **IMAGE)


def test_a_warning_every_facet_raises_is_said_once(rng):
    uvw, freq, vis, _, _ = wide_field(rng, 100)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        image = clgrid.vis2dirty(uvw=uvw, freq=freq, vis=vis, wgt=np.zeros(vis.shape), epsilon=1e-5, device=DEVICE,
                                 facets=(2, 2), **IMAGE)
    assert np.all(image == 0)
    empty = [w for w in seen if issubclass(w.category, clgrid.errors.EmptyInputWarning)]
    assert len(empty) == 1 and "the image is zero" in str(empty[0].message), [str(w.message) for w in seen]


def test_two_faceted_operators_called_from_two_threads_each_say_their_warning_once(rng):
    """Two faceted operators called at once from two threads, both imaging nothing (zero
    weights), in the interleaving that broke the gathering through
    `warnings.catch_warnings` (process-wide state): A's call starts, B's starts, A's facets
    warn and A's call returns, then B's facets warn.  Each says "the image is zero" once,
    from its own call's line.  (Before, A's facets' warnings went into B's gathering and
    were lost with it, and B's facets warned past it, once each.)"""
    import threading

    uvw, freq, vis, _, _ = wide_field(rng, int(rng.integers(80, 160)))
    kw = dict(epsilon=1e-4, precision="single", device=DEVICE, facets=(2, 2), **IMAGE)
    a, b = clgrid.WGridder(uvw, freq, **kw), clgrid.WGridder(uvw, freq, **kw)
    assert a.faceted.keep and b.faceted.keep                 # the facets' operators are there to hook
    a_calling, b_calling, a_returned = threading.Event(), threading.Event(), threading.Event()
    for op in a.faceted._operators:
        held_until(op, "vis2dirty", a_calling, b_calling)      # A's facets warn once B's call is in
    for op in b.faceted._operators:
        held_until(op, "vis2dirty", b_calling, a_returned)     # B's once A's call returned
    results, lines = {}, {}

    def call(name, op, after=None):
        if after is not None:
            assert after.wait(60)
        lines[name] = sys._getframe().f_lineno + 1
        results[name] = op.vis2dirty(vis, np.zeros(vis.shape))
        if name == "a":
            a_returned.set()

    said = warnings_of_two_threads(lambda: call("a", a), lambda: call("b", b, a_calling))
    assert sorted(results) == ["a", "b"] and not np.any(results["a"]) and not np.any(results["b"])
    empty = [(w.filename, w.lineno) for w in said if issubclass(w.category, clgrid.errors.EmptyInputWarning)]
    assert sorted(empty) == sorted([(__file__, lines["a"]), (__file__, lines["b"])]), \
        [(str(w.message), w.filename, w.lineno) for w in said]
    assert all("the image is zero" in str(w.message) for w in said)


def test_facets_chosen_by_the_work_model_only_where_they_cost_half_one_grid():
    """With the w term recentred a facet needs about its own field's planes: a wide field
    (here 12 degrees, 450 planes) is cheaper as facets by far; a narrow one (9 planes) is
    not, and neither is a wide field without recentring."""
    kw = dict(epsilon=1e-4, do_wgridding=True, flip_u=False, flip_v=False, center_x=0.0, center_y=0.0,
              sigma_min=1.1, sigma_max=2.6, precision="single", recentre=True)
    roomy = DeviceLimits(2 ** 40, 2 ** 42)
    w_range, num = (0.0, 27500.0), 16 * 10 ** 6
    wide = dict(kw, npix_x=16384, npix_y=16384, pixsize_x=1.32e-5, pixsize_y=1.32e-5)
    whole = choose_geometry(16384, 16384, 1.32e-5, 1.32e-5, 1e-4, True, w_range, num, precision="single")
    layout, geometries = plan_facets(None, whole, wide, w_range, num, None, roomy)
    assert len(layout) >= 4 and max(g.num_planes for g in geometries) < whole.num_planes / 2
    assert plan_facets(None, whole, dict(wide, recentre=False), w_range, num, None, roomy) is None
    narrow = dict(kw, npix_x=1024, npix_y=1024, pixsize_x=1.32e-5, pixsize_y=1.32e-5)
    small = choose_geometry(1024, 1024, 1.32e-5, 1.32e-5, 1e-4, True, w_range, num, precision="single")
    assert plan_facets(None, small, narrow, w_range, num, None, roomy) is None
    # where the facets' operators could not all stay on the device, one grid (it fits)
    tight = DeviceLimits(2 ** 40, 64 * 2 ** 30)
    assert plan_facets(None, whole, wide, w_range, num, None, tight, num_samples=10 ** 9) is None
