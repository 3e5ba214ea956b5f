"""Benchmarks: time each gridding strategy on a device and check it against the reference.

Every result states the device, the data size, the kernel sizes, the median device
time of several runs after a warm-up (OpenCL profiling events, kernels only), the
throughput in grid-point additions per second (seed 004's GGPAPS: one complex
multiply-add per kernel point and polarisation) and visibilities per second, and the
relative Frobenius error against the float64 reference on a subset of the data.
"""

from __future__ import annotations

import json
import platform
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import __version__, datasets, reference
from .gridder import Gridder, kernel_seconds
from .kernels import KernelStack, quarter_size
from .runtime import device_facts, devices, get_queue

__all__ = ["Workload", "make_workload", "run_benchmark", "BenchResult", "environment", "DATASETS"]

DATASETS = ("uniform", "tracks")


@dataclass
class Workload:
    """Visibilities and the kernel stack and grid they are gridded with."""

    name: str
    grid_size: int
    cell_size: float
    kernels: KernelStack
    uvw: np.ndarray          # wavelengths, (n, 3)
    vis: np.ndarray          # (n, npol)

    def describe(self) -> dict:
        return {"dataset": self.name, "grid_size": self.grid_size, "num_vis": int(self.uvw.shape[0]),
                "npol": int(self.vis.shape[1]), "oversample": self.kernels.oversample,
                "num_planes": self.kernels.num_planes,
                "supports": [int(self.kernels.supports.min()), int(self.kernels.supports.max())]}


def synthetic_stack(supports, oversample: int, w_max: float) -> KernelStack:
    """A stack with the given support per plane, quick to make for any size.

    Each plane is a separable exponential-of-semicircle kernel filling exactly its
    support, with a w-dependent quadratic phase so planes differ; planes are spaced
    by sqrt(w) up to ``w_max``.
    """
    num_planes = len(supports)
    planes = []
    for p, support in enumerate(supports):
        q = quarter_size(support, oversample)
        x = np.arange(q) / (oversample * (support + 1))
        es = np.exp(14.0 * (np.sqrt(1.0 - np.minimum(x, 1.0) ** 2) - 1.0))   # 1e-6 at the edge: no denormals
        r2 = x[:, None] ** 2 + x[None, :] ** 2
        planes.append(np.outer(es, es) * np.exp(-1j * np.pi * p / num_planes * r2))
    w_scale = (num_planes - 1) ** 2 / w_max if num_planes > 1 else 0.0
    return KernelStack.from_arrays(planes, supports, oversample, w_scale, taper="es")


def fixed_support_stack(support: int, oversample: int, num_planes: int, w_max: float) -> KernelStack:
    """Every plane with the same support, as in seed 004's fixed-size measurements."""
    return synthetic_stack([support] * num_planes, oversample, w_max)


def make_workload(dataset: str, num_vis: int, grid_size: int, support: int, npol: int = 1,
                  oversample: int = 8, num_planes: int = 32, seed: int = 1) -> Workload:
    """A benchmark workload: uniform random uvw, or Earth-rotation tracks of MeerKAT.

    The kernel stack has a fixed ``support`` on every plane so throughput can be
    read against kernel size; ``tracks`` scales the array to fill 80% of the grid.
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {list(DATASETS)}")
    rng = np.random.default_rng(seed)
    cell = 1.0 / grid_size  # field of view 1 rad: du = 1 wavelength
    reach = 0.8 * (grid_size // 2 - support - 1)
    w_max = 0.25 * reach
    if dataset == "uniform":
        uvw = datasets.uniform_uvw(num_vis, reach / np.sqrt(2), w_max, rng)
    else:
        layout = datasets.load_layout("meerkat")
        nbl = layout.num_baselines
        ntime = max(1, -(-num_vis // nbl))
        ha = np.linspace(-np.pi / 3, np.pi / 3, ntime)
        uvw = datasets.simulate_uvw(layout, declination=-0.5, hour_angles=ha).reshape(-1, 3)[:num_vis]
        uvw = uvw * (reach / np.abs(uvw[:, :2]).max())
        uvw[:, 2] = np.clip(uvw[:, 2], -w_max, w_max)
    vis = (rng.standard_normal((uvw.shape[0], npol)) + 1j * rng.standard_normal((uvw.shape[0], npol)))
    kernels = fixed_support_stack(support, oversample, num_planes, w_max)
    return Workload(dataset, grid_size, cell, kernels, uvw, vis)


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
    tuning: dict = field(default_factory=dict)
    failed: str | None = None

    def row(self) -> str:
        if self.failed:
            return f"{self.device[:28]:28s} {self.method:10s} {self.precision:6s} FAILED: {self.failed}"
        w = self.workload
        return (f"{self.device[:28]:28s} {self.method:10s} {self.precision:6s} {w['dataset']:8s} "
                f"{w['num_vis']:>10,d} {2 * w['supports'][1] + 1:>4d}^2 {w['npol']:>2d} "
                f"{self.median_s * 1e3:>10.3f} {self.gpa_per_s / 1e9:>9.2f} "
                f"{self.vis_per_s / 1e6:>9.2f} {self.error:>9.1e}")


HEADER = (f"{'device':28s} {'method':10s} {'prec':6s} {'dataset':8s} {'vis':>10s} {'kernel':>6s} "
          f"{'np':>2s} {'median ms':>10s} {'GGPA/s':>9s} {'Mvis/s':>9s} {'rel.err':>9s}")


def run_benchmark(workload: Workload, device=None, method: str = "atomic", precision: str = "single",
                  repeats: int = 5, warmup: int = 1, error_subset: int = 20000,
                  tuning: dict | None = None) -> BenchResult:
    """Time one strategy on one workload; errors are reported in the result, not raised."""
    queue = get_queue(device)
    result = BenchResult(device=queue.device.name.strip(), method=method, precision=precision,
                         workload=workload.describe(), repeats=repeats)
    try:
        gridder = Gridder(workload.grid_size, workload.cell_size, workload.kernels, method=method,
                          device=queue, precision=precision, tuning=tuning, on_dropped="ignore")
        result.tuning = dict(gridder.strategy.tuning)
        prepared = gridder.prepare(workload.uvw, workload.vis)
        times = []
        for i in range(warmup + repeats):
            events = gridder.execute(prepared)
            events[-1].wait()
            if i >= warmup:
                times.append(kernel_seconds(events[1:]))
        result.median_s = float(np.median(times))
        result.min_s, result.max_s = float(min(times)), float(max(times))
        result.grid_point_additions = prepared.plan.grid_point_additions
        result.gpa_per_s = result.grid_point_additions / result.median_s
        result.vis_per_s = prepared.plan.num_kept / result.median_s
        sub = slice(0, min(error_subset, workload.uvw.shape[0]))
        device_grid = gridder.grid(workload.uvw[sub], workload.vis[sub])
        ref = reference.grid(workload.uvw[sub], workload.vis[sub], workload.grid_size,
                             workload.cell_size, workload.kernels, on_dropped="ignore")
        result.error = float(np.linalg.norm(device_grid - ref) / np.linalg.norm(ref))
        result.error_subset = sub.stop
    except Exception as exc:  # a failed run is a row in the table, the others go on
        result.failed = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return result


def environment() -> dict:
    """What a reader needs to compare numbers: versions, commit, every OpenCL device."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"clgrid": __version__, "git_commit": commit, "python": platform.python_version(),
            "numpy": np.__version__, "host": platform.node(), "machine": platform.machine(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "devices": [{k: v for k, v in asdict(device_facts(d)).items() if k != "extensions"}
                        for d in devices()]}


def write_json(path, results, env) -> None:
    Path(path).write_text(json.dumps({"environment": env, "results": [asdict(r) for r in results]},
                                     indent=1, default=float))
