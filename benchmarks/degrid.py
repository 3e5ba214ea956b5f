"""Degridding benchmarks after seed 001 (GPU degridding: gather, sorting, kernel size).

Sweeps, each row timed as the median device time (OpenCL profiling events, kernels
only) of several runs after a warm-up, with visibilities per second, grid-point
reads per second (one complex multiply-add each) and the relative Frobenius error
against `clgrid.reference.degrid` on a subset:

  kernel  seed 001 "Dependence on GCF size": 8192^2 grid, 1 M uniform points, one
          w-plane (seed 001 degrids one GCF), kernels 9^2 .. 511^2, gather sorted and
          unsorted, single and double precision
  points  seed 001 "Dependence on token size": 1e3 .. 1e8 points at 33^2, sorted,
          single and double (1e8: single only), capped by device memory
  wproj   1 M points at 33^2 with 32 w-planes: sorting by plane matters here
  tracks  MeerKAT tracks, 1 M points, 32 w-planes: moving window against gather
  tuning  gather parameters one at a time at 33^2, sorted, single: for the tuning table

    python3 benchmarks/degrid.py --device nvidia --out DIR   # about 5 minutes on an H100
    python3 benchmarks/degrid.py --quick --out DIR           # under a minute on PoCL

Cases that would overrun --budget-s seconds, or the device memory, are skipped and
say so.  The table is printed last; every number goes to DIR/degrid.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import clgrid  # noqa: E402
from clgrid import reference  # noqa: E402
from clgrid.tools import bench  # noqa: E402
from clgrid.operators.operation import kernel_seconds  # noqa: E402
from clgrid.device.runtime import device_facts, get_queue  # noqa: E402

OVERSAMPLE = 8
ERROR_POINTS = 10_000_000   # footprint points the float64 reference may spend per workload


@dataclass
class Case:
    """One timed configuration and what it measured."""

    sweep: str
    method: str
    sort: bool
    precision: str
    dataset: str
    num_vis: int
    support: int
    num_planes: int
    tuning: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)
    degridded: int = 0
    repeats: int = 0
    median_s: float = float("nan")
    min_s: float = float("nan")
    max_s: float = float("nan")
    vis_per_s: float = float("nan")
    grid_point_reads_per_s: float = float("nan")
    error: float = float("nan")
    error_subset: int = 0
    note: str = ""

    def label(self) -> str:
        name = self.method + ("+sort" if self.method == "gather" and self.sort else "")
        if self.sweep == "tuning":
            name += " " + (" ".join(f"{TUNING_NAMES[k]}={v}" for k, v in self.overrides.items()) or "defaults")
        return name

    def row(self) -> str:
        head = (f"{self.sweep:7s} {self.label():30s} {self.precision[:6]:6s} {self.dataset:7s} "
                f"{self.num_planes:>3d} {self.num_vis:>10,d} {2 * self.support + 1:>4d}^2")
        if self.note and not self.degridded:
            return f"{head}  {self.note}"
        return (f"{head} {self.median_s * 1e3:>10.3f} {self.vis_per_s / 1e6:>9.1f} "
                f"{self.grid_point_reads_per_s / 1e9:>9.1f} {self.error:>9.1e}  {self.note}")


HEADER = (f"{'sweep':7s} {'method':30s} {'prec':6s} {'dataset':7s} {'wp':>3s} {'vis':>10s} "
          f"{'kernel':>6s} {'median ms':>10s} {'Mvis/s':>9s} {'Gread/s':>9s} {'rel.err':>9s}")


TUNING_NAMES = {"lanes_per_vis": "lanes", "teams_per_group": "teams", "vis_per_batch": "batch",
                "points_per_item": "points", "sort_tile": "tile", "groups_per_cu": "groups/cu"}


def tuning_overrides(quick: bool) -> list:
    """Gather parameters one or two at a time around the table's defaults."""
    if quick:
        return [{}, dict(sort_tile=1, lanes_per_vis=8, teams_per_group=4, points_per_item=2)]
    return ([{}] + [dict(sort_tile=t) for t in (1, 16, 64, 256)]
            + [dict(lanes_per_vis=lanes, teams_per_group=teams)
               for lanes, teams in ((16, 4), (32, 1), (32, 4), (64, 1), (128, 1))]
            + [dict(vis_per_batch=b) for b in (2, 8, 16)]
            + [dict(points_per_item=q) for q in (1, 2, 8)]
            + [dict(groups_per_cu=g) for g in (16, 32, 256)])


def plan_cases(quick: bool) -> list:
    """The sweeps in order of importance (the budget skips what is left at the end)."""
    cases = []
    n = 5_000 if quick else 1_000_000
    for support in ([4, 8, 16] if quick else [4, 8, 16, 32, 64, 128, 255]):
        for precision in ("single", "double"):
            for sort in (True, False):
                cases.append(Case("kernel", "gather", sort, precision, "uniform", n, support, 1))
    for exponent in ([3, 4] if quick else [3, 4, 5, 6, 7]):
        for precision in (("single",) if quick else ("single", "double")):
            cases.append(Case("points", "gather", True, precision, "uniform", 10 ** exponent, 16, 1))
    if not quick:   # about a minute of host planning: single precision only
        cases.append(Case("points", "gather", True, "single", "uniform", 10 ** 8, 16, 1))
    for sort in (True, False):
        cases.append(Case("wproj", "gather", sort, "single", "uniform", n, 8 if quick else 16, 32))
    for support in ([4, 8] if quick else [8, 16, 32]):
        for method in ("gather", "moving_window"):
            cases.append(Case("tracks", method, True, "single", "tracks", n, support, 32))
    for overrides in tuning_overrides(quick):
        cases.append(Case("tuning", "gather", True, "single", "uniform", n, 8 if quick else 16, 1,
                          overrides=overrides))
    return cases


class Workloads:
    """uvw and kernel stacks, made once per shape and reused; grids made once per size."""

    def __init__(self, grid_size: int):
        self.grid_size = grid_size
        self._made: dict = {}
        self._references: dict = {}
        self.grid = None

    def random_grid(self) -> np.ndarray:
        if self.grid is None:
            rng = np.random.default_rng(7)
            n = self.grid_size
            self.grid = rng.standard_normal((1, n, n, 2), dtype=np.float32).view(np.complex64)[..., 0]
        return self.grid

    def get(self, case: Case):
        key = (case.dataset, case.num_vis, case.support, case.num_planes)
        if key not in self._made:
            if case.dataset == "tracks":
                nbl = clgrid.tools.datasets.load_layout("meerkat").num_baselines
                ntime = max(1, case.num_vis // nbl)
                w = bench.make_workload("tracks", nbl * ntime, self.grid_size, case.support,
                                        oversample=OVERSAMPLE, num_planes=case.num_planes)
                uvw = w.uvw.reshape(nbl, ntime, 3)          # baseline by baseline, in time order
            else:
                w = bench.make_workload("uniform", case.num_vis, self.grid_size, case.support,
                                        oversample=OVERSAMPLE, num_planes=case.num_planes)
                uvw = w.uvw
            self._made = {key: (uvw, w.cell_size, w.kernels)}   # keep one: big ones are GBs
        return self._made[key]

    def reference(self, case: Case, uvw_subset, cell_size, kernels):
        key = (case.dataset, case.num_vis, case.support, case.num_planes, uvw_subset.shape)
        if key not in self._references:
            self._references[key] = reference.degrid(self.random_grid(), uvw_subset, self.grid_size,
                                                     cell_size, kernels, on_dropped="ignore")
        return self._references[key]


def device_bytes(case: Case, grid_size: int, kernels) -> int:
    """What a case puts on the device: plan, visibilities, grid, kernel tables."""
    complex_bytes = 16 if case.precision == "double" else 8
    tables = (clgrid.sources.tables.offset_range(OVERSAMPLE) + 1) ** 2 * ((2 * kernels.supports.astype(np.int64) + 1) ** 2).sum()
    return case.num_vis * (16 + complex_bytes) + grid_size ** 2 * complex_bytes + int(tables) * complex_bytes


def run_case(case: Case, workloads: Workloads, queue, repeats: int, deadline: float) -> Case:
    """Time one case; failures and skips are notes in the row, the others go on."""
    facts = device_facts(queue.device)
    if time.perf_counter() > deadline:
        case.note = "skipped: time budget"
        return case
    try:
        uvw, cell_size, kernels = workloads.get(case)
        case.num_vis = int(np.prod(uvw.shape[:-1]))
        need = device_bytes(case, workloads.grid_size, kernels)
        if need > 0.7 * facts.global_memory or case.num_vis * 16 > facts.max_allocation:
            case.note = f"skipped: needs {need / 2**30:.1f} GiB of device memory"
            return case
        tuning = dict(case.overrides, sort=case.sort) if case.method == "gather" else dict(case.overrides)
        degridder = clgrid.Degridder(workloads.grid_size, cell_size, kernels, method=case.method,
                                     device=queue, precision=case.precision, tuning=tuning,
                                     on_dropped="ignore")
        case.tuning = dict(degridder.strategy.tuning)
        grid = workloads.random_grid()
        prepared = degridder.prepare(uvw, 1)
        degridder.load_grid(grid)[2].wait()
        times = []
        while len(times) < 1 + repeats:           # the first run is the warm-up
            events = degridder.execute(prepared)
            events[-1].wait()
            times.append(kernel_seconds(events))
            if times[0] > 1.0 and len(times) >= 2:    # big cases: one timed run
                break
        timed = times[1:]
        case.repeats = len(timed)
        case.median_s, case.min_s, case.max_s = float(np.median(timed)), min(timed), max(timed)
        case.degridded = prepared.plan.num_kept
        case.vis_per_s = case.degridded / case.median_s
        case.grid_point_reads_per_s = prepared.grid_point_additions / case.median_s
        del prepared
        flat = uvw.reshape(-1, 3)
        subset = flat[:max(100, min(20_000, ERROR_POINTS // (2 * case.support + 1) ** 2))]
        ref = workloads.reference(case, subset, cell_size, kernels)
        case.error = float(np.linalg.norm(degridder.degrid(grid, subset) - ref) / np.linalg.norm(ref))
        case.error_subset = subset.shape[0]
    except Exception as exc:  # a failed case is a row in the table
        case.note = f"FAILED {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    return case


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", help="device name to match, e.g. nvidia (default: the default device)")
    parser.add_argument("--out", default=".", help="folder for degrid.json and degrid.txt")
    parser.add_argument("--quick", action="store_true", help="small sizes: under a minute on PoCL")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs after the warm-up")
    parser.add_argument("--budget-s", type=float, help="skip cases that start after this many seconds "
                        "(default 270, quick 50)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    deadline = started + (args.budget_s or (50.0 if args.quick else 270.0))
    queue = get_queue(args.device or ("pocl" if args.quick and args.device is None else None))
    print(f"device: {queue.device.name.strip()} ({queue.device.platform.name.strip()})", flush=True)
    workloads = Workloads(512 if args.quick else 8192)
    results = []
    for case in plan_cases(args.quick):
        results.append(run_case(case, workloads, queue, 2 if args.quick else args.repeats, deadline))
        print(results[-1].row(), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = "\n".join([HEADER] + [r.row() for r in results])
    (out / "degrid.txt").write_text(table + "\n")
    (out / "degrid.json").write_text(json.dumps(
        {"environment": bench.environment(), "grid_size": workloads.grid_size, "oversample": OVERSAMPLE,
         "seconds": time.perf_counter() - started, "results": [asdict(r) for r in results]},
        indent=1, default=float))
    print(f"\n{table}\n\n{len(results)} cases in {time.perf_counter() - started:.0f} s; "
          f"wrote {out / 'degrid.json'}")
    return 1 if any(r.note.startswith("FAILED") for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
