"""Benchmarks: time each gridding strategy on a device and check it against the reference.

Every result states the device, the data size, the kernel sizes, the median device
time of several runs after a warm-up (OpenCL profiling events, kernels only), the
throughput in grid-point additions per second (seed 004's GGPAPS: one complex
multiply-add per kernel point and polarisation) and visibilities per second, and the
relative Frobenius error against the float64 reference on a subset of the data.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .. import __version__
from .. import reference
from ..reference import relative_error
from ..operators.degridder import Degridder
from ..operators.gridder import Gridder, kernel_seconds
from ..device.runtime import device_facts, devices, get_queue
from .benchsets import DATASETS, Workload, make_workload
from ..strategies import DEGRIDDING_METHODS, GRIDDING_METHODS, spelling

__all__ = ["Workload", "make_workload", "run_benchmark", "device_times", "relative_error", "BenchResult",
           "benchmark_methods", "environment", "DATASETS"]

# Single/double precision peak GFLOP/s of devices whose peak is known (vendor datasheets),
# matched against the device name; the fraction of peak is left out for others.
PEAK_GFLOPS = {"H100 80GB HBM3": (66900.0, 33500.0), "H100 PCIe": (51200.0, 25600.0),
               "H200": (66900.0, 33500.0), "A100": (19500.0, 9700.0)}
DEGRID_PREFIX = "degrid-"


@dataclass
class BenchResult:
    device: str
    method: str
    precision: str
    workload: dict
    repeats: int
    median_s: float = float("nan")
    min_s: float = float("nan")
    max_s: float = float("nan")
    grid_point_additions: int = 0
    gpa_per_s: float = float("nan")
    vis_per_s: float = float("nan")
    error: float = float("nan")
    error_subset: int = 0
    peak_fraction: float | None = None   # useful flops (8 per grid-point addition) / device FP peak
    tuning: dict = field(default_factory=dict)
    failed: str | None = None

    def row(self) -> str:
        if self.failed:
            return f"{self.device[:28]:28s} {self.method:22s} {self.precision:6s} FAILED: {self.failed}"
        w = self.workload
        spread = f"{self.min_s * 1e3:.3f}-{self.max_s * 1e3:.3f}"
        return (f"{self.device[:28]:28s} {self.method:22s} {self.precision:6s} {w['dataset']:8s} "
                f"{w['num_vis']:>10,d} {2 * w['supports'][1] + 1:>4d}^2 {w['npol']:>2d} "
                f"{self.median_s * 1e3:>10.3f} {spread:>19s} {self.gpa_per_s / 1e9:>9.2f} "
                f"{self.vis_per_s / 1e6:>9.2f} {self.error:>9.1e}")


HEADER = (f"{'device':28s} {'method':22s} {'prec':6s} {'dataset':8s} {'vis':>10s} {'kernel':>6s} "
          f"{'np':>2s} {'median ms':>10s} {'min-max ms':>19s} {'GGPA/s':>9s} {'Mvis/s':>9s} {'rel.err':>9s}")


def device_times(operation, prepared, repeats: int, warmup: int = 1) -> list:
    """Device seconds (OpenCL profiling, gridding or degridding kernels only) of ``repeats``
    runs after ``warmup`` (a gridder's first event, zeroing the grid, is not counted)."""
    skip = 1 if isinstance(operation, Gridder) else 0
    times = []
    for i in range(warmup + repeats):
        events = operation.execute(prepared)
        events[-1].wait()
        if i >= warmup:
            times.append(kernel_seconds(events[skip:]))
    return times


def benchmark_methods() -> list[str]:
    """Every method `run_benchmark` takes: gridding methods, then ``degrid-<method>``."""
    return list(GRIDDING_METHODS) + [DEGRID_PREFIX + m for m in DEGRIDDING_METHODS]


def run_benchmark(workload: Workload, device=None, method: str = "atomic", precision: str = "single",
                  repeats: int = 5, warmup: int = 1, error_subset: int = 20000,
                  tuning: dict | None = None, deterministic: bool = False) -> BenchResult:
    """Time one strategy on one workload; errors are reported in the result, not raised.

    ``method`` is a gridding method or ``degrid-<method>``; for degridding the
    throughput counts grid points read and visibilities predicted from a random grid.
    The error is against the reference with the strategy's own kernel interpolation
    (nearest samples, or linear for ``texture``).  ``deterministic`` grids in fixed
    point (`clgrid.operators.deterministic`); its time includes the conversion to float.
    """
    queue = get_queue(device)
    result = BenchResult(device=queue.device.name.strip(), method=method, precision=precision,
                         workload=workload.describe(), repeats=repeats)
    degrid = method.startswith(DEGRID_PREFIX)
    geometry = (workload.grid_size, workload.cell_size, workload.kernels)
    try:
        if degrid:
            operation = Degridder(*geometry, **spelling("degrid", method[len(DEGRID_PREFIX):]), device=queue,
                                  precision=precision, tuning=tuning, on_dropped="ignore")
            grid = workload.random_grid()
            operation.load_grid(grid)[2].wait()
            prepared = operation.prepare(workload.uvw, grid.shape[0])
        else:
            operation = Gridder(*geometry, **spelling("grid", method), device=queue, precision=precision, tuning=tuning,
                                on_dropped="ignore", deterministic=deterministic)
            prepared = operation.prepare(workload.uvw, workload.vis)
        result.tuning = dict(prepared.strategy.tuning)   # the npol's own values where the table has them
        times = device_times(operation, prepared, repeats, warmup)
        result.median_s = float(np.median(times))
        result.min_s, result.max_s = float(min(times)), float(max(times))
        result.grid_point_additions = prepared.grid_point_additions
        result.gpa_per_s = result.grid_point_additions / result.median_s
        result.vis_per_s = prepared.plan.num_kept / result.median_s
        peak = next((p for name, p in PEAK_GFLOPS.items() if name in result.device), None)
        if peak:
            result.peak_fraction = 8 * result.gpa_per_s / (peak[precision == "double"] * 1e9)
        per_baseline = int(np.prod(workload.uvw.shape[1:-1]))
        sub = slice(0, max(1, min(error_subset // per_baseline, workload.uvw.shape[0])))
        same = dict(on_dropped="ignore", interpolation=operation.strategy.interpolation)
        if degrid:
            got = operation.degrid(grid, workload.uvw[sub])
            ref = reference.degrid(grid, workload.uvw[sub], *geometry, **same)
        else:
            got = operation.grid(workload.uvw[sub], workload.vis[sub])
            ref = reference.grid(workload.uvw[sub], workload.vis[sub], *geometry, **same)
        result.error = relative_error(got, ref)
        result.error_subset = sub.stop * per_baseline
    except Exception as exc:  # a failed run is a row in the table, the others go on
        result.failed = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return result


def environment() -> dict:
    """What a reader needs to compare numbers: versions, commit, every OpenCL device."""
    commit = os.environ.get("CLGRID_GIT_COMMIT")  # for copies without .git, such as a GPU machine's
    if not commit:
        try:
            run = subprocess.run(["git", "rev-parse", "--verify", "HEAD"], capture_output=True, text=True,
                                 cwd=Path(__file__).parent, timeout=10)
            commit = run.stdout.strip() if run.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            commit = None
    return {"clgrid": __version__, "git_commit": commit, "python": platform.python_version(),
            "numpy": np.__version__, "host": platform.node(), "machine": platform.machine(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "devices": [{k: v for k, v in asdict(device_facts(d)).items() if k != "extensions"}
                        for d in devices()]}


def write_json(path, results, env) -> None:
    """Write every result; through a temporary file and a rename, so that an interrupted
    write never leaves half a file (`clgrid bench` rewrites it after every run)."""
    path = Path(path)
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps({"environment": env, "results": [asdict(r) for r in results]}, indent=1,
                               default=float))
    os.replace(part, path)
