"""Deterministic mode: every gridder gives the same bits run after run and still matches
the float64 reference; degridders are deterministic without asking."""

import numpy as np
import pytest

import clgrid
import clgrid.tools.bench
from clgrid.operators.deterministic import scale_exponent
from clgrid.strategies import DEGRIDDING_METHODS, spelling

from conftest import poison, relative_error

N, CELL = 96, 2.5e-3
DU = 1.0 / (N * CELL)
W_MAX = 200
TOLERANCE = {"single": 2e-6, "double": 1e-12}
SMALL_TILES = {"tile_u": 16, "tile_v": 16, "regsz": 4, "shmsz": 4, "central_radius": 1, "chunk": 4,
               "central_chunk": 8}
CASES = {   # (method, tuning): every gridding strategy, tiled in both mappings and as a hybrid
    "atomic": ("atomic", None),
    "tiled_rows": ("tiled", SMALL_TILES),
    "tiled_footprint": ("tiled", dict(SMALL_TILES, mapping="footprint")),
    "tiled_hybrid": ("tiled", dict(SMALL_TILES, tile_factor=0.5)),
    "moving_window": ("moving_window", None),
    "texture": ("texture", None),
    "texture_moving_window": ("texture_moving_window", None),
    "fpga": ("fpga", {"tile": 8}),       # on chip in a GPU's 48 KiB of local memory
}


@pytest.fixture(scope="module")
def stack():
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=W_MAX, num_planes=6,
                                           oversample=4, max_support=10)


def dense_tracks(rng, nbl=24, ntime=48):
    """Baseline-ordered tracks crowded near the centre, so many adds race for each cell."""
    start = rng.normal(0, 8, (nbl, 1, 2)) * DU
    velocity = rng.uniform(-0.4, 0.4, (nbl, 1, 2)) * DU
    uv = start + velocity * (np.arange(ntime)[None, :, None] - ntime / 2)
    w = np.linspace(rng.uniform(-W_MAX, 0, nbl), rng.uniform(0, W_MAX, nbl), ntime).T[..., None]
    vis = rng.normal(size=(nbl, ntime, 2)) + 1j * rng.normal(size=(nbl, ntime, 2))
    return np.concatenate([uv, w], axis=-1), vis * rng.lognormal(0, 2, (nbl, ntime, 1))


def test_fixed_point_scale_keeps_sums_in_62_bits(rng, stack):
    vis = (rng.normal(size=(1000, 2)) + 1j * rng.normal(size=(1000, 2))) * 10.0 ** rng.uniform(-30, 30)
    value_sum = np.abs(vis.real).sum() + np.abs(vis.imag).sum()
    k = scale_exponent(value_sum, stack)
    kmax = max(max(np.abs(p.real).max(), np.abs(p.imag).max()) for p in stack.planes)
    assert 2.0 ** 60 <= value_sum * kmax * 2.0 ** k < 2.0 ** 62
    assert scale_exponent(0.0, stack) == 0


@pytest.mark.parametrize("precision", ["single", pytest.param("double", marks=pytest.mark.slow)])
@pytest.mark.parametrize("case", list(CASES))
def test_deterministic_gridding_is_bit_identical_and_accurate(queue, rng, stack, case, precision):
    method, tuning = CASES[case]
    uvw, vis = dense_tracks(rng)
    weights = rng.uniform(0.1, 2.0, vis.shape)
    gridder = clgrid.Gridder(N, CELL, stack, **spelling("grid", method), device=queue, precision=precision, tuning=tuning,
                             deterministic=True)
    runs = []
    for _ in range(2):
        poison(gridder, 2)
        runs.append(gridder.grid(uvw, vis, weights=weights))
    interpolation = "linear" if method.startswith("texture") else "nearest"
    ref = clgrid.reference.grid(uvw, vis, N, CELL, stack, weights=weights, interpolation=interpolation)
    for other in runs[1:]:
        assert np.array_equal(runs[0].view(np.uint8), other.view(np.uint8)), "results differ between runs"
    if method.startswith("texture"):   # the interpolation's own error dominates: compare with float atomics
        plain = clgrid.Gridder(N, CELL, stack, **spelling("grid", method), device=queue, precision=precision, tuning=tuning)
        assert relative_error(runs[0], plain.grid(uvw, vis, weights=weights)) <= TOLERANCE[precision]
        assert relative_error(runs[0], ref) <= 1e-3
    else:
        assert relative_error(runs[0], ref) <= TOLERANCE[precision]


DEGRID_CASES = ["gather", "moving_window", "texture", "fpga"]


@pytest.mark.parametrize("method", DEGRID_CASES)
def test_degridders_are_deterministic(queue, rng, stack, method):
    assert set(DEGRID_CASES) == set(DEGRIDDING_METHODS), "a new degridder: add it here"
    uvw, _ = dense_tracks(rng)
    grid = rng.normal(size=(2, N, N)) + 1j * rng.normal(size=(2, N, N))
    degridder = clgrid.Degridder(N, CELL, stack, **spelling("degrid", method), device=queue)
    runs = [degridder.degrid(grid, uvw) for _ in range(2)]
    for other in runs[1:]:
        assert np.array_equal(runs[0].view(np.uint8), other.view(np.uint8))
    assert np.abs(runs[0]).max() > 0


@pytest.mark.parametrize("mapping", ["rows", pytest.param("footprint", marks=pytest.mark.slow)])
def test_tiled_deterministic_where_the_device_sort_reorders_tiles(queue, mapping):
    """Enough visibilities per tile that the device bucket sort's order changes between runs
    (float tile sums then differ in the last bits: 100k tracks did on PoCL)."""
    work = clgrid.tools.bench.make_workload("tracks", 100_000, 1024, 7, npol=1)
    gridder = clgrid.Gridder(work.grid_size, work.cell_size, work.kernels, method="tiled", device=queue,
                             on_dropped="ignore", deterministic=True, tuning={"mapping": mapping})
    first = gridder.grid(work.uvw, work.vis)
    poison(gridder, 1)
    assert np.array_equal(first.view(np.uint8), gridder.grid(work.uvw, work.vis).view(np.uint8))
    plain = clgrid.Gridder(work.grid_size, work.cell_size, work.kernels, method="tiled", device=queue,
                           on_dropped="ignore", tuning={"mapping": mapping}).grid(work.uvw, work.vis)
    assert relative_error(first, plain) <= 2e-6
