"""`Degridder`: the public entry point for degridding on an OpenCL device.

Degridding is the adjoint of gridding (`reference.degrid` defines it): visibilities
are predicted from a grid.  The host validates and plans as for gridding, the
strategy orders the visibilities for its kernel (by cell, or track by track), the
grid is uploaded once per call, and the results come back in the caller's order and
shape, with flagged and dropped samples zero.
"""

from __future__ import annotations

import time

import numpy as np
import pyopencl as cl

from .operation import GridOperation, PreparedVisibilities
from .plan import check_grid, flatten_positions
from .strategies import DEGRIDDING_METHODS

__all__ = ["Degridder"]


class Degridder(GridOperation):
    """Predict visibilities from a uv-grid with W-projection kernels on an OpenCL device.

    Parameters as for `clgrid.Gridder`; ``method`` is one of ``Degridder.methods``:
    "gather" (default; any visibility order) or "moving_window" (uvw ordered by
    baseline, shape (nbaseline, ntime, 3): each baseline's time track reuses grid
    values).
    """

    strategies = DEGRIDDING_METHODS
    methods = tuple(DEGRIDDING_METHODS)
    default_method = "gather"
    done = "degridded"

    def prepare(self, uvw, npol: int, flags=None, freqs=None) -> PreparedVisibilities:
        """Validate, plan and upload the positions of ``npol``-polarisation visibilities."""
        if npol not in (1, 2, 4):
            raise ValueError(f"npol must be 1, 2 or 4, got {npol!r}")
        return self.prepare_samples(flatten_positions(uvw, npol, flags, freqs))

    def load_grid(self, grid) -> cl.Event:
        """Check ``grid`` (npol, N, N) and copy it to the device grid; returns the event."""
        grid = check_grid(grid, self.grid_size)
        self._check_grid_fits(grid.shape[0])
        host = np.ascontiguousarray(grid, self.strategy.complex_dtype)
        return cl.enqueue_copy(self.queue, self.grid_buffer(grid.shape[0]), host, is_blocking=False)

    def execute(self, prepared: PreparedVisibilities, wait_for=None) -> list:
        """Enqueue degridding from the loaded grid into the prepared visibilities; returns the events."""
        if prepared.device_plan is None:
            return []
        npol = prepared.plan.npol
        strategy = prepared.strategy or self.strategy
        return strategy.degrid(prepared.device_plan, npol, self.grid_buffer(npol), wait_for=wait_for)

    def fetch(self, prepared: PreparedVisibilities, wait_for=None) -> np.ndarray:
        """The degridded visibilities in the caller's order and shape (zero where not degridded)."""
        plan = prepared.plan
        values = np.empty((plan.num_kept, plan.npol), self.strategy.complex_dtype)
        if plan.num_kept:
            cl.enqueue_copy(self.queue, values, prepared.device_plan.vis, wait_for=wait_for).wait()
        return prepared.samples.unflatten(plan.sample, values)

    def degrid(self, grid, uvw, flags=None, freqs=None, return_report: bool = False):
        """Degrid ``grid`` (npol, N, N), indexed [pol, v, u], at ``uvw``.

        ``uvw`` (..., 3): wavelengths, or metres when ``freqs`` (Hz) is given.  Returns
        complex visibilities of shape (..., npol), or (..., nchan, npol) with freqs;
        ``flags`` broadcast to that shape.  With ``return_report=True`` returns
        ``(vis, report)``; the report is also kept in ``last_report``.
        """
        t0 = time.perf_counter()
        loaded = self.load_grid(grid)                 # the copy overlaps the planning
        prepared = self.prepare(uvw, np.shape(grid)[0], flags, freqs)
        t_plan = time.perf_counter()
        events = self.execute(prepared, wait_for=[loaded])
        vis = self.fetch(prepared, wait_for=events[-1:] or [loaded])
        report = self._keep_report(prepared.plan.degrid_report(), t0, t_plan, events)
        return (vis, report) if return_report else vis
