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

from . import __version__, datasets, reference
from .degridder import Degridder
from .gridder import Gridder, kernel_seconds
from .kernels import KernelStack, quarter_size
from .runtime import device_facts, devices, get_queue
from .strategies import DEGRIDDING_METHODS, GRIDDING_METHODS

__all__ = ["Workload", "make_workload", "run_benchmark", "device_times", "relative_error", "BenchResult",
           "benchmark_methods", "environment", "DATASETS"]

DATASETS = ("uniform", "tracks", "lofar", "ska")
# Single/double precision peak GFLOP/s of devices whose peak is known (vendor datasheets),
# matched against the device name; the fraction of peak is left out for others.
PEAK_GFLOPS = {"H100 80GB HBM3": (66900.0, 33500.0), "H100 PCIe": (51200.0, 25600.0),
               "H200": (66900.0, 33500.0), "A100": (19500.0, 9700.0)}
DEGRID_PREFIX = "degrid-"


@dataclass
class Workload:
    """Visibilities and the kernel stack and grid they are gridded with."""

    name: str
    grid_size: int
    cell_size: float
    kernels: KernelStack
    uvw: np.ndarray          # wavelengths, (nbaseline, ntime, 3): every strategy takes tracks
    vis: np.ndarray          # (nbaseline, ntime, npol)

    def random_grid(self) -> np.ndarray:
        """A reproducible random grid ``(npol, N, N)`` to degrid from."""
        rng = np.random.default_rng(7)
        shape = (self.vis.shape[-1], self.grid_size, self.grid_size)
        return (rng.standard_normal(shape, np.float32) + 1j * rng.standard_normal(shape, np.float32))

    def describe(self) -> dict:
        return {"dataset": self.name, "grid_size": self.grid_size, "num_vis": int(np.prod(self.uvw.shape[:-1])),
                "npol": int(self.vis.shape[-1]), "oversample": self.kernels.oversample,
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
    """A benchmark workload: uniform random uvw, or Earth-rotation tracks.

    ``tracks``: MeerKAT (2016 baselines) over +-4 h; ``lofar``: seed 004's 44 LOFAR
    stations (946 baselines) in 10 s steps, one channel; ``ska``: the SKA-like set of
    `clgrid.benchsets` (row order, its own 601-plane kernel stack), scaled to ``num_vis``.  The kernel stack has a
    fixed ``support`` on every plane so throughput can be read against kernel size;
    tracks are scaled to fill 80% of the grid and ``num_vis`` rounds up to whole time
    steps of all baselines; ``uniform`` makes every visibility a baseline of one step.
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {list(DATASETS)}")
    if dataset == "ska":   # its own grid geometry and 601-plane stack: support and oversample do not apply
        from .benchsets import SKA_LIKE_VISIBILITIES, ska_like

        return ska_like(scale=min(1.0, num_vis / SKA_LIKE_VISIBILITIES), grid_size=max(grid_size, 2048),
                        npol=npol, seed=seed)
    rng = np.random.default_rng(seed)
    cell = 1.0 / grid_size  # field of view 1 rad: du = 1 wavelength
    reach = 0.8 * (grid_size // 2 - support - 1)
    w_max = 0.25 * reach
    if dataset == "uniform":
        uvw = datasets.uniform_uvw(num_vis, reach / np.sqrt(2), w_max, rng)[:, None, :]
    else:
        if dataset == "tracks":
            layout = datasets.load_layout("meerkat")
            ntime = max(1, -(-num_vis // layout.num_baselines))
            uvw = datasets.simulate_uvw(layout, declination=-0.5,
                                        hour_angles=np.linspace(-np.pi / 3, np.pi / 3, ntime))
        else:
            ntime = max(1, -(-num_vis // 946))
            uvw, _ = datasets.lofar_like(44, hours=ntime * 10.0 / 3600, integration_s=10.0, nchan=1)
        uvw = uvw * (reach / np.abs(uvw[..., :2]).max())
        uvw[..., 2] = np.clip(uvw[..., 2], -w_max, w_max)
    shape = uvw.shape[:-1] + (npol,)
    vis = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
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
    peak_fraction: float | None = None   # useful flops (8 per grid-point addition) / device FP peak
    tuning: dict = field(default_factory=dict)
    failed: str | None = None

    def row(self) -> str:
        if self.failed:
            return f"{self.device[:28]:28s} {self.method:20s} {self.precision:6s} FAILED: {self.failed}"
        w = self.workload
        return (f"{self.device[:28]:28s} {self.method:20s} {self.precision:6s} {w['dataset']:8s} "
                f"{w['num_vis']:>10,d} {2 * w['supports'][1] + 1:>4d}^2 {w['npol']:>2d} "
                f"{self.median_s * 1e3:>10.3f} {self.gpa_per_s / 1e9:>9.2f} "
                f"{self.vis_per_s / 1e6:>9.2f} {self.error:>9.1e}")


HEADER = (f"{'device':28s} {'method':20s} {'prec':6s} {'dataset':8s} {'vis':>10s} {'kernel':>6s} "
          f"{'np':>2s} {'median ms':>10s} {'GGPA/s':>9s} {'Mvis/s':>9s} {'rel.err':>9s}")


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


def relative_error(result, reference) -> float:
    """||result - reference||_F / ||reference||_F, the accuracy measure of the seeds."""
    return float(np.linalg.norm(result - reference) / np.linalg.norm(reference))


def run_benchmark(workload: Workload, device=None, method: str = "atomic", precision: str = "single",
                  repeats: int = 5, warmup: int = 1, error_subset: int = 20000,
                  tuning: dict | None = None) -> BenchResult:
    """Time one strategy on one workload; errors are reported in the result, not raised.

    ``method`` is a gridding method or ``degrid-<method>``; for degridding the
    throughput counts grid points read and visibilities predicted from a random grid.
    The error is against the reference with the strategy's own kernel interpolation
    (nearest samples, or linear for ``texture``).
    """
    queue = get_queue(device)
    result = BenchResult(device=queue.device.name.strip(), method=method, precision=precision,
                         workload=workload.describe(), repeats=repeats)
    degrid = method.startswith(DEGRID_PREFIX)
    geometry = (workload.grid_size, workload.cell_size, workload.kernels)
    try:
        if degrid:
            operation = Degridder(*geometry, method=method[len(DEGRID_PREFIX):], device=queue,
                                  precision=precision, tuning=tuning, on_dropped="ignore")
            grid = workload.random_grid()
            operation.load_grid(grid).wait()
            prepared = operation.prepare(workload.uvw, grid.shape[0])
        else:
            operation = Gridder(*geometry, method=method, device=queue, precision=precision, tuning=tuning,
                                on_dropped="ignore")
            prepared = operation.prepare(workload.uvw, workload.vis)
        result.tuning = dict(prepared.strategy.tuning)   # the npol's own values where the table has them
        times = device_times(operation, prepared, repeats, warmup)
        result.median_s = float(np.median(times))
        result.min_s, result.max_s = float(min(times)), float(max(times))
        result.grid_point_additions = prepared.plan.grid_point_additions
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


def write_json(path, results, env, comparison=()) -> None:
    Path(path).write_text(json.dumps({"environment": env, "results": [asdict(r) for r in results],
                                      "cpu_libraries": list(comparison)}, indent=1, default=float))
