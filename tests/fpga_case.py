"""A small FPGA gridding + degridding case, and the float64 degridding it must match.

The tests run it on PoCL directly and, as a script, under Oclgrind
(``oclgrind python3 tests/fpga_case.py OUT.npz --seed SEED``): the child writes inputs and
results to OUT.npz and the test compares them with the references.
``direct_degrid`` is a plain float64 loop over footprints; `reference.degrid`, being
written on another branch, will replace it.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import clgrid  # noqa: E402
from clgrid.planning.host import flatten_samples, plan_visibilities  # noqa: E402

N, CELL, W_MAX = 48, 5e-3, 80.0
# Small tiles, so a case has many of them (partial ones at the grid's edges), and
# lane counts that do not divide the footprints, so the masked lanes run too.
GRID_TUNING = {"tile": 8, "unroll_u": 4, "banks": 2}
DEGRID_TUNING = {"tile": 8, "unroll_u": 4, "shift_depth": 3}


def small_stack():
    """Four w-planes of supports 3 to 5, oversampled 4 times."""
    return clgrid.KernelStack.w_projection(grid_size=N, cell_size=CELL, w_max=W_MAX, num_planes=4,
                                           oversample=4, max_support=5)


def random_inputs(rng, num_vis, npol, stack):
    """uvw out to the grid's edges (every footprint still on the grid), Gaussian vis and grid."""
    reach = (N // 2 - stack.max_support - 1.5) / (N * CELL)
    uvw = np.column_stack([rng.uniform(-reach, reach, (num_vis, 2)), rng.uniform(-W_MAX, W_MAX, num_vis)])
    vis = rng.normal(size=(num_vis, npol)) + 1j * rng.normal(size=(num_vis, npol))
    grid = rng.normal(size=(npol, N, N)) + 1j * rng.normal(size=(npol, N, N))
    return uvw, vis, grid


def direct_degrid(uvw, grid, stack, cell=CELL):
    """vis = sum over each footprint of grid * conj(c), c = K (conj(K) for w < 0), in float64."""
    npol, n = grid.shape[:2]
    samples = flatten_samples(uvw, np.zeros(uvw.shape[:-1] + (npol,), complex))
    plan = plan_visibilities(samples, n, cell, stack, on_dropped="raise")
    out = np.zeros((plan.num_kept, npol), np.complex128)
    os = stack.oversample
    for i in range(plan.num_kept):
        s, u, v = int(plan.support[i]), int(plan.grid_u[i]), int(plan.grid_v[i])
        taps = np.arange(-s, s + 1) * os
        rows, cols = np.abs(plan.off_v[i] + taps), np.abs(plan.off_u[i] + taps)
        c = stack.planes[int(plan.plane[i])][np.ix_(rows, cols)]
        c = np.conj(c) if plan.conj[i] else c
        out[i] = (grid[:, v - s:v + s + 1, u - s:u + s + 1] * np.conj(c)).sum(axis=(1, 2))
    return out


def case_arguments(description: str) -> argparse.ArgumentParser:
    """The arguments every Oclgrind case script takes: OUT, seed, visibilities, polarisations."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-vis", type=int, default=40)
    parser.add_argument("--npol", type=int, default=2)
    return parser


def grid_on_host_zeros(gridder, positions, vis):
    """Grid into a device grid zeroed by a copy from the host, not by `Gridder.execute`'s
    clEnqueueFillBuffer: Oclgrind 21.10 marks filled memory as uninitialised, which
    would flag every read-modify-write of the grid."""
    prepared = gridder.prepare(positions, vis)
    npol = prepared.npol
    out = np.zeros((npol, N, N), gridder.strategy.complex_dtype)
    grid_buffer = gridder.grid_buffer(npol)
    cl.enqueue_copy(gridder.queue, grid_buffer, out)
    done = gridder.strategy.grid(prepared.device_plan, npol, grid_buffer)
    cl.enqueue_copy(gridder.queue, out, grid_buffer, wait_for=done).wait()
    return out


if __name__ == "__main__":
    args = case_arguments("grid and degrid a random case on Oclgrind, save to OUT")
    args.add_argument("--tile", type=int, default=GRID_TUNING["tile"])
    args = args.parse_args()
    stack = small_stack()
    uvw, vis, grid = random_inputs(np.random.default_rng(args.seed), args.num_vis, args.npol, stack)
    vis = vis.astype(np.complex64)   # single precision in: Oclgrind takes a double-to-float conversion for undef
    gridder = clgrid.Gridder(N, CELL, stack, method="fpga", device="oclgrind",
                             tuning={**GRID_TUNING, "tile": args.tile}, on_dropped="raise")
    degridder = clgrid.Degridder(N, CELL, stack, method="fpga", device="oclgrind",
                                 tuning={**DEGRID_TUNING, "tile": args.tile}, on_dropped="raise")
    plan = gridder.plan(uvw)   # one plan for both, as a major cycle uses it (and one planning under Oclgrind:
    #                            a second planning in the same process is reported as reading uninitialised
    #                            status in its compaction, though its results are exact: tests/test_device_plan.py)
    np.savez(args.out, uvw=uvw, vis=vis, grid=grid, gridded=grid_on_host_zeros(gridder, plan, vis),
             degridded=degridder.degrid(grid, plan))
