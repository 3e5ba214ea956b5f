"""KernelStack: generator properties, user arrays, and every layout against the quarters."""

import numpy as np
import pytest

import clgrid
from clgrid.sources.tables import offset_range, quarter_size


@pytest.fixture(scope="module")
def stack():
    return clgrid.KernelStack.w_projection(grid_size=512, cell_size=5e-4, w_max=600, num_planes=12,
                                           oversample=4, max_support=24)


def test_generated_stack_shapes_supports_and_normalisation(stack):
    assert stack.num_planes == 12 and stack.oversample == 4
    assert stack.w_scale == pytest.approx(11 ** 2 / 600)
    assert np.all(np.diff(stack.supports) >= 0), "support must grow with |w|"
    assert stack.supports[-1] > stack.supports[0]
    for p, plane in enumerate(stack.planes):
        assert plane.shape == (quarter_size(stack.supports[p], 4),) * 2
    # plane 0 at offset 0, folded over the four quadrants, sums to 1
    s0 = stack.supports[0]
    full = stack.full_plane(0)
    c = full.shape[0] // 2
    taps = c + np.arange(-s0, s0 + 1) * 4
    assert full[np.ix_(taps, taps)].sum().real == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("taper", ["pswf", "es"])
def test_kernel_is_transform_of_taper_times_w_term(taper):
    """Spot-check a generated sample against a direct Fourier sum of the image plane."""
    n, cell, os, size = 64, 4e-3, 4, 2 * (10 + 2)
    k = clgrid.KernelStack.w_projection(grid_size=n, cell_size=cell, w_max=150, num_planes=3,
                                        oversample=os, taper=taper, max_support=10)
    from clgrid.sources.tables import _taper_function
    a = _taper_function(taper, 3)
    x = (np.arange(size) - size // 2) / (size / 2)
    t = a(x)
    t[0] = 0
    l = x * n * cell / 2
    f = np.outer(t, t) * np.exp(-2j * np.pi * k.plane_w(2) * (np.sqrt(1 - l[:, None] ** 2 - l[None, :] ** 2) - 1))
    f0 = np.outer(t, t)

    def sample(img, iy, ix):   # uv offset in cells = index / os; du = 1 / (n cell)
        du = 1 / (n * cell)
        return np.sum(img * np.exp(-2j * np.pi * du / os * (iy * l[:, None] + ix * l[None, :])))

    scale = k.planes[0][0, 0] / sample(f0, 0, 0)
    for iy, ix in [(0, 0), (3, 5), (7, 1)]:
        assert k.planes[2][iy, ix] == pytest.approx(scale * sample(f, iy, ix), rel=1e-9, abs=1e-12)


def test_truncation_warns():
    with pytest.warns(UserWarning, match="truncated"):
        k = clgrid.KernelStack.w_projection(grid_size=512, cell_size=5e-4, w_max=20000, num_planes=4,
                                            oversample=4, max_support=6)
    assert k.max_support == 6


def test_from_arrays_crops_a_cube_and_validates(stack):
    cube = stack.cube()
    again = clgrid.KernelStack.from_arrays(cube, stack.supports, stack.oversample, stack.w_scale)
    for a, b in zip(again.planes, stack.planes):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="plane 0"):
        clgrid.KernelStack.from_arrays([np.zeros((3, 3))], [1], 4, 0.0)
    with pytest.raises(ValueError, match="NaN"):
        clgrid.KernelStack.from_arrays([np.full((7, 7), np.nan)], [1], 4, 0.0)
    with pytest.raises(TypeError):
        clgrid.KernelStack.from_arrays([np.zeros((7, 7))], [1.5], 4, 0.0)
    with pytest.raises(ValueError, match="2 planes but 1"):
        clgrid.KernelStack.from_arrays([np.zeros((7, 7))] * 2, [1], 4, 0.0)


def test_cube_and_compact_layouts_match_quarters(stack):
    cube = stack.cube()
    values, starts, sides = stack.compact()
    for p, plane in enumerate(stack.planes):
        q = plane.shape[0]
        np.testing.assert_array_equal(cube[p, :q, :q], plane)
        assert not np.any(cube[p, q:, :]) and not np.any(cube[p, :, q:])
        assert sides[p] == q
        for iy, ix in [(0, 0), (q - 1, 0), (1, q - 1), (q // 2, q // 3)]:
            assert values[starts[p] + iy * sides[p] + ix] == plane[iy, ix]


def test_weight_sums_by_brute_force(stack):
    r = offset_range(stack.oversample)
    sums = stack.weight_sums()
    os = stack.oversample
    for p in (0, stack.num_planes - 1):
        s = stack.supports[p]
        for off_v, off_u in [(0, 0), (-r, r), (1, -2)]:
            brute = sum(stack.planes[p][abs(off_v + j * os), abs(off_u + kk * os)].real
                        for j in range(-s, s + 1) for kk in range(-s, s + 1))
            assert sums[p, off_v + r, off_u + r] == pytest.approx(brute, rel=1e-12)


@pytest.mark.parametrize("oversample", [3, 4, 8])
def test_u_rows_layout_matches_quarters_for_every_offset_and_tap(oversample):
    stack = clgrid.KernelStack.w_projection(grid_size=256, cell_size=1e-3, w_max=400, num_planes=5,
                                            oversample=oversample, max_support=20)
    assert stack.supports[0] < stack.supports[-1] < 20
    values, starts, sides = stack.u_rows()
    r = offset_range(oversample)
    assert np.array_equal(sides, stack.quarter_sizes)
    assert values.size == sum((r + 1) * q * (2 * s + 1) for q, s in zip(sides, stack.supports))
    for p, plane in enumerate(stack.planes):
        s, width = int(stack.supports[p]), 2 * int(stack.supports[p]) + 1
        for off_u in range(-r, r + 1):
            for off_v in range(-r, r + 1):
                taps = np.arange(-s, s + 1)
                iy = np.abs(off_v + taps * oversample)                       # rows stay as in the quarter
                t = s + np.sign(off_u + 0.5).astype(int) * taps               # off_u < 0 reads backwards
                got = values[starts[p] + (abs(off_u) * sides[p] + iy[:, None]) * width + t[None, :]]
                want = plane[iy[:, None], np.abs(off_u + taps * oversample)[None, :]]
                np.testing.assert_array_equal(got, want)
