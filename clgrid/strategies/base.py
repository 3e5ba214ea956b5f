"""What every strategy shares: precision, device facts, the kernel stack on the device."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyopencl as cl

from ..atomics import ATOMIC_PATHS, atomic_unavailable, build_options_for
from ..codegen import build_program, render
from ..errors import DeviceCapabilityError, KernelBuildError
from ..runtime import device_facts
from ..kernels import KernelStack
from ..tuning import TuningTableError, resolve_tuning

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
    """A plan's per-visibility arrays on the device."""

    packed: cl.Buffer
    vis: cl.Buffer
    num_vis: int


@dataclass
class DeviceKernelStack:
    """A layout of a `KernelStack` (``compact`` or ``u_rows``) uploaded in one precision."""

    values: cl.Buffer
    starts: cl.Buffer
    sides: cl.Buffer
    supports: cl.Buffer

    @classmethod
    def upload(cls, context, kernels: KernelStack, complex_dtype, layout: str = "compact") -> "DeviceKernelStack":
        values, starts, sides = getattr(kernels, layout)()
        ro = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        return cls(cl.Buffer(context, ro, hostbuf=values.astype(complex_dtype)),
                   cl.Buffer(context, ro, hostbuf=starts),
                   cl.Buffer(context, ro, hostbuf=sides),
                   cl.Buffer(context, ro, hostbuf=kernels.supports.astype(np.int32)))


class Strategy:
    """Base of all strategies: resolves tuning and renders/builds the template once."""

    name = ""
    template = ""
    kernel_layout = "compact"   # the KernelStack method that lays out kernels for the template

    def __init__(self, queue, grid_size: int, kernels: KernelStack, precision: str, tuning=None):
        self.queue = queue
        self.facts = device_facts(queue.device)
        check_precision(precision, self.facts)
        self.precision = precision
        self.real_dtype, self.complex_dtype = PRECISIONS[precision]
        self.grid_size = grid_size
        self.kernels = kernels
        self.tuning = resolve_tuning(self.name, tuning, self.facts)
        self.check_tuning()
        self._check_work_group()
        self._choose_atomic_path()
        self._kernels = {}

    @cached_property
    def device_kernels(self) -> DeviceKernelStack:
        """The kernel stack on the device, in the strategy's layout (uploaded on first use)."""
        return DeviceKernelStack.upload(self.queue.context, self.kernels, self.complex_dtype, self.kernel_layout)

    def check_tuning(self) -> None:
        """Refuse parameter combinations the template cannot render (types are checked by the table)."""

    @staticmethod
    def work_group_shape(tuning: dict) -> tuple:
        """The work-group shape a strategy launches with these parameters (the tuner prunes by it)."""
        return (tuning["wg_u"], tuning["wg_v"])

    def local_size(self) -> tuple:
        """The work-group shape the strategy launches with (from its tuning)."""
        return self.work_group_shape(self.tuning)

    def _check_work_group(self) -> None:
        size = int(np.prod(self.local_size()))
        if size > self.facts.max_work_group_size:
            raise DeviceCapabilityError(
                f"{self.name}: work-group {self.local_size()} has {size} work-items; "
                f"{self.facts.name} allows at most {self.facts.max_work_group_size}")

    def upload(self, plan, samples, order=None) -> DevicePlan:
        """Put a plan's visibilities on the device, optionally reordered by the index array
        ``order`` (strategies may add arrays of their own)."""
        packed, sample = plan.packed(), plan.sample
        if order is not None:
            packed, sample = packed[order], sample[order]
        ro = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        vis = np.ascontiguousarray(samples.vis[sample], self.complex_dtype)
        return DevicePlan(cl.Buffer(self.queue.context, ro, hostbuf=packed),
                          cl.Buffer(self.queue.context, ro, hostbuf=vis), plan.num_kept)

    def grid(self, plan: DevicePlan, npol: int, grid_buffer, wait_for=None) -> list:
        """Enqueue the gridding of ``plan`` into the zeroed ``grid_buffer``; returns the events."""
        raise NotImplementedError

    def template_params(self, npol: int) -> dict:
        params = {k: v for k, v in self.tuning.items() if k != "build_options"}
        return dict(params, double=self.precision == "double", npol=npol,
                    oversample=self.kernels.oversample, grid_size=self.grid_size)

    def _choose_atomic_path(self) -> None:
        """Replace an atomic path the device lacks by compare-and-swap, saying so."""
        path = self.tuning.get("atomic")
        why = path and atomic_unavailable(path, self.facts, self.precision == "double")
        if why:
            if path not in ATOMIC_PATHS:
                raise TuningTableError(why)
            warnings.warn(f"atomic path {path!r} unavailable on {self.facts.name}: {why}; using 'cas'",
                          stacklevel=4)
            self.tuning["atomic"] = "cas"

    def _build(self, npol: int) -> cl.Program:
        params = self.template_params(npol)
        options = tuple(self.tuning["build_options"]) + build_options_for(params.get("atomic", ""))
        return build_program(self.queue.context, render(self.template, **params), options)

    def kernel(self, name: str, npol: int) -> cl.Kernel:
        """OpenCL kernel ``name`` of the strategy's program for ``npol`` polarisations.

        A build that fails with a faster atomic path is retried with "cas" (the
        device advertised what its compiler then refused), with a warning.
        """
        key = (name, npol)
        if key not in self._kernels:
            try:
                program = self._build(npol)
            except KernelBuildError as exc:
                if self.tuning.get("atomic", "cas") == "cas":
                    raise
                warnings.warn(f"atomic path {self.tuning['atomic']!r} failed to build on "
                              f"{self.facts.name}; using 'cas'\n{str(exc)[:500]}", stacklevel=3)
                self.tuning["atomic"] = "cas"
                self._kernels.clear()
                program = self._build(npol)
            self._kernels[key] = cl.Kernel(program, name)
        return self._kernels[key]
