"""The float64 reference: the definition of what every gridder and degridder must compute.

Seed 003 Listing 1, generalised to polarisations, channels, weights and flags, and
vectorised with numpy (one pass per w-plane, visibilities in chunks).  Its index
arithmetic is `plan.grid_indices`, shared with the devices, so a device result can
only differ from this one by floating-point accumulation.  Degridding is the
Hermitian adjoint of gridding and walks the very same footprints.  With
``interpolation="linear"`` the weights are the kernel cube interpolated in (u, v, w)
exactly as `clgrid.sources.interpolation` defines it (the texture strategies' semantics); with
an analytic kernel source (`clgrid.sources.analytic`) they are its polynomials evaluated
in float64 at each tap's exact distance from the visibility.
"""

from __future__ import annotations

import numpy as np

from .sources.interpolation import trilinear
from .sources.tables import KernelStack
from .planning.host import (Positions, check_grid, check_grid_geometry, flatten_positions, flatten_samples,
                   plan_visibilities)

__all__ = ["grid", "grid_plan", "degrid", "degrid_plan", "relative_error"]

_CHUNK_POINTS = 1 << 22  # kernel points per vectorised chunk, bounds the temporaries


def _interpolated_weights(plan: Positions, cube: np.ndarray, oversample: int, sel: np.ndarray,
                          taps: np.ndarray):
    """The cube interpolated at the taps (n, W, W) [j, k] of the visibilities ``sel``."""
    frac_u, frac_v, z = (plan.position[sel, i, None] for i in range(3))
    x = np.abs(taps - frac_u) * oversample                   # (n, W)
    y = np.abs(taps - frac_v) * oversample
    return trilinear(cube, z[:, :, None], y[:, :, None], x[:, None, :])


def _footprints(plan: Positions, weights, sel: np.ndarray, support: int):
    """Flat grid offsets (n, W*W) and kernel weights (n, W*W) of the visibilities ``sel``;
    ``weights(sel, taps)`` gives the unconjugated weights (n, W, W)."""
    taps = np.arange(-support, support + 1)
    c = weights(sel, taps)
    c = np.where(plan.conj[sel, None, None], c.conj(), c)
    n = plan.grid_size
    rows = (plan.grid_v[sel, None] + taps).astype(np.int64) * n
    cols = plan.grid_u[sel, None] + taps
    cells = rows[:, :, None] + cols[:, None, :]
    return cells.reshape(sel.size, -1), c.reshape(sel.size, -1)


def _footprint_chunks(plan: Positions, kernels: KernelStack):
    """``(sel, cells, c)`` for every kept visibility, a chunk at a time: a w-plane at a time
    for nearest samples, a footprint support at a time for interpolated weights."""
    if kernels.evaluated or plan.position is None:     # the source's own weights
        group = plan.plane
        weights = lambda sel, taps: kernels.tap_weights(plan, sel, taps)  # noqa: E731
    else:                                               # tables interpolated linearly
        group = plan.support
        cube = kernels.cube()
        weights = lambda sel, taps: _interpolated_weights(plan, cube, kernels.oversample, sel, taps)  # noqa: E731
    for g in np.unique(group):
        mine = np.flatnonzero(group == g)
        support = int(plan.support[mine[0]])
        chunk = max(1, _CHUNK_POINTS // (2 * support + 1) ** 2)
        for start in range(0, mine.size, chunk):
            sel = mine[start:start + chunk]
            yield (sel, *_footprints(plan, weights, sel, support))


def grid_plan(plan: Positions, vis: np.ndarray, kernels: KernelStack) -> np.ndarray:
    """Grid planned, weighted visibilities ``vis`` (num_kept, npol) in float64."""
    n = plan.grid_size
    out = np.zeros((plan.npol, n * n), np.complex128)
    for sel, cells, c in _footprint_chunks(plan, kernels):
        for pol in range(plan.npol):
            contrib = (vis[sel, pol, None] * c).ravel()
            np.add.at(out[pol], cells.ravel(), contrib)
    return out.reshape(plan.npol, n, n)


def degrid_plan(plan: Positions, grid: np.ndarray, kernels: KernelStack) -> np.ndarray:
    """Planned visibilities (num_kept, npol) from ``grid`` in float64: sum of grid * conj(c)."""
    flat = np.asarray(grid, np.complex128).reshape(plan.npol, -1)
    out = np.zeros((plan.num_kept, plan.npol), np.complex128)
    for sel, cells, c in _footprint_chunks(plan, kernels):
        for pol in range(plan.npol):
            out[sel, pol] = np.einsum("ij,ij->i", flat[pol][cells], c.conj())
    return out


def grid(uvw, vis, grid_size: int, cell_size: float, kernels: KernelStack, weights=None,
         flags=None, freqs=None, on_dropped: str = "warn", return_report: bool = False,
         interpolation: str = "nearest"):
    """Grid visibilities in float64 exactly as seed 003 Listing 1 does (``interpolation=
    "nearest"``), or with weights interpolated from the kernel cube (``"linear"``).

    Arguments as for `clgrid.Gridder.grid`.  Returns the complex128 grid
    ``(npol, grid_size, grid_size)`` indexed ``[pol, v, u]``, and with
    ``return_report=True`` also the plan's report (counts and ``norm``).
    """
    samples = flatten_samples(uvw, vis, weights, flags, freqs)
    plan = plan_visibilities(samples, grid_size, cell_size, kernels, on_dropped, interpolation=interpolation)
    result = grid_plan(plan, samples.vis[plan.sample], kernels)
    return (result, plan.report()) if return_report else result


def degrid(grid, uvw, grid_size: int, cell_size: float, kernels: KernelStack, flags=None,
           freqs=None, on_dropped: str = "warn", return_report: bool = False,
           interpolation: str = "nearest"):
    """Degrid in float64: the Hermitian adjoint of `grid` (weights do not apply).

    ``grid`` (npol, grid_size, grid_size) complex; other arguments as for `grid`.
    Returns complex128 visibilities shaped (..., npol), or (..., nchan, npol) with
    ``freqs``; flagged, off-grid and beyond-stack samples are 0 and counted in the
    report (``return_report=True``).
    """
    check_grid_geometry(grid_size, cell_size)
    grid = check_grid(grid, grid_size)
    samples = flatten_positions(uvw, grid.shape[0], flags, freqs)
    plan = plan_visibilities(samples, grid_size, cell_size, kernels, on_dropped, done="degridded",
                             interpolation=interpolation)
    vis = samples.unflatten(plan.sample, degrid_plan(plan, grid, kernels))
    return (vis, plan.degrid_report()) if return_report else vis


def relative_error(result, reference) -> float:
    """``||result - reference||_F / ||reference||_F``, the accuracy measure of the seeds (a
    zero reference is refused: against it the measure would prove nothing)."""
    reference = np.asarray(reference)
    scale = np.linalg.norm(reference)
    if scale == 0:
        raise ValueError("the reference is all zeros: a relative error against it means nothing")
    return float(np.linalg.norm(np.asarray(result) - reference) / scale)
