"""Checks of what the operators return, so that nothing comes back silently wrong.

- `count_nonfinite`: inf and NaN in a device buffer, counted on the device (one read of
  the buffer, a 4-byte answer), so the check costs far less than copying the grid back.
- `check_gridded` / `check_degridded`: what `Gridder.grid` and `Degridder.degrid` call
  on their output: an overflow raises `NonFiniteResultError` naming the likely cause
  (and telling single-precision users when double is needed); an empty result (all
  flagged, dropped or of zero weight) warns with `EmptyInputWarning`.
"""

from __future__ import annotations

import warnings

import numpy as np
import pyopencl as cl

from ..device.codegen import build_program, render, kernel as codegen_kernel
from ..errors import EmptyInputWarning, NonFiniteResultError

__all__ = ["count_nonfinite", "check_gridded", "check_degridded"]

GROUPS, GROUP_SIZE = 256, 64   # enough to keep any device busy; each group reads one contiguous block


def count_nonfinite(queue: cl.CommandQueue, buffer: cl.Buffer, count: int, real_dtype, wait_for=None) -> int:
    """How many of the first ``count`` reals (float32 or float64) of ``buffer`` are inf or NaN."""
    if count == 0:
        return 0
    double = np.dtype(real_dtype) == np.float64
    program = build_program(queue.context, render("finite_check.cl", double=double))
    found = np.zeros(1, np.uint32)
    found_buffer = cl.Buffer(queue.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=found)
    kernel = codegen_kernel(program, "count_nonfinite")
    groups = min(GROUPS, -(-int(count) // GROUP_SIZE))
    block = -(-int(count) // groups)
    event = kernel(queue, (groups * GROUP_SIZE,), (GROUP_SIZE,), buffer, np.uint64(count), np.uint64(block),
                   found_buffer, wait_for=wait_for)
    cl.enqueue_copy(queue, found, found_buffer, wait_for=[event]).wait()
    return int(found[0])


def _overflow_advice(precision: str, largest: float, what: str) -> str:
    """The likely cause of inf/NaN from finite inputs, and what to do about it."""
    limit = float(np.finfo(np.float32 if precision == "single" else np.float64).max)
    if precision == "single":
        need = (f"{what} reach about {largest:.3g}, beyond single precision's {limit:.3g}: use "
                f"precision='double'" if largest > limit else
                f"single precision holds values up to {limit:.3g}: use precision='double'")
        return f"{need}, or scale the visibilities or weights down"
    return f"double precision holds values up to {limit:.3g}: scale the visibilities or weights down"


def check_gridded(operation, grid_buffer: cl.Buffer, npol: int, report: dict, bound, wait_for=None) -> None:
    """Raise if the device grid overflowed; warn if nothing (or only zero weight) was gridded.

    ``bound()`` (called only on overflow) bounds what a cell can sum to: every weighted
    visibility times the largest kernel value, added into one cell.
    """
    count = 2 * npol * operation.grid_size ** 2
    bad = count_nonfinite(operation.queue, grid_buffer, count, operation.strategy.real_dtype, wait_for)
    if bad:
        with np.errstate(over="ignore", invalid="ignore"):
            largest = bound()
        raise NonFiniteResultError(
            f"the {operation.precision}-precision grid holds {bad} inf or NaN values although every "
            f"input was finite: overflow. {_overflow_advice(operation.precision, largest, 'cell sums')}")
    norm = np.asarray(report["norm"])
    if report["gridded"] == 0:
        warnings.warn(f"no visibility was gridded ({_left_out(report)}): the grid is zero", EmptyInputWarning,
                      stacklevel=3)
    elif np.any(norm == 0):
        pols = "every polarisation" if np.all(norm == 0) else f"polarisations {np.flatnonzero(norm == 0).tolist()}"
        warnings.warn(f"the weights of {pols} are all zero (or flagged): that grid is zero and its norm 0",
                      EmptyInputWarning, stacklevel=3)


def check_degridded(operation, vis_buffer, num_values: int, report: dict, wait_for=None) -> None:
    """Raise if the degridded visibilities overflowed; warn if none was degridded."""
    bad = count_nonfinite(operation.queue, vis_buffer, 2 * num_values, operation.strategy.real_dtype, wait_for) \
        if vis_buffer is not None else 0
    if bad:
        raise NonFiniteResultError(
            f"{bad} degridded values are inf or NaN although the grid was finite: overflow. "
            f"{_overflow_advice(operation.precision, float('nan'), 'sums')}")
    if report["degridded"] == 0:
        warnings.warn(f"no visibility was degridded ({_left_out(report)}): every value is zero",
                      EmptyInputWarning, stacklevel=3)


def _left_out(report: dict) -> str:
    return (f"{report['samples']} samples: {report['flagged']} flagged, {report['off_grid']} off the grid, "
            f"{report['beyond_kernel_stack']} beyond the kernel stack")
