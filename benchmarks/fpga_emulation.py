"""The figures of docs/benchmarks/fpga.md: the FPGA kernels emulated on this machine.

    python3 benchmarks/fpga_emulation.py [--out DIR]

Part 1, PoCL: the error of the FPGA gridder against the float64 reference on
`clgrid bench` workloads, and of the FPGA degridder against the direct float64 loop
of tests/fpga_case.py.  Part 2, Oclgrind: the instructions each kernel executed on
the case of tests/fpga_case.py, as global and local memory accesses per grid-point
addition (one complex multiply-add per kernel point and polarisation).  PoCL runs
the single work-item on one CPU core as a functional emulation: its times say
nothing about an FPGA and are not reported.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import clgrid  # noqa: E402
from clgrid.tools import bench  # noqa: E402
from clgrid.tools.oclgrind import run_under_oclgrind  # noqa: E402
from clgrid.planning.host import flatten_samples, plan_visibilities  # noqa: E402
from fpga_case import CELL, DEGRID_TUNING, N, direct_degrid, random_inputs, small_stack  # noqa: E402

MEMORY = ("load global", "store global", "load local", "store local")


def gridding_errors():
    rows = []
    for support in (3, 7):
        for npol in (1, 4):
            work = bench.make_workload("tracks", 20000, 512, support, npol=npol)
            for precision in ("single", "double"):
                r = bench.run_benchmark(work, device="pocl", method="fpga", precision=precision, repeats=1)
                rows.append({"kernel": "grid_fpga", "precision": precision, "npol": npol,
                             "case": f"MeerKAT tracks, 20,000 vis, 512^2 grid, {2 * support + 1}^2 kernels",
                             "error": r.error, "failed": r.failed})
    return rows


def degridding_errors():
    rows, stack = [], small_stack()
    for npol in (1, 4):
        uvw, _, grid = random_inputs(np.random.default_rng(npol), 2000, npol, stack)
        expected = direct_degrid(uvw, grid, stack)
        for precision in ("single", "double"):
            got = clgrid.Degridder(N, CELL, stack, method="fpga", device="pocl", precision=precision, tuning=DEGRID_TUNING,
                                on_dropped="raise").degrid(grid, uvw)
            rows.append({"kernel": "degrid_fpga", "precision": precision, "npol": npol,
                         "case": f"2,000 random vis, {N}^2 grid, supports 3-5 (tests/fpga_case.py)",
                         "error": float(np.linalg.norm(got - expected) / np.linalg.norm(expected))})
    return rows


def memory_traffic(num_vis, npol, tile, folder):
    """Oclgrind's instruction counts for one case, per grid-point addition."""
    out = Path(folder) / f"case_{num_vis}_{tile}.npz"
    run = run_under_oclgrind([sys.executable, ROOT / "tests" / "fpga_case.py", out, "--num-vis", num_vis,
                              "--npol", npol, "--tile", tile], inst_counts=True, timeout=3600)
    if run.returncode or run.diagnostics:
        raise RuntimeError(f"oclgrind run failed: {run.diagnostics[:3]} {run.output[-2000:]}")
    uvw = np.load(out)["uvw"]
    plan = plan_visibilities(flatten_samples(uvw, np.zeros((num_vis, npol), complex)), N, CELL, small_stack())
    additions = plan.grid_point_additions
    rows = []
    for kernel, counts in run.instructions.items():
        row = {"kernel": kernel, "num_vis": num_vis, "npol": npol, "tile": tile,
               "grid_point_additions": additions}
        for name in MEMORY:
            found = [(n, c) for key, c in counts.items() if key.startswith(name)
                     for n in [int(key.split("(")[1].split()[0])]]
            row[name] = sum(c for _, c in found) / additions
            row[name + " bytes"] = sum(n for n, _ in found) / additions
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    errors = gridding_errors() + degridding_errors()
    with tempfile.TemporaryDirectory() as folder:
        traffic = memory_traffic(40, 2, 8, folder) + memory_traffic(2000, 1, 16, folder)
    print(f"{'kernel':12s} {'prec':6s} {'np':>2s} {'rel.err':>9s}  case")
    for r in errors:
        print(f"{r['kernel']:12s} {r['precision']:6s} {r['npol']:>2d} {r['error']:>9.1e}  {r['case']}")
    print(f"\n{'kernel':12s} {'vis':>5s} {'np':>2s} {'tile':>4s} {'GPA':>8s}  per grid-point addition: "
          f"global loads, stores (bytes) | local loads, stores")
    for r in traffic:
        print(f"{r['kernel']:12s} {r['num_vis']:>5d} {r['npol']:>2d} {r['tile']:>4d} "
              f"{r['grid_point_additions']:>8d}  {r['load global']:.2f}, {r['store global']:.2f} "
              f"({r['load global bytes'] + r['store global bytes']:.1f} B) | "
              f"{r['load local']:.2f}, {r['store local']:.2f}")
    path = Path(args.out) / "fpga_emulation.json"
    path.write_text(json.dumps({"environment": bench.environment(), "errors": errors, "traffic": traffic},
                               indent=1))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
