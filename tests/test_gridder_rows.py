"""The row-band gridder (owner computes, no atomics) on the device against the float64
reference, and its bands' runs of the sorted plan."""

import numpy as np
import pytest

import clgrid
from clgrid.strategies.rows import band_ranges

from conftest import poison, random_visibilities, relative_error

N, CELL, W_MAX = 128, 2e-3, 300.0
TOLERANCE = {"single": 1e-5, "double": 1e-12}


@pytest.fixture(scope="module")
def stack():
    """Supports that grow with |w| (3 to 12 cells): bands meet footprints of every size."""
    stack = clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=W_MAX, num_planes=8,
                                            oversample=8, max_support=12)
    assert len(set(stack.supports.tolist())) >= 4
    return stack


@pytest.mark.parametrize("precision", ["single", pytest.param("double", marks=pytest.mark.slow)])
@pytest.mark.parametrize("npol", [1, pytest.param(2, marks=pytest.mark.slow), 4])
@pytest.mark.parametrize("band,vector_access", [(1, "vload"), (3, "cast"), (8, "vload"), (200, "cast")])
def test_rows_gridder_matches_reference(queue, rng, stack, precision, npol, band, vector_access):
    """Bands of one row, of a size that does not divide the grid, and one band for the whole
    grid, both ways of moving vectors; supports 3 to 12 (every tail of the vector loop), w of
    both signs (conjugated kernels), weights, every cell poisoned."""
    uvw, vis = random_visibilities(rng, 400, N, CELL, W_MAX, npol=npol, fill=0.7)
    weights = rng.uniform(0.1, 3.0, vis.shape)
    gridder = clgrid.Gridder(N, CELL, stack, method="rows", device=queue, precision=precision,
                             tuning={"band": band, "vector_access": vector_access}, on_dropped="raise")
    poison(gridder, npol)
    out, report = gridder.grid(uvw, vis, weights=weights, return_report=True)
    ref = clgrid.reference.grid(uvw, vis, N, CELL, stack, weights=weights)
    assert np.all(np.isfinite(out)) and report["gridded"] == 400 and report["method"] == "rows"
    assert relative_error(out, ref) <= TOLERANCE[precision]


def test_rows_gridder_is_the_same_bits_every_run(queue, rng, stack):
    """No atomics and a fixed order: two runs agree to the bit, without deterministic mode."""
    uvw, vis = random_visibilities(rng, 3000, N, CELL, W_MAX, fill=0.3)   # crowded: cells shared
    gridder = clgrid.Gridder(N, CELL, stack, method="rows", device=queue)
    assert gridder.strategy.atomics is False
    first = gridder.grid(uvw, vis)
    assert np.array_equal(first.view(np.uint32), gridder.grid(uvw, vis).view(np.uint32))


def test_unknown_vector_access_is_refused_by_name(queue, stack):
    with pytest.raises(ValueError, match="'vector_access' of 'rows' must be one of"):
        clgrid.Gridder(N, CELL, stack, method="rows", device=queue, tuning={"vector_access": "simd"})


def test_band_ranges_hold_every_footprint_that_reaches_a_band(rng):
    grid_v = np.sort(rng.integers(5, 59, 500))
    ranges = band_ranges(grid_v, 64, band=6, reach=5)
    assert ranges.shape == (11, 2)              # ceil(64 / 6) bands, the last of 4 rows
    for b, (first, end) in enumerate(ranges):
        rows = np.arange(6 * b, min(6 * b + 6, 64))
        reaches = (grid_v[:, None] - 5 <= rows[None, :]) & (rows[None, :] <= grid_v[:, None] + 5)
        inside = np.zeros(500, bool)
        inside[first:end] = True
        assert np.array_equal(inside, reaches.any(axis=1))
