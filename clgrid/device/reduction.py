"""Sums over device arrays (counts, norms, non-finite checks) without a host pass.

A plan's footprint count, a call's norm and the count of non-finite grid cells are
sums of a map over every entry of a device array.  One small kernel per kind of sum
(``clgrid/cl_kernels/sum.cl``): fixed work-groups each add a strided share, the host adds
their partial sums in float64 or int64.  The order of additions is fixed, so a sum
is the same from run to run.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from .codegen import build_program, render, kernel as codegen_kernel

__all__ = ["DeviceSum"]

WG = 128
GROUPS = 256


class DeviceSum:
    """``sum(map(i) for i in range(n))`` on the device; ``map`` is a C expression of ``i``
    and the kernel ``arguments`` (a C parameter list), summed as ``dtype``."""

    _cache: dict = {}

    @classmethod
    def of(cls, context, dtype, map_expr: str, arguments: str, preamble: str = "") -> "DeviceSum":
        """The sum for these arguments, built once per context."""
        key = (context.int_ptr, np.dtype(dtype).str, map_expr, arguments, preamble)
        if key not in cls._cache:
            cls._cache[key] = cls(context, dtype, map_expr, arguments, preamble)
        return cls._cache[key]

    def __init__(self, context, dtype, map_expr: str, arguments: str, preamble: str = ""):
        self.dtype = np.dtype(dtype)
        sum_t = {"float64": "double", "float32": "float", "int64": "long", "int32": "int"}[self.dtype.name]
        if "double" in (sum_t + arguments + preamble):
            preamble = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" + preamble
        source = render("sum.cl", wg=WG, sum_t=sum_t, map=map_expr, arguments=arguments, preamble=preamble)
        self.program = build_program(context, source)
        self.context = context

    def __call__(self, queue, n: int, *args, wait_for=None) -> "PendingSum":
        """Enqueue the sum over ``n`` entries; ``.get()`` on the result waits and adds up."""
        groups = max(1, min(GROUPS, -(-n // WG)))
        partials = np.empty(groups, self.dtype)
        buffer = cl.Buffer(self.context, cl.mem_flags.WRITE_ONLY, partials.nbytes)
        kernel = codegen_kernel(self.program, "partial_sums")   # per thread: calls may overlap in threads
        event = kernel(queue, (groups * WG,), (WG,), *args, np.int32(n), buffer, wait_for=wait_for)
        copy = cl.enqueue_copy(queue, partials, buffer, wait_for=[event], is_blocking=False)
        return PendingSum(partials, copy)


class PendingSum:
    """A sum enqueued on the device; ``get`` waits for it."""

    def __init__(self, partials: np.ndarray, event):
        self.partials, self.event = partials, event

    def get(self):
        self.event.wait()
        wide = np.float64 if self.partials.dtype.kind == "f" else np.int64
        return self.partials.sum(dtype=wide)
