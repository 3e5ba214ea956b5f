"""`Gridder`: the public entry point for gridding on an OpenCL device.

It validates and plans on the host (`plan.py`), uploads the plan and the weighted
visibilities, zeroes the grid on the device, lets the chosen strategy enqueue its
kernels, and copies the grid back.  The report of the last call (counts of what was
gridded and dropped, ``norm``, timings) is kept in ``last_report``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from .runtime import get_queue
from .errors import DeviceCapabilityError
from .kernels import KernelStack
from .plan import ON_DROPPED, Plan, check_grid_geometry, flatten_samples, plan_visibilities
from .strategies import GRIDDING_METHODS
from .strategies.base import DevicePlan

__all__ = ["Gridder", "PreparedVisibilities"]


@dataclass
class PreparedVisibilities:
    """Planned visibilities already on the device: grid them with `Gridder.execute`."""

    plan: Plan
    device_plan: DevicePlan | None


class Gridder:
    """Grid visibilities onto a uv-grid with W-projection kernels on an OpenCL device.

    Parameters
    ----------
    grid_size : even number of cells N along u and v; the centre is at N // 2.
    cell_size : image-plane pixel size in radians; the uv cell is 1 / (N * cell_size).
    kernels : the `KernelStack` to convolve with.
    method : gridding strategy, one of ``Gridder.methods``.
    device : None (``$CLGRID_DEVICE``, else a GPU, else PoCL), a name such as "pocl"
        or "nvidia", or a pyopencl Device, Context or CommandQueue.
    precision : "single" (complex64 grid) or "double" (complex128; needs fp64).
    tuning : overrides of the tuning table's parameters for this strategy.
    on_dropped : "warn", "raise" or "ignore" for visibilities off the grid or beyond
        the kernel stack (they are counted in ``last_report`` in every case).
    """

    methods = tuple(GRIDDING_METHODS)

    def __init__(self, grid_size: int, cell_size: float, kernels: KernelStack, method: str = "atomic",
                 device=None, precision: str = "single", tuning: dict | None = None,
                 on_dropped: str = "warn"):
        check_grid_geometry(grid_size, cell_size)
        if not isinstance(kernels, KernelStack):
            raise TypeError(f"kernels must be a clgrid.KernelStack, got {type(kernels).__name__}")
        if method not in GRIDDING_METHODS:
            raise ValueError(f"unknown method {method!r}; choose one of {list(GRIDDING_METHODS)}")
        if on_dropped not in ON_DROPPED:
            raise ValueError(f"on_dropped must be one of {ON_DROPPED}, got {on_dropped!r}")
        self.grid_size = int(grid_size)
        self.cell_size = float(cell_size)
        self.kernels = kernels
        self.method = method
        self.on_dropped = on_dropped
        self.queue = get_queue(device)
        self.strategy = GRIDDING_METHODS[method](self.queue, self.grid_size, kernels, precision, tuning)
        self.precision = precision
        self._check_grid_fits(1)
        self._grid_buffers: dict = {}
        self.last_report: dict | None = None

    @property
    def device(self):
        return self.queue.device

    def _grid_bytes(self, npol: int) -> int:
        return npol * self.grid_size ** 2 * np.dtype(self.strategy.complex_dtype).itemsize

    def _check_grid_fits(self, npol: int) -> None:
        facts = self.strategy.facts
        need = self._grid_bytes(npol)
        if need > facts.max_allocation or need > facts.global_memory:
            raise DeviceCapabilityError(
                f"a {npol}-polarisation {self.grid_size}^2 {self.precision} grid needs "
                f"{need / 2**30:.2f} GiB; {facts.name} allows {facts.max_allocation / 2**30:.2f} GiB "
                f"per buffer ({facts.global_memory / 2**30:.2f} GiB in all)")

    def grid_buffer(self, npol: int) -> cl.Buffer:
        """The device grid for ``npol`` polarisations, kept between calls."""
        if npol not in self._grid_buffers:
            self._grid_buffers[npol] = cl.Buffer(self.queue.context, cl.mem_flags.READ_WRITE,
                                                 self._grid_bytes(npol))
        return self._grid_buffers[npol]

    def prepare(self, uvw, vis, weights=None, flags=None, freqs=None) -> PreparedVisibilities:
        """Validate, plan and upload visibilities, ready for `execute` (any number of times)."""
        samples = flatten_samples(uvw, vis, weights, flags, freqs)
        self._check_grid_fits(samples.npol)
        plan = plan_visibilities(samples, self.grid_size, self.cell_size, self.kernels, self.on_dropped)
        device_plan = self.strategy.upload(plan, samples) if plan.num_kept else None
        return PreparedVisibilities(plan, device_plan)

    def execute(self, prepared: PreparedVisibilities) -> list:
        """Enqueue zeroing and gridding into the device grid; returns the OpenCL events."""
        npol = prepared.plan.npol
        grid_buffer = self.grid_buffer(npol)
        zero = cl.enqueue_fill_buffer(self.queue, grid_buffer, np.zeros(1, self.strategy.real_dtype),
                                      0, self._grid_bytes(npol))
        if prepared.device_plan is None:
            return [zero]
        return [zero, *self.strategy.grid(prepared.device_plan, npol, grid_buffer, wait_for=[zero])]

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
        t_end = time.perf_counter()

        report = prepared.plan.report()
        report.update(method=self.method, precision=self.precision, device=self.device.name.strip(),
                      plan_seconds=t_plan - t0, kernel_seconds=kernel_seconds(events[1:]),
                      total_seconds=t_end - t0)
        self.last_report = report
        return (out, report) if return_report else out


def kernel_seconds(events) -> float:
    """Device time of finished events, from OpenCL profiling."""
    return sum((e.profile.end - e.profile.start) * 1e-9 for e in events)
