"""The tiled gridder against the atomic gridder, stage by stage, on the SKA-like set.

    python3 benchmarks/tiled.py --device nvidia --out DIR     # full size: 31.4 M visibilities
    python3 benchmarks/tiled.py --quick --out DIR             # PoCL: a small fraction, < 1 minute

Data sets (clgrid/benchsets.py): the SKA-like set of seed 000 Table 2 (SKA1-Low tracks,
130,816 baselines x 240 time steps, 601 w-planes with supports 4..72, oversample 4,
18000^2 grid) and a uniform set with the same kernels.  Each set is planned once on
the host (float64); each method is uploaded, run once to warm up and then --repeats
times, timed by OpenCL profiling events: the median per stage (tiled: bounding box,
count, prefix sum, sort, tiles, central box, untiled) and of the total device time.
Throughput is in grid-point additions per second (one complex multiply-add per kernel
point), also given as the time per 31.4 M visibilities.  The error is measured
against the float64 reference on a random subset of the visibilities.  At full size
a short sweep of the tiled parameters follows (group by group from the table's values:
tile shapes of both mappings with work-groups per unit, unroll, chunk sizes, central box,
sort runs, w-plane order, plan copies, windows), and the best is printed as an entry for clgrid/platforms/.  The
compact table comes last; every
number, the environment and the peak host memory go to DIR/tiled.json.
"""

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from clgrid import reference  # noqa: E402

from clgrid.tools import bench  # noqa: E402

from clgrid.tools import benchsets  # noqa: E402

from clgrid.device import runtime  # noqa: E402

from clgrid.tools import tuner  # noqa: E402

from clgrid.device import tuning  # noqa: E402
from clgrid.operators.gridder import Gridder  # noqa: E402
from clgrid.planning.host import flatten_samples, plan_visibilities  # noqa: E402

SKA_VISIBILITIES = 31_395_840
ROW_SHAPES = [   # mapping "rows" (tile_u, tile_v, regsz, shmsz): work-groups of tile_u x tile_v / (regsz + shmsz)
    (16, 16, 8, 0), (16, 16, 4, 4), (32, 16, 16, 0), (32, 8, 8, 0),
]
FOOTPRINT_SHAPES = [   # mapping "footprint" (tile_u, tile_v, footprint_wg): the tile in local memory
    (16, 16, 32), (32, 32, 32), (32, 32, 64), (64, 32, 64),
]
SWEEP = [   # one group at a time, from the table's values, keeping the best so far
    [dict(zip(("mapping", "tile_u", "tile_v", "regsz", "shmsz"), ("rows",) + shape)) for shape in ROW_SHAPES]
    + [dict(zip(("mapping", "tile_u", "tile_v", "footprint_wg"), ("footprint",) + shape))
       for shape in FOOTPRINT_SHAPES],
    [{"footprint_unroll": u} for u in (2, 4, 8)],   # no effect unless the best so far is "footprint"
    [{"groups_per_cu": g} for g in (16, 32, 64)],
    [{"chunk": c} for c in (32, 128, 512)],
    [{"central_radius": r} for r in (-1, 2, 6)],
    [{"sort_run": r} for r in (4, 16, 64)],
    [{"plane_order": o} for o in (True, False)],
    [{"sort_copies_plan": c} for c in (True, False)],
    [{"window_support": w} for w in (-1, 3, 4, 5, 6)],
]


def planned(workload):
    """The workload's float64 host positions (off-grid visibilities dropped): its counts."""
    samples = flatten_samples(workload.uvw, workload.vis)
    return plan_visibilities(samples, workload.grid_size, workload.cell_size, workload.kernels, "ignore")


def failure(exc) -> str:
    """One line for a configuration the device or the table refused."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"


def event_seconds(events) -> float:
    return sum((e.profile.end - e.profile.start) * 1e-9 for e in events)


def time_method(workload, queue, method, tuning_overrides, repeats, warmup=1):
    """Median device seconds per stage and in total over ``repeats`` runs after ``warmup``."""
    gridder = Gridder(workload.grid_size, workload.cell_size, workload.kernels, method=method, device=queue,
                      tuning=tuning_overrides, on_dropped="ignore")
    t0 = time.perf_counter()
    prepared = gridder.prepare(workload.uvw, workload.vis)     # planned on the device, values in order
    upload_s = time.perf_counter() - t0
    runs = []
    for i in range(warmup + repeats):
        events = gridder.execute(prepared)
        events[-1].wait()
        if i >= warmup:
            stages = getattr(gridder.strategy, "stages", {})   # the atomic strategy has one stage
            runs.append({"total": event_seconds(events[1:]),
                         **{name: event_seconds(evs) for name, evs in stages.items()}})
    median = {key: float(np.median([r[key] for r in runs])) for key in runs[0]}
    extra = {"max_entries": prepared.device_plan.max_entries} if method == "tiled" else {}
    return gridder, dict(method=method, upload_s=upload_s, median_s=median, runs=runs,
                         tuning={k: v for k, v in gridder.strategy.tuning.items() if k != "build_options"},
                         **extra)


def subset_error(gridder, workload, subset):
    """Relative Frobenius error against the float64 reference, on the visibilities ``subset``."""
    uvw, vis = workload.uvw[subset], workload.vis[subset]
    got = gridder.grid(uvw, vis)
    ref = reference.grid(uvw, vis, workload.grid_size, workload.cell_size, workload.kernels, on_dropped="ignore")
    rows = np.flatnonzero(np.any(ref[0] != 0, axis=1))   # the touched part of the grid is enough
    cols = np.flatnonzero(np.any(ref[0] != 0, axis=0))
    window = np.s_[:, rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1]
    return float(np.linalg.norm(got[window] - ref[window]) / np.linalg.norm(ref[window]))


def sweep(workload, queue, repeats, seconds):
    """Search SWEEP group by group from the table's values; returns (best params, best s, trials)."""
    start = time.perf_counter()
    best, best_s, trials = {}, None, []
    for group in SWEEP:
        for change in group:
            if time.perf_counter() - start > seconds:
                return best, best_s, trials
            trial = dict(best, **change)
            try:
                gridder, result = time_method(workload, queue, "tiled", trial, repeats)
                del gridder
                seconds_taken = result["median_s"]["total"]
            except Exception as exc:   # a combination the device refuses is reported, not fatal
                trials.append(dict(params=trial, failed=failure(exc)))
                continue
            trials.append(dict(params=trial, median_s=seconds_taken, stages_s=result["median_s"],
                               max_entries=result["max_entries"]))
            if best_s is None or seconds_taken < best_s:
                best, best_s = trial, seconds_taken
    return best, best_s, trials


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true", help="PoCL-sized: 1/1600 of the baselines on a 2048^2 grid")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--error-subset", type=int, default=20000)
    ap.add_argument("--sweep-seconds", type=float, default=150.0, help="0: no parameter sweep")
    args = ap.parse_args()
    queue = runtime.get_queue(args.device)
    facts = runtime.device_facts(queue.device)
    if args.quick:
        sets = [benchsets.ska_like(scale=1 / 1600, grid_size=2048), benchsets.uniform_like(4000, grid_size=2048)]
    else:
        sets = [benchsets.ska_like(), benchsets.uniform_like(4_000_000)]
    rng = np.random.default_rng(0)
    out = {"environment": bench.environment(), "device": facts.name, "results": []}
    rows = []
    for workload in sets:
        t0 = time.perf_counter()
        plan = planned(workload)
        plan_s = time.perf_counter() - t0
        subset = np.sort(rng.choice(plan.num_samples, min(args.error_subset, plan.num_samples), replace=False))
        for method in ("atomic", "tiled"):
            gridder, result = time_method(workload, queue, method, None, args.repeats)
            result.update(workload=workload.describe(), plan_s=plan_s, gridded=plan.num_kept,
                          grid_point_additions=plan.grid_point_additions,
                          error=subset_error(gridder, workload, subset), error_subset=int(subset.size))
            del gridder
            out["results"].append(result)
            total = result["median_s"]["total"]
            for stage, seconds in result["median_s"].items():
                rows.append((workload.name, plan.num_kept, method, stage, seconds,
                             plan.grid_point_additions / total if stage == "total" else None,
                             total * SKA_VISIBILITIES / plan.num_kept if stage == "total" else None,
                             result["error"] if stage == "total" else None))
        if workload.name == "ska_like" and not args.quick and args.sweep_seconds > 0:
            best, best_s, trials = sweep(workload, queue, 3, args.sweep_seconds)
            out["sweep"] = dict(best=best, best_s=best_s, trials=trials,
                                best_gpa_per_s=plan.grid_point_additions / best_s if best_s else None)
            if best_s:
                params = tuning.resolve_tuning("tiled", best, facts)
                out["sweep"]["entry"] = tuning.format_entry(
                    tuner.device_match(facts), "tiled", {k: v for k, v in params.items() if k != "build_options"},
                    f"benchmarks/tiled.py sweep on {facts.name}: SKA-like set, {best_s * 1e3:.2f} ms")
        del plan
    out["host_peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "tiled.json").write_text(json.dumps(out, indent=1, default=str))

    if "sweep" in out:
        print(f"sweep: {len(out['sweep']['trials'])} trials; best {out['sweep']['best']} "
              f"{(out['sweep']['best_s'] or float('nan')) * 1e3:.2f} ms")
        print(out["sweep"].get("entry", ""))
    print(f"device {facts.name}; host peak RSS {out['host_peak_rss_gb']:.1f} GB; wrote {args.out}/tiled.json")
    print(f"{'dataset':9s} {'vis':>11s} {'method':7s} {'stage':13s} {'median ms':>10s} {'GGPA/s':>8s} "
          f"{'ms/31.4M vis':>12s} {'rel.err':>8s}")
    for name, nvis, method, stage, seconds, gpa, per_ska, error in rows:
        fmt = lambda v, f: format(v, f) if v is not None else ""   # noqa: E731
        print(f"{name:9s} {nvis:>11,d} {method:7s} {stage:13s} {seconds * 1e3:>10.3f} {fmt(gpa and gpa / 1e9, '>8.2f'):>8s} "
              f"{fmt(per_ska and per_ska * 1e3, '>12.1f'):>12s} {fmt(error, '>8.1e'):>8s}")


if __name__ == "__main__":
    main()
