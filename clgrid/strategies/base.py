"""What every strategy shares: precision, device facts, the kernel stack on the device."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyopencl as cl

from ..codegen import build_program, render
from ..runtime import device_facts
from ..errors import DeviceCapabilityError
from ..kernels import KernelStack
from ..plan import plan_visibilities
from ..tuning import resolve_tuning

PRECISIONS = {"single": (np.float32, np.complex64), "double": (np.float64, np.complex128)}


def read_only_buffer(context, array: np.ndarray) -> cl.Buffer:
    """A device copy of ``array`` that kernels only read."""
    return cl.Buffer(context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                     hostbuf=np.ascontiguousarray(array))


def check_precision(precision: str, facts) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    if precision == "double" and not (facts.fp64 and facts.int64_atomics):
        raise DeviceCapabilityError(
            f"precision='double' needs cl_khr_fp64 and cl_khr_int64_base_atomics; "
            f"{facts.name} ({facts.platform}) lacks them")


@dataclass
class DevicePlan:
    """A plan's per-visibility arrays on the device."""

    packed: cl.Buffer
    vis: cl.Buffer
    num_vis: int


@dataclass
class DeviceKernelStack:
    """`KernelStack.compact()` uploaded in one precision."""

    values: cl.Buffer
    starts: cl.Buffer
    sides: cl.Buffer
    supports: cl.Buffer

    @classmethod
    def upload(cls, context, kernels: KernelStack, complex_dtype) -> "DeviceKernelStack":
        values, starts, sides = kernels.compact()
        return cls(read_only_buffer(context, values.astype(complex_dtype)),
                   read_only_buffer(context, starts), read_only_buffer(context, sides),
                   read_only_buffer(context, kernels.supports.astype(np.int32)))


class Strategy:
    """Base of all strategies: resolves tuning and renders/builds the template once."""

    name = ""
    template = ""

    def __init__(self, queue, grid_size: int, kernels: KernelStack, precision: str, tuning=None):
        self.queue = queue
        self.facts = device_facts(queue.device)
        check_precision(precision, self.facts)
        self.precision = precision
        self.real_dtype, self.complex_dtype = PRECISIONS[precision]
        self.grid_size = grid_size
        self.kernels = kernels
        self.tuning = resolve_tuning(self.name, tuning, queue.device)
        self._kernels = {}

    @cached_property
    def device_kernels(self) -> DeviceKernelStack:
        """The compacted stack on the device, uploaded when a strategy first reads it."""
        return DeviceKernelStack.upload(self.queue.context, self.kernels, self.complex_dtype)

    def plan(self, samples, cell_size: float, on_dropped: str):
        """Plan ``samples`` for this strategy (strategies may check or transform them first)."""
        return plan_visibilities(samples, self.grid_size, cell_size, self.kernels, on_dropped)

    def upload(self, plan, samples) -> DevicePlan:
        """Put a plan's visibilities on the device (strategies may add arrays of their own)."""
        vis = samples.vis[plan.sample].astype(self.complex_dtype)
        return DevicePlan(read_only_buffer(self.queue.context, plan.packed()),
                          read_only_buffer(self.queue.context, vis), plan.num_kept)

    def template_params(self, npol: int) -> dict:
        return dict(double=self.precision == "double", atomic="cas", npol=npol,
                    oversample=self.kernels.oversample, grid_size=self.grid_size, **self.tuning)

    def kernel(self, name: str, npol: int) -> cl.Kernel:
        """OpenCL kernel ``name`` of the strategy's program for ``npol`` polarisations."""
        key = (name, npol)
        if key not in self._kernels:
            source = render(self.template, **self.template_params(npol))
            self._kernels[key] = cl.Kernel(build_program(self.queue.context, source), name)
        return self._kernels[key]
