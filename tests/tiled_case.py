"""A small tiled gridding case for Oclgrind (``oclgrind python3 tests/tiled_case.py OUT.npz
--seed SEED --mapping footprint``): the child writes inputs and the grid to OUT.npz and
the test compares them with the reference.  Tiles of 8 x 8 cells on a 48^2 grid with
supports 3 to 5 make footprints that cover 1 to 4 tiles, partly; a central box of
radius 1 runs the second launch too, and windows (support 3) the third.
"""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import clgrid  # noqa: E402
from fpga_case import CELL, N, case_arguments, grid_on_host_zeros, random_inputs, small_stack  # noqa: E402

TUNING = {"tile_u": 8, "tile_v": 8, "regsz": 2, "shmsz": 2, "central_radius": 1, "chunk": 6,
          "central_chunk": 5, "groups_per_cu": 2, "footprint_wg": 16, "sort_run": 3, "sort_wg": 16,
          "window_support": 3,   # windows 2 cells apart take the supports of 3
          "atomic": "xchg"}   # all-atomic flushes: the CAS loop's first plain read is a benign race

if __name__ == "__main__":
    args = case_arguments("grid a random case with the tiled strategy, save to OUT")
    args.add_argument("--mapping", default="footprint")
    args.add_argument("--plan-copies", type=int, default=1, help="sort_copies_plan (1) or not (0)")
    args = args.parse_args()
    stack = small_stack()
    uvw, vis, _ = random_inputs(np.random.default_rng(args.seed), args.num_vis, args.npol, stack)
    uvw[: args.num_vis // 2, :2] *= 0.1     # a dense centre: consecutive entries in the same tile
    uvw[1: args.num_vis // 2: 2] = uvw[: args.num_vis // 2 - 1: 2]   # pairs on the same cell: no barrier between
    tuning = {**TUNING, "mapping": args.mapping, "sort_copies_plan": bool(args.plan_copies)}
    gridder = clgrid.Gridder(N, CELL, stack, method="tiled", device="oclgrind", tuning=tuning, on_dropped="raise")
    np.savez(args.out, uvw=uvw, vis=vis, gridded=grid_on_host_zeros(gridder, uvw, vis))
