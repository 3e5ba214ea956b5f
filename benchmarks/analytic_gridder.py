"""The seeds' work distributions with an analytic kernel source against their W-projection
tables: tiled gridding and gather degridding device time on MeerKAT tracks, the same points
and grid, a kernel of the same width (7 cells), and each against its float64 reference.
Peers in the same run, where installed: cuFINUFFT's spreader at width 7 onto the same
grid, and ducc0's "gridding proper" (2-D, the same epsilon, its own width and padding).

    python3 benchmarks/analytic_gridder.py --device nvidia --num-vis 4000000 --grid-size 4096
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import pyopencl as cl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import clgrid  # noqa: E402
from clgrid.tools.bench import make_workload  # noqa: E402
from clgrid.tools import peers  # noqa: E402
from clgrid.operators.operation import kernel_seconds  # noqa: E402
from clgrid.planning.host import SPEED_OF_LIGHT  # noqa: E402
from clgrid.reference import relative_error  # noqa: E402
from report import report  # noqa: E402


def device_ms(run, repeats: int) -> dict:
    """Median, min and max of the device time of ``run()``'s events, after a warm-up."""
    cl.wait_for_events(run())
    times = []
    for _ in range(repeats):
        events = run()
        cl.wait_for_events(events)
        times.append(1e3 * kernel_seconds(events))
    return {"median_ms": float(np.median(times)), "min_ms": min(times), "max_ms": max(times)}


def peer_times(uvw, vis, grid_size: int, cell: float, epsilon: float, width: int, repeats: int,
               nthreads: int) -> dict:
    """Kernel times of the peers on the same points (uvw in wavelengths: metres at c), median."""
    freq = np.array([SPEED_OF_LIGHT])
    out = {}
    try:
        cuf_epsilon = next(e for e in (10 ** (-k / 2) for k in range(2, 15)) if peers.finufft_width(e) >= width)
        runs = [peers.cufinufft_spread(uvw, freq, vis, grid_size, cell, cuf_epsilon)[1] for _ in range(repeats + 1)]
        out["cufinufft_spread"] = {"epsilon": cuf_epsilon, "width": peers.finufft_width(cuf_epsilon),
                                   "version": peers.version("cufinufft"),
                                   "kernel_ms": 1e3 * float(np.median([r["kernel"] for r in runs[1:]])),
                                   "setup_ms": 1e3 * float(np.median([r["setup"] for r in runs[1:]]))}
    except ImportError:
        out["cufinufft_spread"] = "not installed"
    try:
        runs = [peers.ducc0_vis2dirty(uvw, freq, vis, grid_size, cell, epsilon, False, nthreads) for _ in range(4)]
        out["ducc0_gridding"] = {"epsilon": epsilon, "width": int(runs[0][2]), "threads": nthreads,
                                 "version": peers.version("ducc0"),
                                 "kernel_ms": 1e3 * float(np.median([r[1]["kernel"] for r in runs[1:]]))}
    except ImportError:
        out["ducc0_gridding"] = "not installed"
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None)
    p.add_argument("--num-vis", type=int, default=4_000_000)
    p.add_argument("--grid-size", type=int, default=4096)
    p.add_argument("--epsilon", type=float, default=1e-5, help="the analytic kernel's (single precision)")
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--nthreads", type=int, default=os.cpu_count(), help="ducc0's threads")
    p.add_argument("--check-vis", type=int, default=200_000, help="visibilities checked against the reference")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)

    analytic = clgrid.KernelStack.analytic(a.epsilon, "single")
    work = make_workload("tracks", a.num_vis, a.grid_size, analytic.supports[0])
    uvw = np.ascontiguousarray(work.uvw.reshape(-1, 3))
    vis = np.ascontiguousarray(work.vis.reshape(-1, 1)).astype(np.complex64)
    m = min(a.check_vis, uvw.shape[0])
    out = {"num_vis": int(uvw.shape[0]), "grid_size": work.grid_size, "epsilon": a.epsilon,
           "analytic": {"width": int(analytic.width), "beta": float(analytic.beta), "sigma": float(analytic.sigma),
                        "accuracy": float(analytic.accuracy)},
           "table": {"supports": [int(s) for s in np.unique(work.kernels.supports)],
                     "planes": int(work.kernels.num_planes), "oversample": int(work.kernels.oversample)},
           "repeats": a.repeats, "clgrid": clgrid.__version__}
    for name, kernels in (("table", work.kernels), ("analytic", analytic)):
        gridder = clgrid.Gridder(work.grid_size, work.cell_size, kernels, method="tiled", device=a.device,
                                 on_dropped="ignore")
        degridder = clgrid.Degridder(work.grid_size, work.cell_size, kernels, method="gather", device=a.device,
                                     on_dropped="ignore")
        out["device"] = gridder.queue.device.name.strip()
        plan = gridder.plan(uvw)
        prepared = gridder.prepare(plan, vis)
        out[name]["tiled_grid"] = device_ms(lambda: gridder.execute(prepared)[1:], a.repeats)
        grid = gridder.grid(plan, vis)
        loaded = degridder.load_grid(grid)
        wanted = degridder.prepare(plan, 1)
        out[name]["gather_degrid"] = device_ms(lambda: degridder.execute(wanted, loaded[0]), a.repeats)
        ref = clgrid.reference.grid(uvw[:m], vis[:m], work.grid_size, work.cell_size, kernels, on_dropped="ignore")
        out[name]["grid_error"] = relative_error(gridder.grid(uvw[:m], vis[:m]), ref)
        ref_vis = clgrid.reference.degrid(grid.astype(np.complex128), uvw[:m], work.grid_size, work.cell_size,
                                          kernels, on_dropped="ignore")
        out[name]["degrid_error"] = relative_error(degridder.degrid(grid, uvw[:m]), ref_vis)
    out["peers"] = peer_times(uvw, vis, work.grid_size, work.cell_size, a.epsilon, int(analytic.width), a.repeats,
                              a.nthreads)
    report(out, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
