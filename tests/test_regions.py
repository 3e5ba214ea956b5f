"""The w-planes' occupied regions (clgrid/imaging/regions.py) hold every tap the planner puts
on them (its float64 host twin, planning.host.stacked_positions), and the host FFT pruned to them (clgrid/imaging/fft.py, region=) gives the
unpruned transform's image, and its cells where points read, to rounding."""

import numpy as np
import pytest

from clgrid.imaging.fft import HostFFT, _blocks, pass_order
from clgrid.imaging.geometry import abs_w_range, choose_geometry, flip_signs
from clgrid.imaging.regions import Region, plane_regions
from clgrid.planning.host import SPEED_OF_LIGHT, stacked_positions
from clgrid.tools import datasets


def meerkat(rng, ntime=40, nchan=3):
    layout = datasets.load_layout("meerkat")
    ha = np.linspace(-np.pi / 3, np.pi / 3, ntime) + rng.uniform(0, 0.01)
    uvw = datasets.simulate_uvw(layout, declination=-0.5, hour_angles=ha).reshape(-1, 3)
    return uvw, np.linspace(0.9e9, 1.6e9, nchan)


def geometry_of(uvw, freq, keep, npix, pix, eps, flips=(False, False, False), center=(0.0, 0.0), w=True):
    scale = freq / SPEED_OF_LIGHT
    signs = flip_signs(*flips)
    kept = uvw.shape[0] * freq.size if keep is None else int(keep.sum())
    w_range = abs_w_range(uvw, scale, keep) if w else None
    g = choose_geometry(npix, npix, pix, pix, eps, w, w_range, kept, flips[0], flips[1], center[0], center[1])
    return g, scale, signs


def covered(runs, n):
    out = np.zeros(n, bool)
    for r in runs:
        out[r] = True
    return out


@pytest.mark.parametrize("flips,center,masked,w", [
    ((False, False, False), (0.0, 0.0), False, True),
    ((True, False, True), (0.05, -0.03), True, True),
    ((False, True, False), (0.0, 0.02), False, False),
])
def test_regions_hold_every_tap_the_planner_places(rng, flips, center, masked, w):
    uvw, freq = meerkat(rng)
    keep = rng.uniform(size=(uvw.shape[0], freq.size)) > 0.3 if masked else None
    uv_max = np.abs(uvw[:, :2]).max() * freq.max() / SPEED_OF_LIGHT
    npix = 1024
    pix = 0.9 / (2 * uv_max)
    g, scale, signs = geometry_of(uvw, freq, keep, npix, pix, 1e-5, flips, center, w)
    regions = plane_regions(uvw, scale, keep, signs, g, workers=2)
    packed = stacked_positions(uvw, scale, keep, signs, g, fold=w)["packed"].view(np.uint32).astype(np.int64)
    first = np.stack([packed[:, 0], packed[:, 1], packed[:, 3] & 0x7FFFFFFF], axis=1)   # u, v cell, first plane
    support = g.kernel.support
    assert first.shape[0] > 1000
    planes = range(g.num_planes) if w else range(1)
    rows = {p: covered(regions.at(p).rows, g.nu) for p in planes}
    cols = {p: covered(regions.at(p).cols, g.nv) for p in planes}
    taps = np.arange(support)
    slack = regions.tile + 2
    for p in planes:
        on = (first[:, 2] <= p) & (first[:, 2] + support > p) if w else np.ones(len(first), bool)
        u_cells = (first[on, 0][:, None] + taps) % g.nu
        v_cells = (first[on, 1][:, None] + taps) % g.nv
        assert rows[p][u_cells].all() and cols[p][v_cells].all(), p
        # and no more than a tile and a cell beyond the taps of this plane and the next ones
        near_plane = (first[:, 2] - 1 <= p) & (first[:, 2] + support >= p) if w else on
        u_near = (first[near_plane, 0][:, None] + taps) % g.nu
        v_near = (first[near_plane, 1][:, None] + taps) % g.nv
        for cells, region, n in ((u_near, rows[p], g.nu), (v_near, cols[p], g.nv)):
            near = np.zeros(n, bool)
            near[(np.unique(cells)[:, None] + np.arange(-slack, slack + 1)) % n] = True
            assert not np.any(region & ~near), p
    assert max(Region.size(regions.at(p).cols) / g.nv for p in planes) < 0.9


def grid_with_points(rng, shape, region, dtype):
    """A plane's grid: non-zero on a random subset of the region's cells, zero elsewhere."""
    grid = np.zeros(shape, dtype)
    rows, cols = covered(region.rows, shape[0]), covered(region.cols, shape[1])
    mask = np.outer(rows, cols) & (rng.uniform(size=shape) < 0.3)
    grid[mask] = rng.normal(size=mask.sum()) + 1j * rng.normal(size=mask.sum())
    return grid


@pytest.mark.parametrize("library", ["scipy", "ducc0"])
@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
@pytest.mark.parametrize("order", ["columns", "rows"])
def test_pruned_fft_equals_the_whole_to_rounding(rng, library, dtype, order):
    if library == "ducc0":
        pytest.importorskip("ducc0.fft", reason="ducc0 is optional")
    nu, nv, npix_x, npix_y = 180, 160, 100, 90
    # a band of rows (cheaper rows first) or of columns (cheaper columns first), wrapping
    band = [slice(0, 12), slice(150, 180)] if order == "rows" else [slice(0, 20), slice(140, 160)]
    region = Region(rows=band if order == "rows" else [slice(0, nu)],
                    cols=band if order == "columns" else [slice(0, nv)])
    assert pass_order((nu, nv), npix_x, npix_y, region) == order
    fft = HostFFT(2, library)
    tol = 1e-13 if dtype == np.complex128 else 1e-5
    grid = grid_with_points(rng, (nu, nv), region, dtype)
    whole, pruned = grid.copy(), grid.copy()
    full = [v.copy() for _, v in fft.backward(whole, npix_x, npix_y)]
    part = [v.copy() for _, v in fft.backward(pruned, npix_x, npix_y, region)]
    scale = max(np.abs(v).max() for v in full)
    assert len(full) == len(part) == 4
    for a, b in zip(full, part):
        assert np.abs(a - b).max() <= tol * scale
    # forward: an image embedded (zero outside), transformed; the region's cells compared
    image = np.zeros((nu, nv), dtype)
    for (ri, ci) in [(r, c) for r, _ in _blocks(nu, npix_x) for c, _ in _blocks(nv, npix_y)]:
        image[ri, ci] = rng.normal(size=(ri.stop - ri.start, ci.stop - ci.start))
    whole, pruned = image.copy(), image.copy()
    fft.forward(whole, npix_x)
    fft.forward(pruned, npix_x, npix_y, region)
    read = np.outer(covered(region.rows, nu), covered(region.cols, nv))
    assert np.abs(whole[read] - pruned[read]).max() <= tol * np.abs(whole).max()
