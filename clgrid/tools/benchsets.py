"""Benchmark data sets of the size the seeds measured: SKA-like tracks, and a uniform set.

The SKA-like set follows seed 000 Part II Table 2 (the "SKA 56-82" set on which the
NAG/NVIDIA tiled gridder took 327 ms on a P100): 512 stations (the SKA1-Low layout,
130,816 baselines), 240 time steps of 30 s, one channel, 601 w-planes spaced by
sqrt(w) with supports growing from 4 to 72 cells, oversample 4, an 18000^2 grid of
which the tracks fill about 5500 x 5000 cells.  The source is at declination -35 deg
from hour angle -2.5 h to -0.5 h, so the elevation climbs from 57 to 80 degrees like
the seeds' "EL56-82".  Positions are those of the shipped layout; the kernels are
synthetic (`bench.synthetic_stack`) with a support that grows linearly with w (as a
w-term's does), i.e. with the square of the plane index.  ``scale`` keeps that
fraction of the baselines, chosen at random, so the dense core stays as dense
relative to the rest; the uv and w ranges, and with them the kernels, stay those of
the full set.

The uniform set spreads visibilities uniformly over the same active region and
w range, with the same kernels: no tracks, no dense core.
"""

from __future__ import annotations

import math

import numpy as np

from dataclasses import dataclass

from . import datasets
from ..sources.tables import KernelStack, quarter_size
from ..planning.host import SPEED_OF_LIGHT

__all__ = ["DATASETS", "Workload", "synthetic_stack", "fixed_support_stack", "make_workload", "SKA_LIKE",
           "ska_like_supports", "ska_like_kernels", "ska_like", "uniform_like"]

DATASETS = ("uniform", "tracks", "lofar", "ska")


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
    `clgrid.tools.benchsets` (row order, its own 601-plane kernel stack), scaled to ``num_vis``.  The kernel stack has a
    fixed ``support`` on every plane so throughput can be read against kernel size;
    tracks are scaled to fill 80% of the grid and ``num_vis`` rounds up to whole time
    steps of all baselines; ``uniform`` makes every visibility a baseline of one step.
    """
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {list(DATASETS)}")
    if dataset == "ska":   # its own grid geometry and 601-plane stack: support and oversample do not apply
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


SKA_LIKE = dict(
    layout="ska_low", time_steps=240, integration_s=30.0, hour_angle_end_h=-0.5, declination_deg=-35.0,
    frequency_hz=100e6, grid_size=18000, active_fraction=0.38, num_planes=601, min_support=4, max_support=72,
    oversample=4,
)


def ska_like_supports(num_planes: int = 601, min_support: int = 4, max_support: int = 72) -> np.ndarray:
    """Support per plane: linear in w, so quadratic in the plane index of sqrt(w)-spaced planes."""
    p = np.arange(num_planes) / max(num_planes - 1, 1)
    return np.rint(min_support + (max_support - min_support) * p ** 2).astype(np.int32)


def ska_like_kernels(w_max: float, num_planes: int = 601, oversample: int = 4) -> KernelStack:
    """The SKA-like set's stack: ``num_planes`` planes up to ``w_max`` wavelengths, supports 4..72."""
    return synthetic_stack(ska_like_supports(num_planes), oversample, w_max)


def _hour_angles(time_steps: int) -> np.ndarray:
    """``time_steps`` hour angles over the 2 h of the full set (30 s apart at 240 steps)."""
    span = (SKA_LIKE["time_steps"] - 1) * SKA_LIKE["integration_s"] * 2 * math.pi / datasets.SIDEREAL_DAY_S
    end = SKA_LIKE["hour_angle_end_h"] * math.pi / 12
    return np.linspace(end - span, end, time_steps)


def _geometry(grid_size: int):
    """Cell size and w range of the full set: its longest baseline fills ``active_fraction`` of the grid."""
    layout = datasets.load_layout(SKA_LIKE["layout"])
    wavelength = SPEED_OF_LIGHT / SKA_LIKE["frequency_hz"]
    # every baseline at a few hour angles: the largest |u|, |v| and |w| of the full tracks, near enough
    sample = datasets.simulate_uvw(layout, declination=math.radians(SKA_LIKE["declination_deg"]),
                                   hour_angles=_hour_angles(25)) / wavelength
    uv_max = np.abs(sample[..., :2]).max()
    du = uv_max / (SKA_LIKE["active_fraction"] / 2 * grid_size)
    w_max = 1.01 * np.abs(sample[..., 2]).max()
    return layout, wavelength, 1.0 / (grid_size * du), w_max


SKA_LIKE_VISIBILITIES = 130_816 * 240   # the full set: 31,395,840


def ska_like(scale: float = 1.0, time_steps: int = 240, grid_size: int = 18000, npol: int = 1,
             seed: int = 1) -> Workload:
    """The SKA-like set, baseline-major (each baseline's time steps in order), or a fraction of it."""
    if not 0 < scale <= 1:
        raise ValueError(f"scale must be in (0, 1], got {scale}")
    layout, wavelength, cell, w_max = _geometry(grid_size)
    rng = np.random.default_rng(seed)
    num_baselines = max(1, round(layout.num_baselines * scale))
    subset = np.sort(rng.choice(layout.num_baselines, num_baselines, replace=False)) if scale < 1 else None
    uvw = datasets.simulate_uvw(layout, declination=math.radians(SKA_LIKE["declination_deg"]),
                                hour_angles=_hour_angles(time_steps), baseline_subset=subset)
    uvw = (uvw / wavelength).reshape(-1, 3)
    vis = rng.standard_normal((uvw.shape[0], npol)) + 1j * rng.standard_normal((uvw.shape[0], npol))
    return Workload("ska_like", grid_size, cell, ska_like_kernels(w_max, SKA_LIKE["num_planes"],
                                                                  SKA_LIKE["oversample"]), uvw, vis)


def uniform_like(num_vis: int, grid_size: int = 18000, npol: int = 1, seed: int = 1) -> Workload:
    """Uniform u, v over the SKA-like active region and w over its range, with its kernels."""
    _, _, cell, w_max = _geometry(grid_size)
    rng = np.random.default_rng(seed)
    du = 1.0 / (grid_size * cell)
    reach = (SKA_LIKE["active_fraction"] / 2 * grid_size - SKA_LIKE["max_support"] - 1) * du
    uvw = datasets.uniform_uvw(num_vis, reach, w_max / 1.01, rng)
    vis = rng.standard_normal((num_vis, npol)) + 1j * rng.standard_normal((num_vis, npol))
    return Workload("uniform", grid_size, cell, ska_like_kernels(w_max, SKA_LIKE["num_planes"],
                                                                 SKA_LIKE["oversample"]), uvw, vis)
