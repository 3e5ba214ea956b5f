"""The float64 degridding reference: a direct loop, the adjoint of gridding, bad input."""

import numpy as np
import pytest

import clgrid
from clgrid.planning.host import SPEED_OF_LIGHT, round_half_away

from conftest import random_visibilities, relative_error

N, CELL = 64, 4e-3


@pytest.fixture(scope="module")
def stack():
    stack = clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=120, num_planes=6,
                                            oversample=4, max_support=7)
    assert len(set(stack.supports.tolist())) > 2, "supports should vary with w"
    return stack


def random_grid(rng, npol, n=N):
    return rng.normal(size=(npol, n, n)) + 1j * rng.normal(size=(npol, n, n))


def direct_degrid(grid, uvw_l, stack, flags):
    """One visibility at a time, straight from seed 003 Listing 1 read backwards."""
    npol, n, _ = grid.shape
    du = 1.0 / (n * CELL)
    os = stack.oversample
    out = np.zeros((uvw_l.shape[0], npol), complex)
    for i, (u, v, w) in enumerate(uvw_l):
        gu, gv = int(round_half_away(u / du)), int(round_half_away(v / du))
        off_u = int(round_half_away((gu - u / du) * os))
        off_v = int(round_half_away((gv - v / du) * os))
        plane = int(round_half_away(np.sqrt(abs(w) * stack.w_scale)))
        if plane >= stack.num_planes:
            continue
        s = int(stack.supports[plane])
        if min(gu, gv) - s + n // 2 < 0 or max(gu, gv) + s + n // 2 >= n:
            continue
        for j in range(-s, s + 1):
            for k in range(-s, s + 1):
                c = stack.planes[plane][abs(off_v + j * os), abs(off_u + k * os)]
                c = np.conj(c) if w < 0 else c       # the weight gridding uses
                out[i] += grid[:, gv + j + n // 2, gu + k + n // 2] * np.conj(c)
    out[flags] = 0
    return out


def test_reference_matches_a_direct_loop(rng, stack):
    freqs = np.array([1.0e8, 1.3e8])
    uvw, _ = random_visibilities(rng, 40, N, CELL, 120, fill=0.6)
    uvw_m = uvw * (SPEED_OF_LIGHT / 1.3e8)             # in range at both frequencies
    uvw_m[0, 0] = 1e6                                  # off the grid
    uvw_m[1, 2] = 1e6                                  # beyond the last w-plane
    flags = rng.random((40, 2, 4)) < 0.2
    flags[..., 0] = False                              # some flagged polarisations ...
    flags[2] = True                                    # ... and one row flagged entirely
    grid = random_grid(rng, 4)
    vis, report = clgrid.reference.degrid(grid, uvw_m, N, CELL, stack, flags=flags, freqs=freqs,
                                          on_dropped="ignore", return_report=True)
    uvw_l = (uvw_m[:, None, :] * (freqs / SPEED_OF_LIGHT)[None, :, None]).reshape(-1, 3)
    expected = direct_degrid(grid, uvw_l, stack, flags.reshape(-1, 4)).reshape(40, 2, 4)
    assert vis.shape == (40, 2, 4) and vis.dtype == np.complex128
    assert relative_error(vis, expected) <= 1e-13
    assert not np.any(vis[:3]) and not np.any(vis[flags])
    assert report["flagged"] == 2 and report["off_grid"] == 2 and report["beyond_kernel_stack"] == 2
    assert report["degridded"] == 80 - 6


def inner(x, y):
    return np.vdot(x.ravel(), y.ravel())


@pytest.mark.parametrize("npol", [1, 2, 4])
def test_reference_degrid_is_the_adjoint_of_reference_grid(rng, stack, npol):
    uvw, vis = random_visibilities(rng, 300, N, CELL, 120, npol=npol, fill=0.95)
    flags = rng.random(vis.shape) < 0.1
    grid = random_grid(rng, npol)
    kw = dict(grid_size=N, cell_size=CELL, kernels=stack, flags=flags, on_dropped="ignore")
    degridded, report = clgrid.reference.degrid(grid, uvw, return_report=True, **kw)
    gridded = clgrid.reference.grid(uvw, vis, **kw)
    assert report["off_grid"] > 0 and report["degridded"] > 150   # 192..249 over 150 seeds, mean 216
    lhs, rhs = inner(degridded, vis), inner(grid, gridded)
    assert abs(lhs - rhs) <= 1e-12 * abs(rhs)


def test_reference_degrid_refuses_bad_input_by_name(rng, stack):
    uvw, _ = random_visibilities(rng, 10, N, CELL, 100)
    grid = random_grid(rng, 1)
    cases = [
        (dict(grid=grid.real), TypeError, "grid must be complex"),
        (dict(grid=grid[:, :, :-2]), ValueError, r"grid must have shape \(npol, 64, 64\)"),
        (dict(grid=np.concatenate([grid] * 3)), ValueError, "grid must have 1, 2 or 4 polarisations"),
        (dict(grid=np.where(np.arange(N) == 5, np.nan, grid)), ValueError, "grid contains NaN"),
        (dict(uvw=uvw[:, :2]), ValueError, "uvw"),
        (dict(uvw=np.where(np.arange(10)[:, None] == 3, np.inf, uvw)), ValueError, "uvw"),
        (dict(flags=np.zeros((10, 1))), TypeError, "flags"),
        (dict(flags=np.zeros((9, 1), bool)), ValueError, "flags"),
        (dict(freqs=np.array([0.0])), ValueError, "freqs"),
        (dict(grid_size=63), ValueError, "grid_size"),
        (dict(on_dropped="sometimes"), ValueError, "on_dropped"),
    ]
    for change, error, words in cases:
        args = dict(grid=grid, uvw=uvw, grid_size=N, cell_size=CELL, kernels=stack)
        args.update(change)
        with pytest.raises(error, match=words):
            clgrid.reference.degrid(**args)
    # NaN uvw is fine where every polarisation is flagged
    uvw[4] = np.nan
    flags = np.zeros((10, 1), bool)
    flags[4] = True
    assert clgrid.reference.degrid(grid, uvw, N, CELL, stack, flags=flags)[4, 0] == 0
