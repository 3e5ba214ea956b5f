"""Deterministic gridding (``Gridder(..., deterministic=True)``): the same bits every run.

Float atomics add in whatever order the device runs them, and float addition is not
associative, so the atomic strategies' grids differ from run to run in the last bits.
Here the strategies accumulate instead into a 64-bit fixed-point grid (``grid_real_t``
and ``atomic_add_real`` in ``clgrid/cl_kernels/common.cl``): every value a kernel adds is
rounded to an integer number of units ``2^-k`` and added with an integer atomic, which
is associative.  A conversion kernel (``fixed_point.cl``) then writes the float grid.

The scale: the weighted visibilities are multiplied on the device by ``2^k`` (a power of
two, so exactly, in the same float rounding as without this mode) with ``k`` the largest
for which the bound ``B = sum |Re v| + |Im v| over the weighted visibilities, times the
largest |Re| or |Im| of a kernel sample`` stays below ``2^62``: no cell, and no partial
sum a strategy keeps in registers before adding it, can then leave the 64 bits.

Precision: each addition into a cell is rounded to a multiple of ``2^-k <= B 2^-61``,
so a cell's error is at most half that per addition, on top of the float product's own
rounding; with B up to 1e9 times a cell's magnitude this is below float32's own
rounding (6e-8 relative).  In double precision the fixed point is the coarser of the
two (about 4e-19 of B per addition).  Needs ``cl_khr_int64_base_atomics``; costs a
fixed-point grid (16 bytes a complex cell) beside the float grid and the conversion
pass (docs/benchmarks/reliability.md).  ``tiled`` keeps its tile sums in fixed point as well (twice the
local memory in single precision), because its device sort leaves the entries of a
tile in an order that changes from run to run.  Strategies without atomics
(``fpga``) are deterministic already and run unchanged.
"""

from __future__ import annotations

import math

import numpy as np
import pyopencl as cl

from ..device.codegen import build_program, render, kernel as codegen_kernel
from ..device.reduction import DeviceSum
from ..errors import DeviceCapabilityError
from ..device.runtime import fill_zeros

__all__ = ["FixedPointGrid", "scale_exponent"]

HEADROOM_BITS = 62          # |sums| < 2^62 < 2^63: a partial sum rounded up still fits
WORK_ITEMS = 1 << 14


def scale_exponent(value_sum: float, kernels) -> int:
    """The ``k`` of the fixed-point units ``2^-k`` for visibilities whose |Re| + |Im| add up
    to ``value_sum`` (module docstring)."""
    kmax = kernels.peak
    with np.errstate(over="ignore", invalid="ignore"):
        bound = float(value_sum) * kmax
    if not np.isfinite(bound):
        return 0        # overflow already in float64; the output check names it
    if bound == 0:
        return 0
    return int(np.clip(math.floor(HEADROOM_BITS - math.log2(bound)) - 1, -1000, 1000))


class FixedPointGrid:
    """The fixed-point accumulation of one `Gridder` (made by ``Gridder(deterministic=True)``)."""

    def __init__(self, gridder):
        strategy = gridder.strategy
        if not strategy.facts.int64_atomics:
            raise DeviceCapabilityError(f"deterministic=True needs cl_khr_int64_base_atomics; "
                                        f"{strategy.facts.name} lacks it")
        if strategy.tuning.get("flush", "atomic") != "atomic":
            raise ValueError(f"deterministic=True needs tuning flush='atomic', got {strategy.tuning['flush']!r}")
        strategy.deterministic = True
        self.gridder = gridder
        self._buffers: dict = {}

    def scale(self, values: cl.Buffer, count: int) -> int:
        """Put ``count`` weighted complex visibilities on the device into fixed-point units, in
        place; returns the exponent used."""
        queue = self.gridder.queue
        real = "double" if self.gridder.precision == "double" else "float"
        total = DeviceSum.of(queue.context, np.float64, "fabs(v[i].x) + fabs(v[i].y)",
                             f"__global const {real}2 *v")(queue, count, values).get()
        exponent = scale_exponent(total, self.gridder.kernels)
        program = build_program(queue.context, render("fixed_point.cl", double=real == "double"))
        codegen_kernel(program, "scale_by_power_of_two")(queue, (min(WORK_ITEMS, 2 * count),), None, values,
                                                    np.uint64(2 * count), np.int32(exponent))
        return exponent

    def accumulator(self, npol: int) -> cl.Buffer:
        """The fixed-point grid for ``npol`` polarisations: two longs a cell, kept between calls."""
        if npol not in self._buffers:
            self._buffers[npol] = cl.Buffer(self.gridder.queue.context, cl.mem_flags.READ_WRITE,
                                            self._count(npol) * 8)
        return self._buffers[npol]

    def _count(self, npol: int) -> int:
        return 2 * npol * self.gridder.grid_size ** 2

    def execute(self, prepared, grid_buffer: cl.Buffer, accumulate: bool = False, wait_for=None) -> list:
        """Zero the fixed-point grid, let the strategy grid into it, convert into ``grid_buffer``
        (or add to it, with ``accumulate``: streamed chunks, each with its own scale, added in
        their fixed order); returns the events, the zeroing first (as `Gridder.execute`)."""
        queue, npol = self.gridder.queue, prepared.npol
        fixed = self.accumulator(npol)
        events = [fill_zeros(queue, fixed, self._count(npol) * 8, np.int64, wait_for)]
        if prepared.device_plan is not None:
            events += (prepared.strategy or self.gridder.strategy).grid(prepared.device_plan, npol, fixed,
                                                                        wait_for=events[-1:])
        real = self.gridder.strategy.real_dtype
        program = build_program(queue.context, render("fixed_point.cl", double=real == np.float64))
        count = self._count(npol)
        events.append(codegen_kernel(program, "fixed_to_real")(
            queue, (min(WORK_ITEMS, count),), None, fixed, grid_buffer, np.uint64(count),
            np.int32(prepared.value_exponent), np.int32(accumulate), wait_for=events[-1:]))
        return events
