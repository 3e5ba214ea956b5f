"""Whole calls with host arrays in and out, as a user makes them: plan, values, kernels,
transfers (issue 14's targets), against ducc0 on the same points in the same run.

    python3 benchmarks/plan_pivot.py --device nvidia --num-vis 4000000 --grid-size 4096 --support 3
    python3 benchmarks/plan_pivot.py --device pocl --num-vis 200000 --grid-size 1024 --support 3

Prints one JSON document: wall times (median, min, max of ``--repeats`` after a warm-up)
of ``Gridder.grid(uvw, vis)``, ``grid(plan, vis)``, ``Degridder.degrid(grid, uvw)`` and
``degrid(grid, plan)``; the breakdown of a one-liner (planning, values, kernels, grid
copy back); device planning against the former host (numpy) planning of the same
points; errors against the float64 reference on a subset; ducc0's `vis2dirty` and
`dirty2vis` (2-D, epsilon 1e-4) on the same points as the peer; and a stream of
``--stream-factor`` times the points through `Gridder.grid_chunks` (the same chunk
again and again, checked against that many times one chunk).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pyopencl as cl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import clgrid  # noqa: E402
from clgrid.tools.bench import make_workload  # noqa: E402
from clgrid.planning.host import flatten_positions, plan_visibilities  # noqa: E402
from clgrid.reference import relative_error  # noqa: E402
from clgrid.device.transfer import download, host_empty  # noqa: E402
from report import report  # noqa: E402


def timed(fn, repeats: int, warmup: int = 2) -> dict:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return {"median_ms": 1e3 * float(np.median(times)), "min_ms": 1e3 * min(times), "max_ms": 1e3 * max(times)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None)
    p.add_argument("--num-vis", type=int, default=4_000_000)
    p.add_argument("--grid-size", type=int, default=4096)
    p.add_argument("--support", type=int, default=3)
    p.add_argument("--method", default="tiled")
    p.add_argument("--degrid-method", default="gather")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--check-vis", type=int, default=200_000, help="visibilities checked against the reference")
    p.add_argument("--stream-factor", type=float, default=0.0,
                   help="stream this many times the device's global memory in visibilities (0: skip)")
    p.add_argument("--nthreads", type=int, default=os.cpu_count())
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    work = make_workload("tracks", args.num_vis, args.grid_size, args.support)
    uvw = np.ascontiguousarray(work.uvw.reshape(-1, 3))
    vis = np.ascontiguousarray(work.vis.reshape(-1, 1)).astype(np.complex64)
    n, cell, kernels = work.grid_size, work.cell_size, work.kernels
    gridder = clgrid.Gridder(n, cell, kernels, method=args.method, device=args.device, on_dropped="ignore")
    degridder = clgrid.Degridder(n, cell, kernels, method=args.degrid_method, device=args.device,
                                 on_dropped="ignore")
    queue = gridder.queue
    out = {"device": queue.device.name.strip(), "platform": queue.device.platform.name.strip(),
           "num_vis": int(uvw.shape[0]), "grid_size": n, "support": args.support, "method": args.method,
           "degrid_method": args.degrid_method, "repeats": args.repeats, "clgrid": clgrid.__version__}

    # planning: device kernel against the former host path on the same points
    out["plan_device"] = timed(lambda: gridder.plan(uvw), args.repeats)
    plan = gridder.plan(uvw)
    out["planned_on"] = plan.planned_on
    start = time.perf_counter()
    plan_visibilities(flatten_positions(uvw, 1), n, cell, kernels, on_dropped="ignore")
    out["plan_host_numpy_ms"] = 1e3 * (time.perf_counter() - start)

    # whole calls
    out["grid_uvw"] = timed(lambda: gridder.grid(uvw, vis), args.repeats)
    out["grid_plan"] = timed(lambda: gridder.grid(plan, vis), args.repeats)
    grid = gridder.grid(plan, vis)
    out["degrid_uvw"] = timed(lambda: degridder.degrid(grid, uvw), args.repeats)
    out["degrid_plan"] = timed(lambda: degridder.degrid(grid, plan), args.repeats)

    # where a one-liner's time goes (each part finished before the next starts)
    parts = {"plan": [], "values": [], "kernels": [], "copy_back": []}
    host = [host_empty((1, n, n), np.complex64, gridder.staging) for _ in range(2)][-1]  # as grid() returns
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        fresh = gridder.plan(uvw)
        queue.finish()
        t1 = time.perf_counter()
        prepared = gridder.prepare(fresh, vis)
        queue.finish()
        t2 = time.perf_counter()
        events = gridder.execute(prepared)
        cl.wait_for_events(events)
        t3 = time.perf_counter()
        download(queue, gridder.grid_buffer(1), host, gridder.staging)
        t4 = time.perf_counter()
        for key, seconds in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            parts[key].append(1e3 * seconds)
        kernel_ms = 1e3 * (clgrid.operators.gridder.kernel_seconds(events[1:]) or 0.0)
    out["grid_breakdown_median_ms"] = {k: float(np.median(v)) for k, v in parts.items()}
    out["grid_kernels_device_ms"] = kernel_ms

    # errors against the float64 reference on a subset
    m = min(args.check_vis, uvw.shape[0])
    ref = clgrid.reference.grid(uvw[:m], vis[:m], n, cell, kernels, on_dropped="ignore")
    out["grid_error"] = relative_error(gridder.grid(uvw[:m], vis[:m]), ref)
    ref_vis = clgrid.reference.degrid(grid.astype(np.complex128), uvw[:m], n, cell, kernels, on_dropped="ignore")
    out["degrid_error"] = relative_error(degridder.degrid(grid, uvw[:m]), ref_vis)

    # the peer: ducc0 on the same points (2-D, its default accuracy for single precision)
    try:
        import ducc0
        freq = np.array([clgrid.planning.host.SPEED_OF_LIGHT])            # uvw in wavelengths = metres at c
        kw = dict(uvw=uvw, freq=freq, pixsize_x=cell, pixsize_y=cell, epsilon=1e-4, do_wgridding=False,
                  nthreads=args.nthreads)
        out["ducc0"] = {"version": ducc0.__version__, "nthreads": args.nthreads, "epsilon": 1e-4,
                        "vis2dirty": timed(lambda: ducc0.wgridder.vis2dirty(vis=vis, npix_x=n, npix_y=n, **kw),
                                           3, 1)}
        dirty = ducc0.wgridder.vis2dirty(vis=vis, npix_x=n, npix_y=n, **kw)
        out["ducc0"]["dirty2vis"] = timed(lambda: ducc0.wgridder.dirty2vis(dirty=dirty, **kw), 3, 1)
    except ImportError:
        out["ducc0"] = "not installed"

    # a stream of many times the device's memory: the same chunk again and again
    if args.stream_factor > 0:
        total = args.stream_factor * queue.device.global_mem_size
        per_chunk = uvw.nbytes + vis.nbytes
        count = int(np.ceil(total / per_chunk))
        one = gridder.grid(uvw, vis)
        start = time.perf_counter()
        streamed = gridder.grid_chunks((uvw, vis, None, None) for _ in range(count))
        seconds = time.perf_counter() - start
        out["stream"] = {"chunks": count, "bytes": count * per_chunk, "seconds": seconds,
                         "GB_per_s": count * per_chunk / seconds / 1e9,
                         "Mvis_per_s": count * uvw.shape[0] / seconds / 1e6,
                         "error_vs_count_times_one": relative_error(streamed, count * one.astype(np.complex128))}
    report(out, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
