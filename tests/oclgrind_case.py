"""A tiny gridding or degridding case for any strategy, run under Oclgrind
(``oclgrind python3 tests/oclgrind_case.py OUT.npz --method atomic [--degrid]``): the
child grids (or degrids) on the simulator and saves inputs and results to OUT.npz, and
the test compares them with the float64 reference, which also proves that Oclgrind
ran the kernels (a kernel it aborts leaves a zero result, and Oclgrind still exits 0).
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import clgrid  # noqa: E402
from clgrid.strategies import spelling  # noqa: E402
from fpga_case import CELL, N, case_arguments, grid_on_host_zeros, random_inputs, small_stack  # noqa: E402


def baseline_tracks(uvw, vis, num_baselines=4):
    """The visibilities as (nbaseline, ntime) tracks, sorted along u within each, for the
    strategies that want time-ordered baselines."""
    order = np.argsort(uvw[:, 0])
    shape = (num_baselines, -1)
    return uvw[order].reshape(*shape, 3), vis[order].reshape(*shape, vis.shape[-1])


if __name__ == "__main__":
    parser = case_arguments("grid or degrid a random case with any strategy on Oclgrind, save to OUT")
    parser.add_argument("--method", required=True)
    parser.add_argument("--degrid", action="store_true")
    parser.add_argument("--tuning", default="{}", help="a Python dict literal of tuning overrides")
    args = parser.parse_args()
    import ast

    stack = small_stack()
    uvw, vis, grid = random_inputs(np.random.default_rng(args.seed), args.num_vis, args.npol, stack)
    if "moving_window" in args.method:
        uvw, vis = baseline_tracks(uvw, vis)
    vis = vis.astype(np.complex64)   # single precision in: Oclgrind takes a double-to-float conversion for undef
    operation = clgrid.Degridder if args.degrid else clgrid.Gridder
    op = operation(N, CELL, stack, **spelling("degrid" if args.degrid else "grid", args.method), device="oclgrind",
                   tuning=ast.literal_eval(args.tuning), on_dropped="raise")
    result = op.degrid(grid, uvw) if args.degrid else grid_on_host_zeros(op, uvw, vis)
    np.savez(args.out, uvw=uvw, vis=vis, grid=grid, result=result)
