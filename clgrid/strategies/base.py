"""What every strategy shares: precision, device facts, the kernel stack on the device."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..call_warnings import warn
from ..device.atomics import ATOMIC_PATHS, atomic_unavailable, build_options_for
from ..device.binaries import load_binary, program_description, save_binary
from ..device.codegen import build_program, render
from ..errors import DeviceCapabilityError, KernelBuildError
from ..device.runtime import device_facts
from ..sources.tables import KernelStack
from ..planning.host import Positions
from ..device.tuning import TuningTableError, resolve_tuning

PRECISIONS = {"single": (np.float32, np.complex64), "double": (np.float64, np.complex128)}
# Tuning values for the host, not the device compiler: they never reach a template.
HOST_ONLY_TUNING = ("build_options", "aoc_options", "binary")


def read_only_buffer(context, array: np.ndarray) -> cl.Buffer:
    """A device copy of ``array`` that kernels only read (an empty array: a buffer of one
    element, which OpenCL needs and no kernel reads)."""
    array = np.ascontiguousarray(array)
    if not array.nbytes:
        return cl.Buffer(context, cl.mem_flags.READ_ONLY, max(array.itemsize, 1))
    return cl.Buffer(context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=array)


def check_precision(precision: str, facts, atomics: bool = True) -> None:
    """A known precision the device can do (double: fp64, and 64-bit atomics where used)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")
    if precision == "double" and not (facts.fp64 and (facts.int64_atomics or not atomics)):
        needs = "cl_khr_fp64 and cl_khr_int64_base_atomics" if atomics else "cl_khr_fp64"
        raise DeviceCapabilityError(f"precision='double' needs {needs}; {facts.name} ({facts.platform}) "
                                    f"lacks {'them' if atomics else 'it'}")


@dataclass
class DevicePlan:
    """A plan in a strategy's order on the device (`Strategy.arrange`, cached in the plan):
    the packed positions, and ``source``, the caller's sample of each; ``vis`` holds one
    call's values (num_vis, npol) in that order, the input when gridding and the output
    when degridding (None in the cached arrangement).  For an analytic kernel source,
    ``fraction`` holds each visibility's offset from its nearest cell in that order
    (`Strategy.with_fraction`)."""

    packed: cl.Buffer
    vis: cl.Buffer | None
    num_vis: int
    source: cl.Buffer
    fraction: cl.Buffer | None = field(default=None, kw_only=True)


def extended(device_plan: DevicePlan, cls, **extra) -> DevicePlan:
    """``device_plan`` as ``cls``, a subclass of its class, with its ``extra`` fields."""
    return cls(**{f.name: getattr(device_plan, f.name) for f in fields(device_plan)}, **extra)


@dataclass
class DeviceKernelStack:
    """A `KernelStack` on the device in one precision and one layout, named by the
    `KernelStack` method that makes it (``compact``, ``by_offset``, ``u_rows``,
    ``offset_rows``); layouts without per-plane sides have ``sides`` None, and
    ``offset_rows`` (whose kernels take a support per chunk) ``supports`` None."""

    values: cl.Buffer
    starts: cl.Buffer
    sides: cl.Buffer | None
    supports: cl.Buffer | None

    @classmethod
    def upload(cls, context, kernels: KernelStack, complex_dtype, layout: str = "compact"
               ) -> "DeviceKernelStack":
        values, starts, *sides = kernels.device_tables(layout)
        return cls(read_only_buffer(context, values.astype(complex_dtype)),
                   read_only_buffer(context, starts),
                   read_only_buffer(context, sides[0]) if sides else None,
                   read_only_buffer(context, kernels.supports.astype(np.int32)))

    def arguments(self) -> tuple:
        """The arrays of its layout in the order ``source_table.cl``'s ``SOURCE_ARGS`` declare
        them: values, starts, sides (where the layout has them), supports (where it has them)."""
        return tuple(a for a in (self.values, self.starts, self.sides, self.supports) if a is not None)


def analytic_spellings() -> str:
    """The methods that evaluate an analytic kernel source, for messages."""
    from . import GRIDDING_METHODS, DEGRIDDING_METHODS   # the registry imports this module

    grid = [name for name, cls in GRIDDING_METHODS.items() if cls.analytic_source]
    degrid = [name for name, cls in DEGRIDDING_METHODS.items() if cls.analytic_source]
    return f"Gridder(method=) {grid} or Degridder(method=) {degrid}"


class Strategy:
    """Base of all strategies: resolves tuning and renders/builds the template once.

    ``binary`` (or the tuning table's ``binary``, where the strategy has one) is a
    precompiled program to load instead of building the source (`clgrid.device.binaries`).
    """

    name = ""
    template = ""
    atomics = True             # whether the kernels use float atomics (64-bit ones in double precision)
    kernel_layout = "compact"  # how the kernel stack lies on the device (DeviceKernelStack; source_table.cl)
    counts: tuple = ()         # tuning parameters that count things, so must be >= 1
    work_group_parameters = ("wg_u", "wg_v")  # the tuning parameters that set `local_size`
    interpolation = "nearest"  # kernel weights: nearest samples, or "linear" (clgrid.sources.interpolation)
    hold_positions = None      # a Samples -> Samples transform before host planning (moving window)
    deterministic = False      # grid into 64-bit fixed point (clgrid.operators.deterministic sets it)
    analytic_source = False    # whether its kernels evaluate an AnalyticKernel instead of reading tables

    def __init__(self, queue, grid_size: int, kernels: KernelStack, precision: str, tuning=None,
                 binary=None):
        self.queue = queue
        self.facts = device_facts(queue.device)
        check_precision(precision, self.facts, self.atomics)
        self.precision = precision
        self.real_dtype, self.complex_dtype = PRECISIONS[precision]
        self.grid_size = grid_size
        self.check_kernel_source(kernels)
        self.kernels = kernels
        self.tuning = resolve_tuning(self.name, tuning, self.facts, precision=precision)
        for name in self.counts:
            if self.tuning[name] < 1:
                raise ValueError(f"tuning parameter {name!r} of {self.name!r} must be >= 1, "
                                 f"got {self.tuning[name]}")
        self.check_tuning()
        self._check_work_group()
        self._choose_atomic_path()
        self.binary = binary or self.tuning.get("binary") or None
        self._kernels = {}

    @classmethod
    def check_kernel_source(cls, kernels: KernelStack) -> None:
        """Refuse an analytic kernel source where the kernels read tables, by name (at
        construction, and in `program_parameters` for programs emitted without one)."""
        if kernels.evaluated and not cls.analytic_source:
            raise ValueError(f"{cls.name!r} reads kernel tables and cannot evaluate an analytic kernel source; "
                             f"use it with {analytic_spellings()}")

    @cached_property
    def device_kernels(self) -> DeviceKernelStack:
        """The stack on the device in the strategy's layout, uploaded when first read."""
        return DeviceKernelStack.upload(self.queue.context, self.kernels, self.complex_dtype,
                                        self.kernel_layout)

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
                f"{self.facts.name} allows at most {self.facts.max_work_group_size} "
                f"(lower the tuning parameters {', '.join(self.work_group_parameters)})")

    @property
    def host_planning(self) -> bool:
        """Whether plans for this strategy are made on the host: interpolated weights need
        float64 continuous positions there (`clgrid.sources.interpolation`)."""
        return self.interpolation == "linear" or self.hold_positions is not None

    def arrangement_key(self) -> tuple:
        """What the strategy's order of a plan depends on (the cache key in the plan)."""
        return (type(self).__name__, self.precision, repr(sorted(self.tuning.items())))

    def arrange(self, plan, npol: int) -> DevicePlan:
        """The strategy's order of ``plan`` on the device, without values.

        This default orders on the host (`order`, then `upload`) from the plan's
        positions, downloaded once; strategies that order on the device override it.
        """
        return self.upload(self.order(plan.host(), plan), plan, npol)

    def order(self, positions: Positions, plan) -> Positions:
        """The strategy's order of host positions (none here); ``plan`` gives the sample
        layout (``leading_shape``, ``nchan``) for orders by track."""
        return positions

    def with_fraction(self, device_plan: DevicePlan, plan) -> DevicePlan:
        """``device_plan`` with, for an analytic kernel source, each visibility's exact offset
        from its cell (the plan's ``fraction``, by sample) in its order and this precision."""
        if plan.fraction is None:
            return device_plan
        n = device_plan.num_vis
        if n:
            source = cla.Array(self.queue, (n,), np.int32, data=device_plan.source)
            fraction = cla.take(plan.fraction, source).astype(self.complex_dtype)
        else:
            fraction = cla.zeros(self.queue, 1, self.complex_dtype)
        return replace(device_plan, fraction=fraction.data)

    def upload(self, positions: Positions, plan, npol: int) -> DevicePlan:
        """Ordered host positions on the device; strategies may add arrays of their own."""
        context = self.queue.context
        return DevicePlan(read_only_buffer(context, positions.packed()), None, positions.num_kept,
                          read_only_buffer(context, positions.sample.astype(np.int32)))

    @classmethod
    def program_parameters(cls, tuning: dict, precision: str, npol: int, grid_size: int,
                           kernels: KernelStack) -> dict:
        """The template variables: everything a program of this strategy is specialised for."""
        cls.check_kernel_source(kernels)
        params = {k: v for k, v in tuning.items() if k not in HOST_ONLY_TUNING}
        return dict(params, double=precision == "double", npol=npol, oversample=kernels.oversample,
                    grid_size=grid_size, deterministic=False, source=kernels.device_source(cls.interpolation),
                    table_layout=cls.kernel_layout, **kernels.template_parameters())

    @classmethod
    def keeps_float_taps(cls, choice, precision: str, ndim: int, epsilon: float | None) -> bool:
        """Whether an imaging operator of ``precision`` asked for ``epsilon`` keeps this
        strategy's per-point kernel values in float (``choice``: its `KernelChoice`;
        ``ndim`` 3 with w): a strategy that keeps none says no."""
        return False

    @classmethod
    def float_taps_parameters(cls, single: bool) -> dict:
        """The template variables that say its kept kernel values are float (``single``),
        for `program_parameters`' program as the imaging engine builds it (none here)."""
        return {}

    def kernel_arguments(self, plan: DevicePlan) -> tuple:
        """What the kernel reads its weights from, as its source's ``SOURCE_ARGS`` declare it
        (`clgrid.sources.base.KernelSource.kernel_arguments`)."""
        return self.kernels.kernel_arguments(self, plan)

    def grid(self, plan: DevicePlan, npol: int, grid_buffer, wait_for=None) -> list:
        """Enqueue the gridding of ``plan`` into the zeroed ``grid_buffer``; returns the events."""
        raise NotImplementedError

    def template_params(self, npol: int) -> dict:
        """This strategy's template variables: `program_parameters` (the one place they come
        from), and whether it accumulates in fixed point (set per operator, not tuning)."""
        return dict(self.program_parameters(self.tuning, self.precision, npol, self.grid_size, self.kernels),
                    deterministic=self.deterministic)

    def _choose_atomic_path(self) -> None:
        """Replace an atomic path the device lacks by compare-and-swap, saying so."""
        path = self.tuning.get("atomic")
        why = path and atomic_unavailable(path, self.facts, self.precision == "double")
        if why:
            if path not in ATOMIC_PATHS:
                raise TuningTableError(why)
            warn(f"atomic path {path!r} unavailable on {self.facts.name}: {why}; using 'cas'",
                 stacklevel=None)
            self.tuning["atomic"] = "cas"

    def _source(self, npol: int) -> tuple[str, dict]:
        """The rendered program for ``npol`` polarisations and its `program_description`."""
        params = self.template_params(npol)
        source = render(self.template, **params)
        return source, program_description(self.name, self.template, params, source)

    def _build(self, npol: int) -> cl.Program:
        source, description = self._source(npol)
        if self.binary:
            return load_binary(self.queue.context, self.binary, description)
        options = tuple(self.tuning["build_options"]) + build_options_for(self.tuning.get("atomic", ""))
        return build_program(self.queue.context, source, options)

    def save_binary(self, npol: int, path) -> Path:
        """Build the program for ``npol`` polarisations and write its device binary to ``path``,
        described beside it, ready for ``binary=`` on this device and runtime."""
        return save_binary(self._build(npol), path, self._source(npol)[1])

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
                warn(f"atomic path {self.tuning['atomic']!r} failed to build on "
                     f"{self.facts.name}; using 'cas'\n{str(exc)[:500]}", stacklevel=None)
                self.tuning["atomic"] = "cas"
                self._kernels.clear()
                program = self._build(npol)
            self._kernels[key] = cl.Kernel(program, name)
        return self._kernels[key]

    def check_local_memory(self, nbytes: int, advice: str) -> None:
        """Refuse a launch whose local memory the device does not have, saying what to lower."""
        if nbytes > self.facts.local_memory:
            raise DeviceCapabilityError(
                f"{self.name} needs {nbytes / 1024:.1f} KiB of local memory; {self.facts.name} has "
                f"{self.facts.local_memory / 1024:.1f} KiB ({advice})")
