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

from . import datasets
from .bench import Workload, synthetic_stack
from .kernels import KernelStack
from .plan import SPEED_OF_LIGHT

__all__ = ["SKA_LIKE", "ska_like_supports", "ska_like_kernels", "ska_like", "uniform_like"]

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
