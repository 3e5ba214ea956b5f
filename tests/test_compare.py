"""The CPU-library comparison: conventions agree with an exact DFT, and a tiny run completes."""

import numpy as np

from clgrid import compare

from conftest import optional


def test_dft_matches_finufft_and_ducc0_conventions(rng):
    optional("finufft", "compare"), optional("ducc0", "compare")
    n, cell, half = 128, 1 / 128, 16
    uvw, vis = compare._uniform(rng, 300, n, cell)
    exact = compare.dft_image(uvw, vis, n, cell, half)
    fin = compare._centre(compare._finufft_image(uvw, vis, n, cell, 1e-9), half)
    assert np.linalg.norm(fin - exact) / np.linalg.norm(exact) < 1e-7
    ducc = compare._centre(compare._ducc_image(uvw, vis, n, cell, 1e-9), half)
    assert np.linalg.norm(ducc - exact.real) / np.linalg.norm(exact.real) < 1e-7


def test_comparison_rows(queue):
    optional("finufft", "compare"), optional("ducc0", "compare")
    rows = compare.compare_cpu_libraries(num_vis=5000, grid_size=128, device=queue, repeats=1)
    libraries = [r["library"] for r in rows]
    assert libraries == ["clgrid", "clgrid", "finufft", "ducc0"]
    for r in rows:
        assert r["seconds"] > 0 and 0 < r["error"] < 0.05
    assert rows[2]["error"] < 1e-3 and rows[3]["error"] < 1e-3
