"""Values per call: visibilities and weights checked, put on the device, and gathered
into (or scattered back from) a strategy's order of the plan.

The plan holds positions only (`clgrid.planning.plan`), so every call brings its
values: ``vis`` of shape ``plan.sample_shape + (npol,)``, complex64 or complex128,
as numpy arrays or `pyopencl.array.Array` on the plan's context; ``weights`` either
one per sample (ducc0's ``wgt``: every polarisation of a (row, channel) sample) or
one per visibility.  The gather (``clgrid/cl_kernels/values.cl``) multiplies by the weights,
zeroes flagged visibilities and counts what should not be there (NaN or inf in
unflagged values, negative or non-finite weights), so the host never walks the data.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.codegen import build_program, render, kernel as codegen_kernel
from ..device.reduction import DeviceSum
from ..device.transfer import to_device_array

__all__ = ["check_vis", "check_weights", "to_device", "ValueKernels"]


def _shape(a) -> tuple:
    return tuple(a.shape) if isinstance(a, cla.Array) else np.shape(a)


def check_vis(vis, sample_shape: tuple, name: str = "vis") -> int:
    """npol of ``vis`` (shape ``sample_shape + (npol,)``, complex), or a clear error."""
    dtype = vis.dtype if isinstance(vis, cla.Array) else np.asarray(vis).dtype
    if dtype.newbyteorder("=") not in (np.complex64, np.complex128):     # either byte order: uploads convert
        raise TypeError(f"{name} must be complex64 or complex128, got dtype {dtype}")
    shape = _shape(vis)
    if len(shape) != len(sample_shape) + 1 or shape[:-1] != sample_shape:
        raise ValueError(f"{name} must have shape {sample_shape + ('npol',)} to match the plan, got {shape}")
    if shape[-1] not in (1, 2, 4):
        raise ValueError(f"{name} must have 1, 2 or 4 polarisations on its last axis, got {shape[-1]}")
    return shape[-1]


def check_weights(weights, sample_shape: tuple, npol: int):
    """``(weights, mode)``: mode "none", "sample" (one per sample, as ducc0's ``wgt``) or
    "pol" (one per visibility); host weights are broadcast and made contiguous."""
    if weights is None:
        return None, "none"
    per_vis = sample_shape + (npol,)
    if isinstance(weights, cla.Array):
        if weights.dtype not in (np.float32, np.float64) or not weights.flags.c_contiguous:
            raise TypeError(f"device weights must be C-contiguous float32 or float64, got {weights.dtype}")
        for mode, shape in (("sample", sample_shape), ("pol", per_vis)):
            if weights.shape == shape:
                return weights, mode
        raise ValueError(f"weights of shape {weights.shape} match neither the samples {sample_shape} "
                         f"nor the visibilities {per_vis}")
    weights = np.asarray(weights)
    if weights.dtype == bool or not (np.issubdtype(weights.dtype, np.floating)
                                     or np.issubdtype(weights.dtype, np.integer)):
        raise TypeError(f"weights must be a real numeric array, got dtype {weights.dtype}")
    if weights.dtype not in (np.float32, np.float64):
        weights = weights.astype(np.float64)
    mode, shape = ("pol", per_vis) if weights.ndim == len(per_vis) else ("sample", sample_shape)
    try:
        weights = np.broadcast_to(weights, shape)
    except ValueError:
        raise ValueError(f"weights of shape {np.shape(weights)} broadcast neither to the samples "
                         f"{sample_shape} nor to the visibilities {per_vis}") from None
    return np.ascontiguousarray(weights), mode


def to_device(queue, a, name: str, staging=None):
    """``a`` as a device array on ``queue``'s context (uploaded, through ``staging`` where
    given, if it is a host array)."""
    if isinstance(a, cla.Array):
        if a.context.int_ptr != queue.context.int_ptr:
            raise ValueError(f"{name} is a device array of another OpenCL context than the operator's")
        if not a.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous")
        return a
    return to_device_array(queue, a, staging)


class ValueKernels:
    """The gather, scatter and norm kernels for one kind of call, built once per context."""

    _cache: dict = {}

    def __init__(self, context, double: bool, npol: int, vis_dtype, weights_mode: str, weights_dtype,
                 flags: bool, sum_dtype):
        params = dict(double=double, npol=npol, vis_double=np.dtype(vis_dtype) == np.complex128,
                      weights=weights_mode, weights_double=np.dtype(weights_dtype) == np.float64, flags=flags)
        self.program = build_program(context, render("values.cl", **params))
        sum_type = "double" if np.dtype(sum_dtype) == np.float64 else "float"
        weight_type = "double" if params["weights_double"] else "float"
        weight = {"none": "1", "sample": "weights[s]", "pol": f"weights[s * {npol} + p]"}[weights_mode]
        flagged = f"flags[s * {npol} + p] ? 0 : " if flags else ""
        self.norm = DeviceSum.of(
            context, sum_dtype, "norm_term(i, weight_sum, sample, weights, flags, p)",
            f"__global const {sum_type} *weight_sum, __global const int *sample, "
            f"__global const {weight_type} *weights, __global const uchar *flags, const int p",
            f"{sum_type} norm_term(int i, __global const {sum_type} *weight_sum, __global const int *sample, "
            f"__global const {weight_type} *weights, __global const uchar *flags, const int p)\n"
            f"{{ const int s = sample[i]; return weight_sum[i] * ({flagged}({sum_type})({weight})); }}\n")
        vis_type = "double2" if params["vis_double"] else "float2"
        self.magnitude = DeviceSum.of(   # sum |Re| + |Im| of weighted values, in the caller's precision
            context, sum_dtype, "magnitude(i, vis, sample, weights, flags, p)",
            f"__global const {vis_type} *vis, __global const int *sample, "
            f"__global const {weight_type} *weights, __global const uchar *flags, const int p",
            f"{sum_type} magnitude(int i, __global const {vis_type} *vis, __global const int *sample, "
            f"__global const {weight_type} *weights, __global const uchar *flags, const int p)\n"
            f"{{ const int s = sample[i]; const {vis_type} v = vis[s * {npol} + p];\n"
            f"  const {sum_type} w = {flagged}({sum_type})({weight});\n"
            f"  return w == 0 ? 0 : fabs(({sum_type})v.x * w) + fabs(({sum_type})v.y * w); }}\n")

    # Kernel objects hold their arguments, and operators on other threads share this
    # program: each thread gets its own (codegen.kernel).
    @property
    def gather(self) -> cl.Kernel:
        return codegen_kernel(self.program, "gather_weighted")

    @property
    def scatter(self) -> cl.Kernel:
        return codegen_kernel(self.program, "scatter")

    @classmethod
    def of(cls, context, *key) -> "ValueKernels":
        full = (context.int_ptr,) + tuple(str(k) for k in key)
        if full not in cls._cache:
            cls._cache[full] = cls(context, *key)
        return cls._cache[full]
