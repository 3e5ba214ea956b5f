"""`Gridder`: the public entry point for gridding on an OpenCL device.

It validates and plans on the host (`plan.py`), uploads the plan and the weighted
visibilities, zeroes the grid on the device, lets the chosen strategy enqueue its
kernels, and copies the grid back.  The report of the last call (counts of what was
gridded and dropped, ``norm``, timings) is kept in ``last_report``.
"""

from __future__ import annotations

import time

import numpy as np
import pyopencl as cl

from .operation import GridOperation, PreparedVisibilities, kernel_seconds
from .plan import flatten_samples
from .runtime import fill_zeros
from .strategies import GRIDDING_METHODS

__all__ = ["Gridder", "PreparedVisibilities", "kernel_seconds"]


class Gridder(GridOperation):
    """Grid visibilities onto a uv-grid with W-projection kernels on an OpenCL device.

    Parameters
    ----------
    grid_size : even number of cells N along u and v; the centre is at N // 2.
    cell_size : image-plane pixel size in radians; the uv cell is 1 / (N * cell_size).
    kernels : the `KernelStack` to convolve with.
    method : gridding strategy, one of ``Gridder.methods`` (default "atomic").
    device : None (``$CLGRID_DEVICE``, else a GPU, else PoCL), a name such as "pocl"
        or "nvidia", or a pyopencl Device, Context or CommandQueue.
    precision : "single" (complex64 grid) or "double" (complex128; needs fp64).
    tuning : overrides of the tuning table's parameters for this strategy.
    on_dropped : "warn", "raise" or "ignore" for visibilities off the grid or beyond
        the kernel stack (they are counted in ``last_report`` in every case).
    binary : a precompiled program (from ``clgrid emit`` and an offline compiler such
        as ``aoc``, or `Strategy.save_binary`) to load instead of building the source;
        its ``.json`` description must sit beside it and match this call.
    """

    strategies = GRIDDING_METHODS
    methods = tuple(GRIDDING_METHODS)
    default_method = "atomic"
    done = "gridded"

    def prepare(self, uvw, vis, weights=None, flags=None, freqs=None) -> PreparedVisibilities:
        """Validate, plan and upload visibilities, ready for `execute` (any number of times)."""
        return self.prepare_samples(flatten_samples(uvw, vis, weights, flags, freqs))

    def execute(self, prepared: PreparedVisibilities) -> list:
        """Enqueue zeroing and gridding into the device grid; returns the OpenCL events."""
        npol = prepared.plan.npol
        grid_buffer = self.grid_buffer(npol)
        zero = fill_zeros(self.queue, grid_buffer, self._grid_bytes(npol), self.strategy.real_dtype)
        if prepared.device_plan is None:
            return [zero]
        strategy = prepared.strategy or self.strategy
        return [zero, *strategy.grid(prepared.device_plan, npol, grid_buffer, wait_for=[zero])]

    def grid(self, uvw, vis, weights=None, flags=None, freqs=None, return_report: bool = False):
        """Grid visibilities; returns the ``(npol, N, N)`` complex grid, indexed ``[pol, v, u]``.

        ``uvw`` (..., 3): wavelengths, or metres when ``freqs`` (Hz) is given.
        ``vis`` (..., npol) or with freqs (..., nchan, npol); npol is 1, 2 or 4.
        ``weights`` and ``flags`` broadcast to the shape of ``vis``.
        With ``return_report=True`` returns ``(grid, report)``; the report is also
        kept in ``last_report``.
        """
        t0 = time.perf_counter()
        prepared = self.prepare(uvw, vis, weights, flags, freqs)
        t_plan = time.perf_counter()
        events = self.execute(prepared)
        npol = prepared.plan.npol
        out = np.empty((npol, self.grid_size, self.grid_size), self.strategy.complex_dtype)
        cl.enqueue_copy(self.queue, out, self.grid_buffer(npol), wait_for=events[-1:]).wait()
        report = self._keep_report(prepared.plan.report(), t0, t_plan, events[1:])
        return (out, report) if return_report else out
