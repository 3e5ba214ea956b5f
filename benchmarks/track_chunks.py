"""The moving window's chunks cut on the device against the former host cut (issue 14),
and what the order of the gridder's work-groups does to its kernel.

    python3 benchmarks/track_chunks.py --device pocl --num-vis 1000000 --grid-size 2048
    python3 benchmarks/track_chunks.py --device nvidia --num-vis 4000000 --grid-size 4096

MeerKAT tracks (`clgrid.tools.benchsets.make_workload("tracks")`, 2016 baselines) with a stack
whose supports grow with |w| (``--min-support`` to ``--max-support`` over 32 planes), so
runs split where the support or the sign of w changes.  One plan made on the device,
then, interleaved over ``--repeats`` rounds (median, min, max):

- ``device``: `TrackChunker.on_device` (and the gridder's work list), what ``arrange``
  runs for such a plan now (the table's ``arrange_wg``), and ``device_wg<N>`` for
  each ``--arrange-wg`` N;
- ``host``: the former path for the same plan: the positions downloaded, cut with
  numpy (`TrackChunker.on_host`), uploaded (and the work list); ``host_numpy`` is
  the cut alone;

for the gridder's key (support and sign of w, ``chunk_visibilities``) and the
degridder's (channel, ``steps_per_group``).  Then the gridding kernel (device time) on
the same chunks with its work list in four orders, interleaved: longest first (the
table's, `LongestFirst`), widest support first (the device's order before it), by
descending count x width^2 (the host's order before that) and baseline by baseline
(no sort).  Each order's grid is checked against the longest-first one and against the
atomic gridder's (relative Frobenius error; float atomics add in another order).
Prints one JSON document, with the load average before and after.

    python3 benchmarks/track_chunks.py --device nvidia --num-vis 4000000 --grid-size 4096 \
        --min-support 3 --max-support 3        # one support: a 7^2 kernel everywhere
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

import numpy as np
import pyopencl as cl

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import clgrid  # noqa: E402
from clgrid.tools.benchsets import make_workload, ska_like_supports, synthetic_stack  # noqa: E402
from clgrid.operators.operation import kernel_seconds  # noqa: E402
from clgrid.reference import relative_error  # noqa: E402
from clgrid.strategies.moving_window import window_units  # noqa: E402
from clgrid.strategies.track_chunks import TrackChunker  # noqa: E402
from report import report  # noqa: E402


def summary(times) -> dict:
    return {"median_ms": 1e3 * float(np.median(times)), "min_ms": 1e3 * min(times), "max_ms": 1e3 * max(times)}


def wall(queue, fn) -> float:
    queue.finish()
    start = time.perf_counter()
    fn()
    queue.finish()
    return time.perf_counter() - start


def host_cut(chunker, plan, with_work):
    """The former path: positions downloaded (not the plan's cached copy), cut, uploaded."""
    positions = plan._download()
    order, chunks = chunker.on_host(positions, plan)
    return with_work(chunker.upload(positions, order, chunks))


def work_rows(table: np.ndarray, tiles_of_chunk: np.ndarray, order: np.ndarray) -> np.ndarray:
    """(chunk, tile) rows for the chunks in ``order``."""
    chunk = np.repeat(order, tiles_of_chunk[order])
    first = np.repeat(np.cumsum(tiles_of_chunk[order]) - tiles_of_chunk[order], tiles_of_chunk[order])
    return np.stack([chunk, np.arange(chunk.size) - first], axis=1).astype(np.int32)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default=None)
    p.add_argument("--num-vis", type=int, default=1_000_000)
    p.add_argument("--grid-size", type=int, default=2048)
    p.add_argument("--min-support", type=int, default=3)
    p.add_argument("--max-support", type=int, default=10)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--arrange-wg", type=int, nargs="*", default=[1, 64], help="work-items of place to compare")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    queue = clgrid.device.runtime.get_queue(args.device)
    load = [os.getloadavg()]
    work = make_workload("tracks", args.num_vis, args.grid_size, args.max_support)
    w_max = float(np.abs(work.uvw[..., 2]).max())
    kernels = synthetic_stack(ska_like_supports(32, args.min_support, args.max_support), 8, w_max)
    gridder = clgrid.Gridder(work.grid_size, work.cell_size, kernels, method="moving_window", device=queue)
    degridder = clgrid.Degridder(work.grid_size, work.cell_size, kernels, method="moving_window", device=queue)
    plan = gridder.plan(work.uvw)
    assert plan.planned_on == "device"
    grid_strategy, degrid_strategy = gridder.strategy, degridder.strategy
    cuts = {
        "grid": (grid_strategy.chunker, grid_strategy.with_work),
        "degrid": (degrid_strategy.chunker, lambda chunked: chunked),
    }
    variants = {}
    for name, (chunker, with_work) in cuts.items():
        variants[f"{name}/device"] = lambda c=chunker, w=with_work: w(c.on_device(plan))
        for wg in args.arrange_wg:
            other = TrackChunker(queue, kernels, chunker.key, type(chunker.order), chunker.max_length, wg)
            variants[f"{name}/device_wg{wg}"] = lambda c=other, w=with_work: w(c.on_device(plan))
        variants[f"{name}/host"] = lambda c=chunker, w=with_work: host_cut(c, plan, w)
        variants[f"{name}/host_numpy"] = lambda c=chunker, pos=plan.host(): c.on_host(pos, plan)
    for fn in variants.values():   # warm-up: builds, caches
        wall(queue, fn)
    times = {name: [] for name in variants}
    for _ in range(args.repeats):
        for name, fn in variants.items():
            times[name].append(wall(queue, fn))
    load.append(os.getloadavg())

    # the gridding kernel with four orders of its work-groups
    prepared = gridder.prepare(plan, work.vis)
    arranged = prepared.device_plan
    table = np.empty((arranged.num_chunks, 4), np.int32)
    cl.enqueue_copy(queue, table, arranged.chunks)
    t = grid_strategy.tuning
    tiles = -(-window_units(2 * table[:, 2] + 1, t["coarsen_u"], t["coarsen_v"]) // t["work_group_size"])
    by_run = np.argsort(table[:, 0], kind="stable")     # the cut's order before any sort
    cost = table[by_run, 1].astype(np.int64) * (2 * table[by_run, 2] + 1) ** 2
    orders = {"longest_first": np.arange(len(table)),
              "widest_first": by_run[np.argsort(-table[by_run, 2], kind="stable")],
              "cost_first": by_run[np.argsort(-cost, kind="stable")],
              "baseline_order": by_run}
    plans = {name: replace(arranged, work=cl.Buffer(queue.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                                                    hostbuf=work_rows(table, tiles, order)))
             for name, order in orders.items()}
    npol = work.vis.shape[-1]
    grid_buffer = gridder.grid_buffer(npol)
    kernel_times = {name: [] for name in plans}
    grids = {}
    for round_ in range(args.repeats + 1):
        for name, device_plan in plans.items():
            cl.enqueue_fill_buffer(queue, grid_buffer, np.zeros(1, np.float32), 0, grid_buffer.size).wait()
            events = grid_strategy.grid(device_plan, npol, grid_buffer)
            cl.wait_for_events(events)
            if round_:
                kernel_times[name].append(kernel_seconds(events))
            else:
                grids[name] = np.empty((npol, work.grid_size, work.grid_size), gridder.strategy.complex_dtype)
                cl.enqueue_copy(queue, grids[name], grid_buffer)
    load.append(os.getloadavg())
    atomic = clgrid.Gridder(work.grid_size, work.cell_size, kernels, method="atomic", device=queue).grid(plan, work.vis)
    errors = {name: {"vs_longest_first": float(relative_error(grid, grids["longest_first"])),
                     "vs_atomic": float(relative_error(grid, atomic))} for name, grid in grids.items()}

    result = {
        "device": f"{queue.device.name} ({queue.device.platform.name})",
        "num_vis": int(np.prod(work.uvw.shape[:-1])), "kept": plan.num_kept, "grid_size": args.grid_size,
        "supports": [args.min_support, args.max_support], "arrange_wg": grid_strategy.tuning["arrange_wg"],
        "chunks_grid": int(arranged.num_chunks),
        "work_groups": int(arranged.num_groups), "repeats": args.repeats,
        "arrangement": {name: summary(ts) for name, ts in times.items()},
        "grid_kernel_by_work_order": {name: summary(ts) for name, ts in kernel_times.items()},
        "grid_relative_error": errors,
        "load_average_1_5_15": [list(map(float, la)) for la in load],
    }
    report(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
