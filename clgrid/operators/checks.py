"""Checks every operator shares, so that nothing comes back silently wrong: of the
caller's arrays on the way in and out, and of the results.

- `precision_of`: the precision ("single" or "double") an argument's dtype sets (either
  byte order: uploads put it in the machine's), else a TypeError naming the argument.
- `check_output`: an ``out`` (``dirty``, ``vis``) array the caller gives for a result,
  checked before any device work: its type, dtype, shape, writability and, for a device
  array, context and contiguity, with an error naming it.  Nothing is cast: a result is
  never truncated to integers, stripped of its imaginary part or written past an end.
- `check_apart`: an output that shares memory with an input of the same call (``wgt=vis.real``
  with ``vis=``) refused, naming both: a call may write its output before it has read all
  of its inputs (a device list adds its devices' shares into the output one after another,
  each reading the weights again).
- `count_nonfinite`: inf and NaN in a device buffer, counted on the device (one read of
  the buffer, a 4-byte answer), so the check costs far less than copying the grid back.
- `check_finite_result`: the one overflow check of every result (grids, visibilities,
  images): inf or NaN made from finite inputs raises `NonFiniteResultError` naming the
  likely cause (and telling single-precision users when double is needed).
- `check_gridded` / `check_degridded`: what `Gridder.grid` and `Degridder.degrid` call
  on their output: overflow as above; an empty result (all flagged, dropped or of zero
  weight) warns with `EmptyInputWarning`.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..call_warnings import warn
from ..device.codegen import build_program, render, kernel as codegen_kernel
from ..errors import EmptyInputWarning, NonFiniteResultError

__all__ = ["precision_of",  "check_output", "check_apart", "writes_directly",
           "count_nonfinite", "check_finite_result", "check_gridded", "check_degridded"]

GROUPS, GROUP_SIZE = 256, 64   # enough to keep any device busy; each group reads one contiguous block


def precision_of(dtype, name: str, kinds: dict) -> str:
    """The key of ``kinds`` ({precision: dtype}) whose dtype ``dtype`` is, in either byte
    order (``vis`` complex64 -> "single"), else a TypeError naming ``name``."""
    dtype = np.dtype(dtype)
    for precision, allowed in kinds.items():
        if dtype.newbyteorder("=") == np.dtype(allowed):
            return precision
    raise TypeError(f"{name} must be {' or '.join(str(np.dtype(d)) for d in kinds.values())}, got {dtype}")


def check_output(out, name: str, shape: tuple, dtype, context=None) -> np.dtype:
    """Refuse an array given for a result (``out=``, ``dirty=``, ``vis=``) that the result
    does not fit exactly, before any work is done; returns its dtype in native byte order.

    ``dtype`` is the result's dtype, or a tuple of those the operator can write.  A numpy
    array must have ``shape`` and one of them (either byte order; any strides: it is
    written through a copy where the device cannot write it directly, `writes_directly`)
    and be writeable.  Where ``context`` is given, a `pyopencl.array.Array` on that
    context is taken too; it must also be C-contiguous, since the device writes it as
    one block.  Nothing is cast (ducc0 refuses the same): a wrong dtype or type is a
    TypeError, anything else a ValueError, each naming ``name``.
    """
    dtypes = tuple(np.dtype(d) for d in (dtype if isinstance(dtype, tuple) else (dtype,)))
    shape = tuple(int(n) for n in shape)
    want = f"a {' or '.join(map(str, dtypes))} array of shape {shape}"
    if context is not None and isinstance(out, cla.Array):
        if out.context.int_ptr != context.int_ptr:
            raise ValueError(f"{name} is a device array of another OpenCL context than the operator's")
        if out.dtype not in dtypes:
            raise TypeError(f"{name} must be {want}, got dtype {out.dtype}: results are not cast")
        if tuple(out.shape) != shape:
            raise ValueError(f"{name} must be {want}, got shape {tuple(out.shape)}")
        if not out.flags.c_contiguous:
            raise ValueError(f"{name} must be a C-contiguous device array (the device writes it as one block)")
        return out.dtype
    if not isinstance(out, np.ndarray):
        kinds = "a numpy array" + (" or a pyopencl.array.Array" if context is not None else "")
        raise TypeError(f"{name} must be {kinds} ({want}), got {type(out).__name__}")
    found = out.dtype.newbyteorder("=")
    if found not in dtypes:
        raise TypeError(f"{name} must be {want}, got dtype {out.dtype}: results are not cast")
    if out.shape != shape:
        raise ValueError(f"{name} must be {want}, got shape {out.shape}")
    if not out.flags.writeable:
        raise ValueError(f"{name} is read-only")
    return found


# candidate solutions numpy may weigh to tell whether two arrays share memory exactly
# (`numpy.shares_memory`'s ``max_work``; beyond it, "may share" refuses)
SHARING_WORK = 1 << 16
_TOO_HARD = getattr(np, "exceptions", np).TooHardError          # (numpy.exceptions from numpy 1.25 on)


def _device_bytes(a: cla.Array) -> tuple:
    """(the root buffer's address, first byte, byte after the last) of a device array's
    elements: its offset within its buffer, and that buffer's within its parent where it
    is a sub-buffer."""
    buffer, start = a.base_data, int(a.offset)
    try:
        parent = buffer.get_info(cl.mem_info.ASSOCIATED_MEMOBJECT)
        if parent is not None:
            start += int(buffer.get_info(cl.mem_info.OFFSET))
            buffer = parent
    except (cl.Error, AttributeError):
        pass
    low = sum((n - 1) * s for n, s in zip(a.shape, a.strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(a.shape, a.strides) if s > 0) + a.dtype.itemsize
    return getattr(buffer, "int_ptr", id(buffer)), start + low, start + high


def _device_overlap(a: cla.Array, b: cla.Array) -> bool:
    (root_a, lo_a, hi_a), (root_b, lo_b, hi_b) = _device_bytes(a), _device_bytes(b)
    return root_a == root_b and lo_a < hi_b and lo_b < hi_a


def check_apart(out, name: str, inputs: dict) -> None:
    """Refuse an output ``out`` (a numpy array the call writes: ``out=``, ``vis=``,
    ``dirty=``) that shares memory with one of ``inputs`` (argument name -> the array as
    the call reads it, or None; anything but a numpy array is left alone), with a
    ValueError naming both: the call may write the output before it has read every
    input (a device list's devices add their shares into it one after another, each
    uploading the weights again; rows are written part by part), so an input that is a
    view of it (``wgt=vis.real``) would be read overwritten.  One rule for every output,
    written before or after the inputs are read.

    `numpy.shares_memory` (exact), not `numpy.may_share_memory` (whether the memory
    bounds overlap): interleaved views of one block (every other row of it as ``out``,
    the others as ``wgt``) share bounds, not memory, and are right.  Arrays whose bounds
    do not overlap cost nothing; for views of one block numpy solves a small integer
    problem in the arrays' dimensions and strides, not their sizes.  Where it would
    take more than `SHARING_WORK` steps the arrays are refused as possibly sharing.

    A device ``out`` (`pyopencl.array.Array`) is refused where a device input lies in the
    same buffer (or sub-buffers of one) with overlapping bytes, from each array's first
    to its last element: views interleaved within one buffer are refused as possibly
    sharing."""
    if isinstance(out, cla.Array):
        for other, given in inputs.items():
            if isinstance(given, cla.Array) and given.size and out.size and _device_overlap(out, given):
                raise ValueError(f"{name} may share memory with {other} (the same device buffer, overlapping "
                                 f"bytes): an output must not overlap an input of the same call; pass a copy of "
                                 f"{other}, or another {name}")
        return
    if not isinstance(out, np.ndarray):
        return
    for other, given in inputs.items():
        if not isinstance(given, np.ndarray) or given.size == 0 or out.size == 0:
            continue
        try:
            shared = np.shares_memory(out, given, max_work=SHARING_WORK)
            how = "shares memory with"
        except _TOO_HARD:
            shared, how = True, "may share memory with (numpy could not tell at once)"
        if shared:
            raise ValueError(f"{name} {how} {other}: an output must not overlap an input of the same call (it "
                             f"may be written before {other} is read); pass a copy of {other}, or another {name}")


def writes_directly(out: np.ndarray) -> bool:
    """Whether a device result can be copied into the checked host array ``out`` as it is
    (C-contiguous, native byte order), rather than through a copy."""
    return out.flags.c_contiguous and out.dtype.isnative


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


def _overflow_advice(precision: str, largest: float, quantity: str, double: str, inputs: str) -> str:
    """The likely cause of inf/NaN from finite inputs, and what to do about it."""
    limit = float(np.finfo(np.float32 if precision == "single" else np.float64).max)
    if precision == "single":
        need = (f"{quantity} reach about {largest:.3g}, beyond single precision's {limit:.3g}: use {double}"
                if largest > limit else f"single precision holds values up to {limit:.3g}: use {double}")
        return f"{need}, or scale {inputs} down"
    return f"double precision holds values up to {limit:.3g}: scale {inputs} down"


def check_finite_result(bad: int, what: str, precision: str, largest=None, quantity: str = "sums",
                        double: str = "precision='double'", inputs: str = "the visibilities or weights") -> None:
    """Raise `NonFiniteResultError` where ``bad`` (a count of inf and NaN values in the
    result ``what``, made from finite inputs) is not 0: the one overflow check of every
    operator.  ``largest()`` (called only then) bounds the ``quantity`` that overflowed;
    ``double`` says how the caller asks for double precision, ``inputs`` what to scale."""
    if not bad:
        return
    magnitude = float("nan")
    if largest is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            magnitude = float(largest())
    raise NonFiniteResultError(f"{bad} values of {what} are inf or NaN although every input was finite: "
                               f"overflow. {_overflow_advice(precision, magnitude, quantity, double, inputs)}")


def check_gridded(operation, grid_buffer: cl.Buffer, npol: int, report: dict, bound, wait_for=None) -> None:
    """Raise if the device grid overflowed; warn if nothing (or only zero weight) was gridded.

    ``bound()`` (called only on overflow) bounds what a cell can sum to: every weighted
    visibility times the largest kernel value, added into one cell.
    """
    count = 2 * npol * operation.grid_size ** 2
    bad = count_nonfinite(operation.queue, grid_buffer, count, operation.strategy.real_dtype, wait_for)
    check_finite_result(bad, f"the {operation.precision}-precision grid", operation.precision, bound, "cell sums")
    norm = np.asarray(report["norm"])
    if report["gridded"] == 0:
        warn(f"no visibility was gridded ({_left_out(report)}): the grid is zero", EmptyInputWarning,
             stacklevel=None)
    elif np.any(norm == 0):
        pols = "every polarisation" if np.all(norm == 0) else f"polarisations {np.flatnonzero(norm == 0).tolist()}"
        warn(f"the weights of {pols} are all zero (or flagged): that grid is zero and its norm 0",
             EmptyInputWarning, stacklevel=None)


def check_degridded(operation, vis_buffer, num_values: int, report: dict, wait_for=None) -> None:
    """Raise if the degridded visibilities overflowed; warn if none was degridded."""
    bad = count_nonfinite(operation.queue, vis_buffer, 2 * num_values, operation.strategy.real_dtype, wait_for) \
        if vis_buffer is not None else 0
    check_finite_result(bad, "the degridded visibilities", operation.precision)
    if report["degridded"] == 0:
        warn(f"no visibility was degridded ({_left_out(report)}): every value is zero",
             EmptyInputWarning, stacklevel=None)


def _left_out(report: dict) -> str:
    return (f"{report['samples']} samples: {report['flagged']} flagged, {report['off_grid']} off the grid, "
            f"{report['beyond_kernel_stack']} beyond the kernel stack")
