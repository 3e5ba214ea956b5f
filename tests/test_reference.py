"""The float64 reference against hand calculation and physics (it is the ground truth)."""

import numpy as np
import pytest

import clgrid
from clgrid.imaging import dirty_image
from clgrid.planning.host import SPEED_OF_LIGHT, round_half_away

from conftest import random_visibilities, relative_error


def numbered_stack(support=1, oversample=4):
    """A one-plane stack whose samples say where they are: K[iy, ix] = 10 iy + ix + i (iy - ix)."""
    q = support * oversample + oversample // 2 + 1
    iy, ix = np.mgrid[:q, :q]
    return clgrid.KernelStack.from_arrays([10.0 * iy + ix + 1j * (iy - ix)], [support], oversample, 0.0)


def test_round_half_away_matches_c():
    x = np.array([-2.5, -1.5, -0.5, -0.49999999999999994, 0.5, 1.5, 2.5, 2.4999, -3.7])
    assert round_half_away(x).tolist() == [-3, -2, -1, -0, 1, 2, 3, 2, -4]


def test_single_visibility_lands_where_hand_calculation_says():
    k = numbered_stack()
    n, cell = 16, 1.0 / 16          # du = 1 / (N cell) = 1 wavelength
    vis = np.array([[2.0 - 1.0j]])
    g = clgrid.reference.grid(np.array([[2.3, -1.6, 5.0]]), vis, n, cell, k)   # w >= 0: K as stored
    # pos_u 2.3 -> cell 2 + 8 = 10, off_u round((2 - 2.3) * 4) = -1;
    # pos_v -1.6 -> cell -2 + 8 = 6, off_v round((-2 + 1.6) * 4) = -2.
    # Cell (6 + j, 10 + k) gets K[|-2 + 4j|, |-1 + 4k|]:
    iy = {-1: 6, 0: 2, 1: 2}
    ix = {-1: 5, 0: 1, 1: 3}
    expected = np.zeros((16, 16), complex)
    for j in (-1, 0, 1):
        for kk in (-1, 0, 1):
            expected[6 + j, 10 + kk] = vis[0, 0] * (10 * iy[j] + ix[kk] + 1j * (iy[j] - ix[kk]))
    np.testing.assert_array_equal(g[0], expected)

    # w < 0 conjugates the kernel; halves round away from zero (2.5 -> 3, off -2).
    g = clgrid.reference.grid(np.array([[2.5, 0.0, -3.0]]), vis, n, cell, k)
    # off_u = round((3 - 2.5) * 4) = 2 -> columns 11 + k take K[0, |2 + 4k|] = K[0, 2], K[0, 2], K[0, 6]
    c = {-1: 2, 0: 2, 1: 6}
    for kk in (-1, 0, 1):
        assert g[0, 8, 11 + kk] == vis[0, 0] * np.conj(c[kk] + 1j * (0 - c[kk]))
    assert np.count_nonzero(g) == 9


def test_point_source_peaks_at_its_pixel_with_its_flux(rng):
    n, cell, m = 256, 1e-3, 4000
    du = 1.0 / (n * cell)
    uvw = np.column_stack([rng.uniform(-80 * du, 80 * du, (m, 2)), rng.uniform(-1000, 1000, m)])
    px, py = 20, -13                                   # pixel offsets of the source in l and m
    l0, m0 = px * cell, py * cell
    n0 = np.sqrt(1 - l0 ** 2 - m0 ** 2)
    flux = 2.5
    # the data convention of ducc0, vis2dirty and clgrid.io (docs/user-guide/conventions.md)
    vis = flux * np.exp(-2j * np.pi * (uvw[:, 0] * l0 + uvw[:, 1] * m0 - uvw[:, 2] * (n0 - 1)))[:, None]

    def image(num_planes):
        k = clgrid.KernelStack.w_projection(grid_size=n, cell_size=cell, w_max=1000,
                                            num_planes=num_planes, oversample=8, max_support=40)
        g, report = clgrid.reference.grid(uvw, vis, n, cell, k, return_report=True)
        return dirty_image(g, k, report["norm"])[0]

    inner = slice(n // 4, 3 * n // 4)                  # away from the grid correction's edges
    img = image(32)
    peak = np.unravel_index(np.argmax(img[inner, inner]), (n // 2, n // 2))
    assert (peak[0] + n // 4, peak[1] + n // 4) == (n // 2 + py, n // 2 + px)
    assert img[n // 2 + py, n // 2 + px] == pytest.approx(flux, rel=5e-3)
    # Without w-projection the w-term smears the source: the same check must fail.
    assert img[n // 2 + py, n // 2 + px] - image(1)[n // 2 + py, n // 2 + px] > 0.1 * flux


def test_plus_and_minus_w_are_conjugates(rng):
    k = clgrid.KernelStack.w_projection(grid_size=128, cell_size=2e-3, w_max=300, num_planes=8,
                                        oversample=4, max_support=12)
    uvw, vis = random_visibilities(rng, 500, 128, 2e-3, 300, npol=2)
    flipped = uvw * [1, 1, -1]
    a = clgrid.reference.grid(uvw, vis, 128, 2e-3, k)
    b = clgrid.reference.grid(flipped, vis.conj(), 128, 2e-3, k)
    assert relative_error(a, b.conj()) < 1e-14


def test_channels_scale_metres_by_frequency(rng):
    k = clgrid.KernelStack.w_projection(grid_size=128, cell_size=2e-3, w_max=200, num_planes=6,
                                        oversample=4, max_support=10)
    freqs = np.array([1.0e8, 1.3e8, 1.7e8])
    uvw_m = np.column_stack([rng.uniform(-60, 60, (40, 2)), rng.uniform(-100, 100, 40)])
    vis = rng.normal(size=(40, 3, 4)) + 1j * rng.normal(size=(40, 3, 4))
    with_freqs = clgrid.reference.grid(uvw_m, vis, 128, 2e-3, k, freqs=freqs)
    uvw_l = (uvw_m[:, None, :] * freqs[None, :, None] / SPEED_OF_LIGHT).reshape(-1, 3)
    flat = clgrid.reference.grid(uvw_l, vis.reshape(-1, 4), 128, 2e-3, k)
    assert relative_error(with_freqs, flat) < 1e-14
    assert with_freqs.shape == (4, 128, 128)


def test_weights_flags_and_norm(rng):
    k = clgrid.KernelStack.w_projection(grid_size=64, cell_size=4e-3, w_max=50, num_planes=4,
                                        oversample=4, max_support=8)
    uvw, vis = random_visibilities(rng, 300, 64, 4e-3, 50, npol=2)
    weights = rng.uniform(0.5, 2.0, vis.shape)
    flags = rng.random(vis.shape) < 0.3
    vis_nan = np.where(flags, np.nan, vis)          # NaN is allowed where flagged
    g, report = clgrid.reference.grid(uvw, vis_nan, 64, 4e-3, k, weights=weights, flags=flags,
                                      return_report=True)
    manual = clgrid.reference.grid(uvw, np.where(flags, 0, vis * weights), 64, 4e-3, k)
    assert relative_error(g, manual) < 1e-14
    # norm: sum over visibilities of weight * sum(Re kernel) (seed 003 Listing 1)
    _, unit = clgrid.reference.grid(uvw, vis, 64, 4e-3, k, return_report=True)
    assert unit["norm"] == pytest.approx([300, 300], rel=2e-2)
    assert report["norm"][0] == pytest.approx(np.sum(np.where(flags, 0, weights)[:, 0]), rel=2e-2)
    assert report["flagged"] == int(flags.all(axis=1).sum())
