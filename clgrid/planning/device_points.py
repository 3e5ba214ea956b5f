"""Points already on the device: uvw given as a `pyopencl.array.Array`.

cuFINUFFT's ``setpts`` takes device pointers; so do clgrid's planning operators
(`clgrid.WGridder`, `clgrid.Gridder.plan`, `clgrid.Degridder`): a float64 device array of
uvw on the operator's OpenCL context is planned where it is, without a copy through the
host.  `check_device_uvw` refuses, naming the argument, an array the planner cannot
read as it is (another context, another dtype or shape, not C-contiguous);
`abs_w_range` is `clgrid.imaging.geometry.abs_w_range` over device uvw (the same
float64 values: the geometry chosen from device uvw is the host's).
"""

from __future__ import annotations

import math

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.codegen import build_program, kernel as codegen_kernel, render

__all__ = ["is_device_array", "check_device_uvw", "device_rows", "abs_w_range"]

WG = 256
GROUPS = 128


def is_device_array(a) -> bool:
    """Whether ``a`` is a pyopencl device array."""
    return isinstance(a, cla.Array)


def check_device_uvw(uvw: cla.Array, context: cl.Context | None, name: str = "uvw", rows: bool = False) -> cla.Array:
    """``uvw`` itself if the planner can read it where it is: float64, shape ``(..., 3)``
    (``(nrow, 3)`` with ``rows``), C-contiguous, on ``context`` (None: any); otherwise a
    ValueError (TypeError for the dtype) naming ``name`` and what to change."""
    if uvw.dtype != np.float64:
        raise TypeError(f"{name} on the device must be float64 (the planning is float64), got {uvw.dtype}: "
                        f"convert it on the device (uvw.astype(numpy.float64)) or pass a host array")
    shape = tuple(uvw.shape)
    if (rows and len(shape) != 2) or len(shape) < 2 or shape[-1] != 3:
        raise ValueError(f"{name} on the device must have shape {'(nrow, 3)' if rows else '(..., 3)'}, got {shape}")
    if not uvw.flags.c_contiguous:
        raise ValueError(f"{name} on the device must be C-contiguous (rows of u, v, w), got strides {uvw.strides}: "
                         f"copy it first (uvw.copy())")
    if context is not None and uvw.context.int_ptr != context.int_ptr:
        raise ValueError(f"{name} is a device array of another OpenCL context than the operator's: pass device= "
                         f"its queue (uvw.queue), or a host array")
    return uvw


def device_rows(uvw: cla.Array, rows: slice | None = None) -> cla.Array:
    """``uvw[rows]`` as an array at offset 0 of its own buffer (kernels take its ``data``):
    the array itself where it already is, else a device copy of the rows."""
    part = uvw if rows is None else uvw[rows]
    if part.offset or part.base_data is None:
        part = part.copy()
    return part


def _program(context):
    return build_program(context, render("w_range.cl", wg=WG))


def abs_w_range(queue, uvw: cla.Array, scale: np.ndarray, keep) -> tuple:
    """Smallest and largest |w| in wavelengths over the kept samples of device ``uvw``
    ((nrow, 3) metres; ``scale`` (nchan,) = freq / c; ``keep`` (nrow, nchan) bool or None),
    as `clgrid.imaging.geometry.abs_w_range` gives it for the same values on the host."""
    nrow, nchan = uvw.shape[0], scale.size
    uvw = device_rows(uvw)
    scale = np.asarray(scale, np.float64)
    scale_d = cla.to_device(queue, scale)
    keep_d = None if keep is None else cla.to_device(queue, np.ascontiguousarray(keep, np.uint8).reshape(-1))
    n = nrow if keep is None else nrow * nchan
    groups = max(1, min(GROUPS, -(-n // WG)))
    partials = np.empty((groups, 2), np.float64)
    out = cl.Buffer(queue.context, cl.mem_flags.WRITE_ONLY, partials.nbytes)
    codegen_kernel(_program(queue.context), "abs_w_extremes")(
        queue, (groups * WG,), (WG,), uvw.data, scale_d.data, None if keep_d is None else keep_d.data,
        np.int32(nchan), np.int32(n), out)
    cl.enqueue_copy(queue, partials, out)
    lo, hi = float(partials[:, 0].min()), float(partials[:, 1].max())
    if keep is None:
        lo, hi = lo * float(scale.min()), hi * float(scale.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError("uvw has NaN or infinite entries (in unmasked samples)")
    return lo, hi
