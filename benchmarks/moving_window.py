#!/usr/bin/env python3
"""The moving-window gridder on seed 004 §6's LOFAR-like sweep, beside the atomic gridder.

    python3 benchmarks/moving_window.py --device nvidia --out DIR          # ~6 min on an H100
    python3 benchmarks/moving_window.py --device pocl --quick --out DIR    # < 1 min on 2 CPU cores

Data, rebuilt from clgrid.tools.datasets: 44 LOFAR HBA stations (the first 30 core fields and
the 14 remote stations: 946 baselines) tracking declination +50 deg for 6 h (--hours)
in 10 s steps, one subband of 16 channels of 12.2 kHz from 150 MHz, 4 polarisations of
random visibilities, a 2048^2 grid whose cell size puts the longest baseline at the grid
edge less the largest kernel (nothing is dropped), 32 w-planes, oversample 8.  As in the
seed, kernels have one fixed size per run; its sizes 16^2 .. 256^2 are even widths,
ours are odd: "size 16" is support 8, a 17^2 kernel, .. "size 256" is 257^2.

Every time is device time from OpenCL profiling events (kernels only, not transfers or
planning), the median of --repeats runs after a warm-up; throughput is in grid-point
additions per second (one complex multiply-add per kernel point and polarisation,
`Plan.grid_point_additions`), single precision throughout.

1. sweep, per kernel size: moving_window on all the data; the same prepared data with
   flush="plain" (a debug build without atomics, wrong results) for the flush's share of
   run time; atomic on every k-th time step (on all of it, it would take minutes), so
   compare rates, not times; the error of both against the float64 reference on the
   first time steps of 8 baselines.
2. coarsening: work-group size and grid points per work-item (coarsen_u x coarsen_v;
   1 x 1 is Romein's one point per work-item) for 1 and 4 polarisations, size 64, on
   the first --sweep-hours.
3. time_block: real W-projection kernels (support varies with w) on the same hours,
   exact (0) against w held over 10 and 30 time steps: speed and error vs the exact grid.

A compact table goes to stdout last; every number, the configuration and the
environment to DIR/moving_window.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyopencl as cl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # a checkout runs without installing
import clgrid  # noqa: E402
from clgrid import reference  # noqa: E402
from clgrid.tools import datasets  # noqa: E402
from clgrid.tools.bench import device_times, environment  # noqa: E402
from clgrid.tools.benchsets import fixed_support_stack  # noqa: E402
from clgrid.reference import relative_error  # noqa: E402
from clgrid.planning.host import SPEED_OF_LIGHT  # noqa: E402
from clgrid.device.runtime import get_queue  # noqa: E402

COARSENING = ((64, 1, 1), (64, 2, 1), (64, 2, 2), (64, 4, 2), (64, 4, 4), (128, 2, 2))


@dataclass
class Config:
    stations: int = 44
    hours: float = 6.0
    integration_s: float = 10.0
    nchan: int = 16
    npol: int = 4
    grid_size: int = 2048
    sizes: tuple = (16, 32, 64, 128, 256)
    num_planes: int = 32
    oversample: int = 8
    repeats: int = 3
    atomic_additions: float = 4e9      # the atomic gridder's share of each size's data
    error_additions: float = 1e7       # the reference's share (numpy, on the host)
    sweep_hours: float = 0.25
    sweep_size: int = 64
    coarsening: tuple = COARSENING
    time_blocks: tuple = (0, 10, 30)


QUICK = dict(stations=10, hours=0.5, nchan=4, grid_size=512, sizes=(16, 32), num_planes=8, repeats=2,
             atomic_additions=3e7, error_additions=2e6, sweep_hours=0.5, sweep_size=16,
             coarsening=((64, 1, 1), (64, 2, 2)), time_blocks=(0, 10))


def log(started, message):
    print(f"[{time.perf_counter() - started:6.1f} s] {message}", file=sys.stderr, flush=True)


def median_rate(times, additions):
    median = float(np.median(times))
    return {"median_s": median, "times_s": [float(t) for t in times], "grid_point_additions": int(additions),
            "gpa_per_s": additions / median}


def in_turn(function, items, ahead: bool):
    """``function(item)`` for each item in turn; with ``ahead``, the next one is computed in a
    thread while the caller works on the current one (host planning beside device runs)."""
    if not ahead:
        yield from map(function, items)
        return
    with ThreadPoolExecutor(max_workers=1) as worker:
        pending = worker.submit(function, items[0])
        for following in items[1:]:
            current, pending = pending.result(), worker.submit(function, following)
            yield current
        yield pending.result()


def sweep(config, queue, uvw, vis, freqs, cell, w_max, started):
    """Per kernel size: moving_window (atomic and plain flush) on everything, atomic on a subset."""
    nbaseline, ntime = uvw.shape[:2]
    error_baselines = np.linspace(0, nbaseline - 1, 8).astype(int)

    def gridder(kernels, method, tuning=None):
        return clgrid.Gridder(config.grid_size, cell, kernels, method=method, device=queue, tuning=tuning,
                              on_dropped="ignore")

    def planned(size):
        kernels = fixed_support_stack(size // 2, config.oversample, config.num_planes, w_max)
        moving = gridder(kernels, "moving_window")
        return kernels, moving, moving.prepare(uvw, vis, freqs=freqs)

    rows = []
    on_cpu = bool(queue.device.type & cl.device_type.CPU)   # there, planning would slow the device down
    for size, (kernels, moving, prepared) in zip(config.sizes, in_turn(planned, config.sizes, not on_cpu)):
        additions = prepared.grid_point_additions
        exact = median_rate(device_times(moving, prepared, config.repeats), additions)
        log(started, f"size {size}: moving_window {exact['gpa_per_s'] / 1e9:.1f} G/s")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")            # the plain flush warns that it is wrong
            plain = gridder(kernels, "moving_window", {"flush": "plain"})
        # its own preparation: a prepared call runs with the strategy that arranged it
        unsafe = median_rate(device_times(plain, plain.prepare(uvw, vis, freqs=freqs), config.repeats), additions)
        per_vis = additions // prepared.plan.num_kept
        del prepared, plain

        stride = int(np.clip(np.ceil(additions / config.atomic_additions), 1, ntime))
        atomic = gridder(kernels, "atomic")
        prepared = atomic.prepare(uvw[:, ::stride], vis[:, ::stride], freqs=freqs)
        baseline = median_rate(device_times(atomic, prepared, config.repeats), prepared.grid_point_additions)
        del prepared
        log(started, f"size {size}: atomic {baseline['gpa_per_s'] / 1e9:.2f} G/s (1 in {stride} time steps)")

        steps = int(np.clip(config.error_additions / (per_vis * len(error_baselines) * config.nchan), 1, ntime))
        subset = (uvw[error_baselines, :steps], vis[error_baselines, :steps])
        ref = reference.grid(*subset, config.grid_size, cell, kernels, freqs=freqs, on_dropped="ignore")
        rows.append({"size": size, "kernel": 2 * (size // 2) + 1, "moving_window": exact,
                     "plain_flush": unsafe, "flush_share": 1 - unsafe["median_s"] / exact["median_s"],
                     "atomic": dict(baseline, time_stride=stride),
                     "error_moving_window": relative_error(moving.grid(*subset, freqs=freqs), ref),
                     "error_atomic": relative_error(atomic.grid(*subset, freqs=freqs), ref),
                     "error_subset_vis": int(subset[1][..., 0].size)})
        del moving, atomic
    return rows


def coarsening(config, queue, uvw, vis, freqs, cell, w_max, started):
    """Work-group size and points per work-item, for 1 and 4 polarisations."""
    kernels = fixed_support_stack(config.sweep_size // 2, config.oversample, config.num_planes, w_max)
    rows = []
    for npol in (1, config.npol):
        for group, along_u, along_v in config.coarsening:
            tuning = {"work_group_size": group, "coarsen_u": along_u, "coarsen_v": along_v}
            gridder = clgrid.Gridder(config.grid_size, cell, kernels, method="moving_window", device=queue,
                                     tuning=tuning, on_dropped="ignore")
            prepared = gridder.prepare(uvw, vis[..., :npol], freqs=freqs)
            rows.append(dict(tuning, npol=npol, **median_rate(device_times(gridder, prepared, config.repeats),
                                                              prepared.grid_point_additions)))
            del prepared, gridder
        log(started, f"coarsening, {npol} pol: done")
    return rows


def time_blocks(config, queue, uvw, vis, freqs, cell, w_max, started):
    """Real W-projection kernels: the exact path against w held over blocks of time steps."""
    kernels = clgrid.KernelStack.w_projection(grid_size=config.grid_size, cell_size=cell, w_max=w_max,
                                              num_planes=config.num_planes, oversample=config.oversample,
                                              max_support=config.sweep_size // 2)
    picked = np.linspace(0, uvw.shape[0] - 1, 4).astype(int)
    subset = (uvw[picked, :60], vis[picked, :60, :, :1])
    exact = reference.grid(*subset, config.grid_size, cell, kernels, freqs=freqs, on_dropped="ignore")
    rows = []
    for block in config.time_blocks:
        gridder = clgrid.Gridder(config.grid_size, cell, kernels, method="moving_window", device=queue,
                                 tuning={"time_block": block}, on_dropped="ignore")
        prepared = gridder.prepare(uvw, vis, freqs=freqs)
        rows.append(dict(time_block=block, supports=[int(kernels.supports.min()), int(kernels.supports.max())],
                         error_vs_exact=relative_error(gridder.grid(*subset, freqs=freqs), exact),
                         error_subset_vis=int(subset[1][..., 0].size),
                         **median_rate(device_times(gridder, prepared, config.repeats),
                                       prepared.grid_point_additions)))
        del prepared, gridder
    log(started, "time_block: done")
    return rows


def table(results) -> str:
    lines = ["moving_window vs atomic, LOFAR-like, single precision, G grid-point additions/s (device time)",
             f"{'kernel':>7s} {'moving':>9s} {'plain':>9s} {'flush':>6s} {'atomic':>8s} {'speed-up':>8s} "
             f"{'err moving':>10s} {'err atomic':>10s}"]
    for r in results["sweep"]:
        mw, plain, at = (r[k]["gpa_per_s"] / 1e9 for k in ("moving_window", "plain_flush", "atomic"))
        lines.append(f"{r['kernel']:>5d}^2 {mw:9.1f} {plain:9.1f} {100 * r['flush_share']:5.1f}% {at:8.2f} "
                     f"{mw / at:7.0f}x {r['error_moving_window']:10.1e} {r['error_atomic']:10.1e}")
    lines.append(f"coarsening, kernel {results['config']['sweep_size'] + 1}^2: "
                 "npol, work-group, points u x v: G/s (x vs 1 x 1 at the same work-group size and npol)")
    plain_romein = {(r["npol"], r["work_group_size"]): r["gpa_per_s"] for r in results["coarsening"]
                    if r["coarsen_u"] == r["coarsen_v"] == 1}
    for r in results["coarsening"]:
        base = plain_romein.get((r["npol"], r["work_group_size"]))
        gain = f" (x{r['gpa_per_s'] / base:.2f})" if base else ""
        lines.append(f"  {r['npol']} pol, {r['work_group_size']:3d}, {r['coarsen_u']} x {r['coarsen_v']}: "
                     f"{r['gpa_per_s'] / 1e9:8.1f}{gain}")
    lines.append("time_block (w-projection kernels, supports "
                 f"{results['time_block'][0]['supports'][0]}..{results['time_block'][0]['supports'][1]}): "
                 "G/s, error vs exact")
    for r in results["time_block"]:
        lines.append(f"  {r['time_block']:3d}: {r['gpa_per_s'] / 1e9:8.1f}  {r['error_vs_exact']:.1e}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None, help="device name to match (default: clgrid's default)")
    parser.add_argument("--out", required=True, help="folder for moving_window.json")
    parser.add_argument("--quick", action="store_true", help="a small run for PoCL on a CPU")
    parser.add_argument("--hours", type=float, help="observation length (default 6, quick 0.5)")
    parser.add_argument("--repeats", type=int, help="timed runs after the warm-up")
    args = parser.parse_args(argv)
    config = Config(**(QUICK if args.quick else {}))
    if args.hours:
        config.hours = args.hours
    if args.repeats:
        config.repeats = args.repeats
    started = time.perf_counter()
    queue = get_queue(args.device)
    log(started, f"device {queue.device.name.strip()}; {config}")

    uvw, freqs = datasets.lofar_like(config.stations, config.hours, config.integration_s, config.nchan)
    rng = np.random.default_rng(2012)
    shape = uvw.shape[:2] + (config.nchan, config.npol)
    vis = rng.standard_normal(shape, np.float32) + 1j * rng.standard_normal(shape, np.float32)
    top = freqs.max() / SPEED_OF_LIGHT
    cell = (config.grid_size // 2 - max(config.sizes) // 2 - 2) / (config.grid_size * np.abs(uvw[..., :2]).max() * top)
    w_max = float(np.abs(uvw[..., 2]).max() * top)
    num_vis = int(np.prod(vis.shape[:-1]))
    log(started, f"{num_vis:,} visibilities of {uvw.shape[0]} baselines x {uvw.shape[1]} steps "
                 f"x {config.nchan} channels; cell {cell:.3g} rad, |w| <= {w_max:.0f} wavelengths")

    steps = max(1, int(round(config.sweep_hours * 3600 / config.integration_s)))
    part = (uvw[:, :steps], vis[:, :steps])
    results = {"config": asdict(config), "environment": environment(), "device": queue.device.name.strip(),
               "cell_size": cell, "w_max": w_max, "num_vis": num_vis,
               "sweep": sweep(config, queue, uvw, vis, freqs, cell, w_max, started)}
    results["coarsening"] = coarsening(config, queue, *part, freqs, cell, w_max, started)
    results["time_block"] = time_blocks(config, queue, *part, freqs, cell, w_max, started)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "moving_window.json").write_text(json.dumps(results, indent=1, default=float))
    log(started, f"wrote {out / 'moving_window.json'}")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
