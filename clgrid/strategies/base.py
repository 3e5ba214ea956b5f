"""What every strategy shares: precision, device facts, the kernel stack on the device."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from ..codegen import build_program, render
from ..runtime import device_facts
from ..errors import DeviceCapabilityError
from ..kernels import KernelStack
from ..plan import Plan, Samples
from ..tuning import resolve_tuning

PRECISIONS = {"single": (np.float32, np.complex64), "double": (np.float64, np.complex128)}


def check_precision(precision: str, facts) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    if precision == "double" and not (facts.fp64 and facts.int64_atomics):
        raise DeviceCapabilityError(
            f"precision='double' needs cl_khr_fp64 and cl_khr_int64_base_atomics; "
            f"{facts.name} ({facts.platform}) lacks them")


@dataclass
class DevicePlan:
    """A plan's per-visibility arrays on the device: ``vis`` is the input when gridding and
    the output (num_vis, npol) when degridding, in the plan's order."""

    packed: cl.Buffer
    vis: cl.Buffer
    num_vis: int


@dataclass
class DeviceKernelStack:
    """A `KernelStack` on the device in one precision and one layout: ``"compact"``
    quarters (`KernelStack.compact`) or tables ``"by_offset"`` (`KernelStack.by_offset`,
    which has no ``sides``)."""

    values: cl.Buffer
    starts: cl.Buffer
    sides: cl.Buffer | None
    supports: cl.Buffer

    @classmethod
    def upload(cls, context, kernels: KernelStack, complex_dtype, layout: str = "compact"
               ) -> "DeviceKernelStack":
        ro = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        if layout == "compact":
            values, starts, sides = kernels.compact()
            sides = cl.Buffer(context, ro, hostbuf=sides)
        else:
            (values, starts), sides = kernels.by_offset(), None
        return cls(cl.Buffer(context, ro, hostbuf=values.astype(complex_dtype)),
                   cl.Buffer(context, ro, hostbuf=starts), sides,
                   cl.Buffer(context, ro, hostbuf=kernels.supports.astype(np.int32)))


class Strategy:
    """Base of all strategies: resolves tuning and renders/builds the template once."""

    name = ""
    template = ""
    kernel_layout = "compact"  # how the kernel stack lies on the device (DeviceKernelStack)
    counts: tuple = ()         # tuning parameters that count things, so must be >= 1

    def __init__(self, queue, grid_size: int, kernels: KernelStack, precision: str, tuning=None):
        self.queue = queue
        self.facts = device_facts(queue.device)
        check_precision(precision, self.facts)
        self.precision = precision
        self.real_dtype, self.complex_dtype = PRECISIONS[precision]
        self.grid_size = grid_size
        self.kernels = kernels
        self.tuning = resolve_tuning(self.name, tuning, queue.device)
        for name in self.counts:
            if self.tuning[name] < 1:
                raise ValueError(f"tuning parameter {name!r} of {self.name!r} must be >= 1, "
                                 f"got {self.tuning[name]}")
        self.device_kernels = DeviceKernelStack.upload(queue.context, kernels, self.complex_dtype,
                                                       self.kernel_layout)
        self._kernels = {}

    def arrange(self, plan: Plan, samples: Samples) -> Plan:
        """The strategy's own planning step, such as an order of the visibilities (none here)."""
        return plan

    def upload(self, plan: Plan, samples: Samples) -> DevicePlan:
        """Put a plan on the device with the weighted visibilities when gridding, or room for
        them when degridding (``samples.vis`` is None); strategies may add arrays of their own."""
        context = self.queue.context
        ro = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        if samples.vis is None:
            vis = cl.Buffer(context, cl.mem_flags.READ_WRITE,
                            plan.num_kept * plan.npol * np.dtype(self.complex_dtype).itemsize)
        else:
            vis = cl.Buffer(context, ro, hostbuf=np.ascontiguousarray(samples.vis[plan.sample],
                                                                       self.complex_dtype))
        return DevicePlan(cl.Buffer(context, ro, hostbuf=plan.packed()), vis, plan.num_kept)

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

    def check_local_memory(self, nbytes: int, advice: str) -> None:
        """Refuse a launch whose local memory the device does not have, saying what to lower."""
        if nbytes > self.facts.local_memory:
            raise DeviceCapabilityError(
                f"{self.name} needs {nbytes / 1024:.1f} KiB of local memory; {self.facts.name} has "
                f"{self.facts.local_memory / 1024:.1f} KiB ({advice})")
