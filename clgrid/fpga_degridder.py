"""`FpgaDegridder`: degridding with the FPGA kernel (``degrid_fpga.cl``) until the
general ``Degridder`` exists (it is being built on another branch).

Once it lands, ``Degridder(method="fpga")`` is ``DEGRIDDING_METHODS["fpga"]``, the
`FpgaDegridding` strategy, and this module goes: the strategy already has the
interface a degridding strategy needs (``upload`` with room for the output,
``degrid`` returning events); only the tile order moves into the planning step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from .kernels import KernelStack
from .plan import Plan, check_arguments, flatten_samples, plan_visibilities
from .runtime import get_queue
from .strategies.fpga import FpgaDegridding, FpgaDevicePlan

__all__ = ["FpgaDegridder", "PreparedPositions"]


@dataclass
class PreparedPositions:
    """Planned positions on the device, with room for their visibilities: run `FpgaDegridder.execute`."""

    plan: Plan
    device_plan: FpgaDevicePlan | None
    shape: tuple            # the caller's visibility shape
    flagged: np.ndarray     # (nsample, npol) True where flagged


class FpgaDegridder:
    """Predict visibilities from a uv-grid with the single work-item FPGA kernel.

    Parameters as for `clgrid.Gridder` (``method`` is always the FPGA kernel).
    Degridding is the adjoint of gridding: ``vis = sum over the footprint of
    grid * conj(c)``, ``c`` the weight gridding would use (conjugated kernel for w > 0).
    """

    def __init__(self, grid_size: int, cell_size: float, kernels: KernelStack, device=None,
                 precision: str = "single", tuning: dict | None = None, on_dropped: str = "warn",
                 binary=None):
        check_arguments(grid_size, cell_size, kernels, on_dropped)
        self.grid_size = int(grid_size)
        self.cell_size = float(cell_size)
        self.kernels = kernels
        self.on_dropped = on_dropped
        self.queue = get_queue(device)
        self.strategy = FpgaDegridding(self.queue, self.grid_size, kernels, precision, tuning, binary)

    def check_grid(self, grid) -> np.ndarray:
        """``grid`` as an array: complex, shape (npol, N, N) with npol 1, 2 or 4."""
        grid = np.asarray(grid)
        n = self.grid_size
        if not np.iscomplexobj(grid) or grid.ndim != 3 or grid.shape[1:] != (n, n) \
                or grid.shape[0] not in (1, 2, 4):
            raise ValueError(f"grid must be complex with shape (npol, {n}, {n}), npol 1, 2 or 4; "
                             f"got {grid.dtype} {grid.shape}")
        return grid

    def prepare(self, uvw, npol: int, flags=None, freqs=None) -> PreparedPositions:
        """Validate, plan and upload the positions of ``npol``-polarisation visibilities."""
        shape = np.shape(uvw)[:-1] + ((len(freqs),) if freqs is not None else ()) + (npol,)
        # Positions only: the visibilities are the output (unit weights, zero where flagged).
        samples = flatten_samples(uvw, np.zeros(shape, np.complex128), flags=flags, freqs=freqs)
        plan = plan_visibilities(samples, self.grid_size, self.cell_size, self.kernels, self.on_dropped)
        device_plan = self.strategy.upload(plan) if plan.num_kept else None
        return PreparedPositions(plan, device_plan, shape, samples.weights == 0)

    def execute(self, prepared: PreparedPositions, grid_buffer, wait_for=None) -> list:
        """Enqueue degridding from ``grid_buffer`` into the prepared visibilities; returns the events."""
        if prepared.device_plan is None:
            return []
        return self.strategy.degrid(prepared.device_plan, prepared.plan.npol, grid_buffer, wait_for)

    def fetch(self, prepared: PreparedPositions, wait_for=None) -> np.ndarray:
        """The degridded visibilities in the caller's shape (zero where not degridded)."""
        plan = prepared.plan
        out = np.zeros(prepared.flagged.shape, self.strategy.complex_dtype)
        if prepared.device_plan is not None:
            values = np.empty((plan.num_kept, plan.npol), self.strategy.complex_dtype)
            cl.enqueue_copy(self.queue, values, prepared.device_plan.vis, wait_for=wait_for).wait()
            out[plan.sample[prepared.device_plan.order]] = values
        out[prepared.flagged] = 0
        return out.reshape(prepared.shape)

    def degrid(self, grid, uvw, flags=None, freqs=None) -> np.ndarray:
        """Degrid ``grid`` (npol, N, N), indexed [pol, v, u], at ``uvw``.

        ``uvw`` (..., 3): wavelengths, or metres with ``freqs`` (Hz).  Returns
        visibilities of shape (..., npol), or (..., nchan, npol) with freqs; zero
        where flagged or not degridded (off the grid, beyond the kernel stack).
        """
        grid = self.check_grid(grid)
        prepared = self.prepare(uvw, grid.shape[0], flags, freqs)
        ro = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        grid_buffer = cl.Buffer(self.queue.context, ro,
                                hostbuf=np.ascontiguousarray(grid, self.strategy.complex_dtype))
        return self.fetch(prepared, self.execute(prepared, grid_buffer))
