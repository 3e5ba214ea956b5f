"""The plan: positions planned once, on the device, shared by gridders and degridders.

Imaging pipelines grid and degrid the same uvw many times with new values (major
cycles).  A `Plan` holds what depends on the positions only: for every kept (row,
channel) sample its grid cell, oversample offsets, w-plane and sign (`plan.cl`'s
packed int4), its support and its share of the norm, and the counts of what was left
out and why.  It lives on the device of the operator that made it; any `Gridder` or
`Degridder` of the same geometry (grid size, cell size, kernel stack, kernel
interpolation) on the same OpenCL context can use it, and each strategy caches its
own order of the plan in it (`Plan.arranged`).  Values (visibilities, weights) come
with each call.

Planning runs in an OpenCL kernel (``clgrid/cl_kernels/plan_positions.cl``) in double
precision, with the very operations of the float64 reference, so the result is
bit-identical to `clgrid.planning.host.grid_indices`.  Devices without fp64, kernels
interpolated in (u, v, w) (their continuous positions are float64 host arrays) and
a moving window that holds w over time blocks plan on the host instead
(`clgrid.planning.host.plan_visibilities`), and say so in ``Plan.planned_on``.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..device.codegen import build_program, launch, render, kernel as codegen_kernel
from ..device.reduction import DeviceSum
from ..sources.tables import KernelStack, offset_range
from .host import (SPEED_OF_LIGHT, Positions, Samples, check_coordinates, in_wavelengths, plan_visibilities,
                   stacked_positions,
                   report_dropped)
from ..device.scan import ExclusiveScan
from ..device.runtime import device_facts
from ..device.transfer import to_device_array, upload
from .device_points import check_device_uvw, device_rows, is_device_array

__all__ = ["GridGeometry", "Plan", "make_plan", "plan_stacked", "split_flags", "as_host"]

INT32_MAX = 2 ** 31 - 1
STATUSES = ("kept", "flagged", "off_grid", "beyond_kernel_stack", "not_finite", "elsewhere")   # plan_positions.cl


@dataclass(frozen=True, eq=False)
class GridGeometry:
    """What a plan is valid for: the grid, the kernel stack (by identity) and how its
    weights are read; ``time_block`` > 0 when w is held over time blocks (moving window)."""

    grid_size: int
    cell_size: float
    kernels: KernelStack
    interpolation: str = "nearest"
    time_block: int = 0

    def differences(self, other: "GridGeometry") -> list:
        """Human-readable differences from ``other`` (empty when a plan of one serves the other)."""
        out = []
        for name in ("grid_size", "cell_size", "interpolation", "time_block"):
            if getattr(self, name) != getattr(other, name):
                out.append(f"{name} {getattr(self, name)!r} != {getattr(other, name)!r}")
        if self.kernels is not other.kernels:
            out.append("a different KernelStack object")
        return out


def as_host(a):
    """A numpy view of ``a`` (a pyopencl Array is copied to the host)."""
    return a.get() if isinstance(a, cla.Array) else np.asarray(a)


def split_flags(flags, sample_shape: tuple):
    """Flags as ``(usable, pol_flags)``.

    ``flags`` shaped like the samples, ``(nrow[, nchan])`` (ducc0's ``mask`` is its
    negation), flags every polarisation of a sample; with one more axis,
    ``(..., npol)`` or broadcasting to it, each polarisation.  ``usable`` (bool,
    nsample) is False where every polarisation is flagged, None when nothing is;
    ``pol_flags`` (bool, (nsample, npol)) only when some sample is partly flagged.
    """
    if flags is None:
        return None, None
    flags = as_host(flags)
    if flags.dtype != bool:
        raise TypeError(f"flags must be a boolean array, got dtype {flags.dtype}")
    nsample = int(np.prod(sample_shape))
    if flags.ndim == len(sample_shape) + 1:
        target = sample_shape + (flags.shape[-1],)
    elif flags.ndim <= len(sample_shape):
        target = sample_shape
    else:
        raise ValueError(f"flags of shape {flags.shape} fit neither the samples {sample_shape} nor "
                         f"the visibilities {sample_shape + ('npol',)}")
    try:
        flags = np.broadcast_to(flags, target)
    except ValueError:
        raise ValueError(f"flags of shape {flags.shape} do not broadcast to the samples {sample_shape} "
                         f"or the visibilities {sample_shape + ('npol',)}") from None
    flags = flags.reshape(nsample, target[-1] if len(target) > len(sample_shape) else 1)   # (no -1: 0 samples)
    every = flags.all(axis=1)
    partly = flags.shape[1] > 1 and bool(np.any(flags.any(axis=1) & ~every))
    return (~every if every.any() else None), (np.ascontiguousarray(flags) if partly else None)


class Plan:
    """Planned positions on the device; pass it to ``Gridder.grid`` or ``Degridder.degrid``.

    ``sample`` (int32), ``packed`` (int4), ``support`` (int32) and ``weight_sum``
    (float64, or float32 without fp64) are device arrays with one entry per kept
    sample, in the caller's order; ``sample`` indexes the flattened ``(row,
    channel)`` samples.  ``pol_flags`` holds per-polarisation flags where a sample
    is partly flagged (applied to the values of each call).  For an analytic kernel
    source (`clgrid.sources.analytic`) ``fraction`` holds every sample's exact offset from
    its nearest cell, ``nearest - position`` in cells, as a complex device array in the
    caller's sample order (real part along u, imaginary along v; complex128, complex64 on
    devices without fp64; meaningful for kept samples): what the kernel is evaluated at.

    A plan for w-stacking (`plan_stacked`, the imaging operator's) has one entry per kept
    sample too: ``packed`` holds the first taps (first u and v cells modulo the periodic
    grid, first w-plane, bit 31 of ``w`` where the point moved to -uvw and is conjugated),
    ``fraction`` (real4 in the operator's precision) the first taps' offsets from the point
    in cells and planes, ``phase`` (complex, or None) the factor gridding applies;
    ``support`` and ``weight_sum`` are None (the kernel's width is the geometry's, and the
    images are not normalised).
    """

    def __init__(self, geometry: GridGeometry, queue, leading_shape: tuple, nchan, counts: dict,
                 sample, packed, support, weight_sum, pol_flags=None, positions: Positions | None = None,
                 planned_on: str = "device", fraction: cla.Array | None = None, phase: cla.Array | None = None):
        self.geometry = geometry
        self.queue = queue
        self.context = queue.context
        self.leading_shape = tuple(leading_shape)
        self.nchan = nchan
        self.counts = counts
        self.sample, self.packed, self.support, self.weight_sum = sample, packed, support, weight_sum
        self.fraction = fraction
        self.phase = phase
        self.values_by_position = False   # w-stacking: values come in plan order, not the samples' (set before arranging)
        self.pol_flags = pol_flags
        self.planned_on = planned_on
        self._positions = positions
        self._device_flags = None
        self._arranged: dict = {}
        self._lock = threading.RLock()   # arrangements read host() under it

    # -- what was planned -------------------------------------------------------

    @property
    def sample_shape(self) -> tuple:
        """The caller's sample axes: ``leading_shape`` plus the channel axis if any."""
        return self.leading_shape + ((self.nchan,) if self.nchan is not None else ())

    @property
    def num_samples(self) -> int:
        return int(np.prod(self.sample_shape))

    @property
    def num_kept(self) -> int:
        return self.counts["kept"]

    @property
    def num_flagged(self) -> int:
        return self.counts["flagged"]

    @property
    def num_dropped(self) -> int:
        return self.counts["off_grid"] + self.counts["beyond_kernel_stack"]

    @property
    def npol(self):
        """The polarisations the flags fix, or None (any)."""
        return None if self.pol_flags is None else self.pol_flags.shape[1]

    @cached_property
    def footprint_cells(self) -> int:
        """Grid cells all kept footprints cover, per polarisation (seed 004's GGPAPS count)."""
        if not self.num_kept:
            return 0
        total = DeviceSum.of(self.context, np.int64, "(long)(2 * s[i] + 1) * (2 * s[i] + 1)",
                             "__global const int *s")
        return int(total(self.queue, self.num_kept, self.support.data).get())

    def check_npol(self, npol: int) -> None:
        if self.npol is not None and npol != self.npol:
            raise ValueError(f"the plan's flags have {self.npol} polarisations, the values {npol}")

    def counts_report(self, done: str) -> dict:
        """The counts for a report: samples, done (gridded or degridded), and left out why."""
        return {"samples": self.num_samples, done: self.num_kept, "flagged": self.num_flagged,
                "off_grid": self.counts["off_grid"], "beyond_kernel_stack": self.counts["beyond_kernel_stack"]}

    def check_usable_by(self, geometry: GridGeometry, context) -> None:
        """Refuse an operator whose geometry or context differs, naming what."""
        why = self.geometry.differences(geometry)
        if context is not self.context and context.int_ptr != self.context.int_ptr:
            why.append("another OpenCL context")
        if why:
            raise ValueError("this plan was made for another geometry: " + "; ".join(why))

    def device_pol_flags(self):
        """The per-polarisation flags on the device (uint8, uploaded once), or None."""
        if self.pol_flags is None:
            return None
        with self._lock:
            if self._device_flags is None:
                self._device_flags = cla.to_device(self.queue, self.pol_flags.astype(np.uint8))
            return self._device_flags

    # -- for strategies ----------------------------------------------------------

    def arranged(self, key, arrange):
        """The strategy's order of this plan, made by ``arrange(plan)`` once per ``key``."""
        with self._lock:
            if key not in self._arranged:
                if self.sample is None:
                    raise RuntimeError("this plan's points were released after arranging (release_points): "
                                       "it can be arranged no other way")
                self._arranged[key] = arrange(self)
            return self._arranged[key]

    def keep_arranged(self, key, arrangement):
        """Keep ``arrangement`` as this plan's order ``key`` (made elsewhere:
        `clgrid.planning.fused.plan_arranged`); returns it."""
        with self._lock:
            self._arranged[key] = arrangement
            return arrangement

    def release_points(self) -> None:
        """Free the per-point device arrays in the caller's order (``sample``, ``packed``,
        ``fraction``, ``phase``, ``support``, ``weight_sum``) once the arrangements made so far
        hold what their strategies read (the imaging operator keeps only its one arrangement:
        on a CPU device these are host memory).  The counts stay; `host` and a new
        arrangement are refused after it."""
        with self._lock:
            if self._positions is None:
                self._positions = False
            for name in ("sample", "packed", "fraction", "phase", "support", "weight_sum"):
                array = getattr(self, name)
                if array is not None and hasattr(array, "data") and array.size:
                    array.data.release()
                setattr(self, name, None)

    def host(self) -> Positions:
        """The kept positions as host arrays (downloaded once), for strategies that order
        on the host and for tests."""
        with self._lock:
            if self._positions is False:
                raise RuntimeError("this plan's points were released after arranging (release_points)")
            if self._positions is None:
                self._positions = self._download()
            return self._positions

    def _download(self) -> Positions:
        n = self.num_kept
        sample, support = np.empty(n, np.int32), np.empty(n, np.int32)
        packed = np.empty((n, 4), np.int32)
        weight_sum = np.empty(n, self.weight_sum.dtype)
        if n:
            for host, device in ((sample, self.sample), (packed, self.packed), (support, self.support),
                                 (weight_sum, self.weight_sum)):
                cl.enqueue_copy(self.queue, host, device.data)
            self.queue.finish()
        return Positions.from_packed(self.geometry.grid_size, sample, packed, support,
                                     weight_sum.astype(np.float64), self.num_samples, self.counts)


class _Planner:
    """The planning program of one context (built once), its kernels (one per thread:
    kernel objects hold their arguments) and a scan for one planning call."""

    def __init__(self, queue):
        program = build_program(queue.context, render("plan_positions.cl", stacked=False))
        self.classify = codegen_kernel(program, "classify")
        self.compact = codegen_kernel(program, "compact")
        self.scan = ExclusiveScan.of(queue)


def _device_uvw(queue, uvw, staging) -> cla.Array:
    """uvw as a float64 device array of shape (..., 3) (uploaded through ``staging``)."""
    if isinstance(uvw, cla.Array):
        return device_rows(check_device_uvw(uvw, queue.context))
    return to_device_array(queue, np.ascontiguousarray(uvw, np.float64), staging)


_device_tables = weakref.WeakKeyDictionary()   # KernelStack -> {(context, dtype): tables}; the stack pickles


def _kernel_tables(queue, kernels: KernelStack, real_dtype):
    """Supports and weight sums of the stack on the device, once per (context, stack)."""
    cache = _device_tables.setdefault(kernels, {})
    key = (queue.context.int_ptr, np.dtype(real_dtype).str)
    if key not in cache:
        cache[key] = (cla.to_device(queue, kernels.supports.astype(np.int32)),
                      cla.to_device(queue, kernels.weight_sums().astype(real_dtype)))
    return cache[key]


def make_plan(queue, geometry: GridGeometry, uvw, freqs=None, flags=None, on_dropped: str = "warn",
              done: str = "gridded", where: str = "device", hold=None, staging=None) -> Plan:
    """Plan ``uvw`` ((..., 3) wavelengths, or metres with ``freqs`` in Hz) for ``geometry``.

    ``where`` is "device" (fp64 devices) or "host"; ``hold`` (host only) transforms the
    `Samples` before planning (the moving window's w held over time blocks); ``staging``
    (`clgrid.device.transfer.Staging`) carries host uvw to the device.
    """
    host_uvw = None if isinstance(uvw, cla.Array) else uvw
    shape = tuple(uvw.shape) if isinstance(uvw, cla.Array) else np.shape(uvw)
    if len(shape) < 2 or shape[-1] != 3:        # named with its own shape (a device array's too)
        raise ValueError(f"uvw must have shape (..., 3), got {shape}")
    check_coordinates(np.empty((0,) + shape[-1:]) if host_uvw is None else host_uvw, freqs)
    freqs = None if freqs is None else np.asarray(freqs, np.float64)
    leading = shape[:-1]
    nchan = None if freqs is None else freqs.size
    sample_shape = leading + ((nchan,) if nchan is not None else ())
    nsample = int(np.prod(sample_shape))
    if nsample > INT32_MAX:
        raise ValueError(f"{nsample} samples in one plan overflow 32-bit indices; plan them in chunks")
    usable, pol_flags = split_flags(flags, sample_shape)
    if where == "host":
        plan = _plan_on_host(queue, geometry, as_host(uvw), freqs, usable, sample_shape, leading, nchan,
                             pol_flags, on_dropped, done, hold)
    else:
        plan = _plan_on_device(queue, geometry, uvw, freqs, usable, leading, nchan, nsample, pol_flags, staging)
    report_dropped(plan.counts["off_grid"], plan.counts["beyond_kernel_stack"], plan.num_samples,
                   geometry.grid_size, geometry.kernels, on_dropped, done, stacklevel=None)
    return plan


def _classify_scratch(queue, nsample: int) -> tuple:
    """What a planning pass over ``nsample`` samples writes before compaction: each sample's
    status, packed plan and kept flag, the kept flags' scan, and the counts per status
    (copied zeros: Oclgrind reads fills as unset)."""
    n = max(nsample, 1)
    return (cla.empty(queue, n, np.int32), cla.empty(queue, (n, 4), np.int32), cla.empty(queue, n, np.int32),
            cla.empty(queue, n + 1, np.int32), cla.to_device(queue, np.zeros(len(STATUSES), np.int32)))


def _plan_on_device(queue, geometry, uvw, freqs, usable, leading, nchan, nsample, pol_flags, staging) -> Plan:
    planner = _Planner(queue)
    kernels = geometry.kernels
    uvw_d = _device_uvw(queue, uvw, staging)
    scale = None if freqs is None else cla.to_device(queue, freqs / SPEED_OF_LIGHT)
    usable_d = None if usable is None else cla.to_device(queue, usable.astype(np.uint8))
    supports, weight_sums = _kernel_tables(queue, kernels, np.float64)
    n = max(nsample, 1)
    status, packed_all, kept, position, counts = _classify_scratch(queue, nsample)
    fraction = cla.empty(queue, n, np.complex128) if kernels.evaluated else None
    wg = min(256, queue.device.max_work_group_size)
    if nsample:
        planner.classify(queue, (-(-nsample // wg) * wg,), (wg,), uvw_d.data,
                         None if scale is None else scale.data, None if usable_d is None else usable_d.data,
                         np.int32(nchan or 1), np.int32(nsample),
                         np.float64(1.0 / (geometry.grid_size * geometry.cell_size)),
                         np.float64(kernels.oversample), np.float64(kernels.w_scale),
                         np.int32(geometry.grid_size), np.int32(kernels.num_planes), supports.data,
                         status.data, packed_all.data, kept.data, counts.data,
                         None if fraction is None else fraction.data)
    tally = dict(zip(STATUSES, (int(c) for c in counts.get())))
    tally.pop("elsewhere")
    if tally.pop("not_finite"):
        raise ValueError("uvw contains NaN or inf in unflagged data")
    m = tally["kept"]
    sample = cla.empty(queue, max(m, 1), np.int32)
    packed = cla.empty(queue, (max(m, 1), 4), np.int32)
    support = cla.empty(queue, max(m, 1), np.int32)
    weight_sum = cla.empty(queue, max(m, 1), np.float64)
    if m:
        planner.scan(kept.data, position.data, nsample)
        launch(planner.compact, queue, nsample, status.data, packed_all.data, position.data,
               np.int32(nsample), supports.data, weight_sums.data,
               np.int32(offset_range(kernels.oversample)),
               sample.data, packed.data, support.data, weight_sum.data)
    return Plan(geometry, queue, leading, nchan, tally, sample, packed, support, weight_sum,
                pol_flags=pol_flags, planned_on="device", fraction=fraction)


def _plan_on_host(queue, geometry, uvw, freqs, usable, sample_shape, leading, nchan, pol_flags,
                  on_dropped, done, hold) -> Plan:
    nsample = int(np.prod(sample_shape))
    usable = np.ones(nsample, bool) if usable is None else usable
    uvw_l = in_wavelengths(np.asarray(uvw, np.float64), freqs, usable)
    samples = Samples(uvw_l, None, usable[:, None].astype(np.float64), ~usable[:, None], usable, leading, nchan)
    if hold is not None:
        samples = hold(samples)
    positions = plan_visibilities(samples, geometry.grid_size, geometry.cell_size, geometry.kernels,
                                  on_dropped="ignore", done=done, interpolation=geometry.interpolation)
    real = np.float64 if queue.device.double_fp_config else np.float32
    m = positions.num_kept

    def upload(a, dtype):
        return cla.to_device(queue, np.ascontiguousarray(a if m else np.zeros((1,) + a.shape[1:]), dtype))

    counts = {"kept": m, "flagged": positions.num_flagged, "off_grid": positions.num_off_grid,
              "beyond_kernel_stack": positions.num_beyond_stack}
    fraction = None
    if geometry.kernels.evaluated:
        every = np.zeros(max(nsample, 1), np.complex128 if real == np.float64 else np.complex64)
        every[positions.sample] = -(positions.position[:, 0] + 1j * positions.position[:, 1])
        fraction = cla.to_device(queue, every)
    return Plan(geometry, queue, leading, nchan, counts, upload(positions.sample, np.int32),
                upload(positions.packed(), np.int32), upload(positions.support, np.int32),
                upload(positions.weight_sum, real), pol_flags=pol_flags, positions=positions,
                planned_on="host", fraction=fraction)


# -- w-stacking (clgrid.imaging) ---------------------------------------------------------

STACKING_T = np.dtype([("sign_u", np.float64), ("sign_v", np.float64), ("sign_w", np.float64),
                       ("cells_u", np.float64), ("cells_v", np.float64), ("w_start", np.float64),
                       ("dw", np.float64), ("center_x", np.float64), ("center_y", np.float64),
                       ("nshift", np.float64), ("tilt_x", np.float64), ("tilt_y", np.float64),
                       ("nu", np.int32), ("nv", np.int32), ("nchan", np.int32),
                       ("nsample", np.int32)])   # plan_positions.cl's stacking_t


def stacked_program(context, geometry, fold: bool, double: bool) -> cl.Program:
    """The planning program for w-stacking points of ``geometry`` (built once per context)."""
    return build_program(context, render("plan_positions.cl", stacked=True, double=double,
                                         use_w=geometry.do_wgridding, fold=fold, support=geometry.kernel.support,
                                         num_planes=geometry.num_planes))


def stacked_inputs(queue, geometry, uvw, scale, keep, signs, staging=None) -> tuple:
    """What the w-stacking planning kernels (plan_positions.cl, plan_arranged.cl) read, on
    ``queue``'s device: ``(uvw_d, scale_d, keep_d, stacking)``, uvw (a host array, uploaded
    through ``staging`` where given, or a float64 `pyopencl.array.Array` on the context,
    used where it is), scale and keep (None: all kept) as device arrays, and the geometry
    and signs as a `STACKING_T` value."""
    g = geometry
    nrow, nchan = uvw.shape[0], scale.size
    nsample = nrow * nchan
    if is_device_array(uvw):       # points already on the device: planned where they are
        uvw_d = device_rows(check_device_uvw(uvw, queue.context, rows=True)) if nrow \
            else cla.empty(queue, 3, np.float64)
    else:
        uvw_d = cla.empty(queue, max(nsample and nrow, 1) * 3, np.float64)
        if nrow:
            upload(queue, np.ascontiguousarray(uvw, np.float64), uvw_d.data, staging)
    scale_d = cla.to_device(queue, np.asarray(scale, np.float64))
    keep_d = None if keep is None else cla.to_device(queue, np.ascontiguousarray(keep, np.uint8).reshape(-1))
    cells_u, cells_v = g.cells_per_wavelength
    stacking = np.array([(signs[0], signs[1], signs[2], cells_u, cells_v, g.w_start, g.dw, g.center_x, g.center_y,
                          g.nshift, g.tilt_x, g.tilt_y, g.nu, g.nv, nchan, nsample)], STACKING_T)[0]
    return uvw_d, scale_d, keep_d, stacking


def plan_stacked(queue, geometry, uvw, scale, keep, signs, fold: bool, double: bool, staging=None,
                 on_host: bool = False, planes: range | None = None) -> Plan:
    """Plan the samples of ``uvw`` (nrow, 3) metres (a host array, or a float64
    `pyopencl.array.Array` on ``queue``'s context: planned where it is) at ``scale`` (nchan,) = freq / c for
    w-stacking on ``geometry`` (a `clgrid.imaging.geometry.ImageGeometry`), where ``keep``
    (nrow, nchan; None: all) is set, on ``queue``'s device: a `Plan` in the caller's sample
    order.  ``signs``: the flips (+1 or -1 per axis); ``fold``: move w < 0 to -uvw;
    ``double``: offsets and phases in double.  ``staging`` (`clgrid.device.transfer.Staging`),
    if given, carries uvw to the device.  ``on_host``: plan in numpy
    (`clgrid.planning.host.stacked_positions`, bit-identical), as devices without fp64 do.
    ``planes`` (a range; None: all): plan only the points with a tap on them (an operator
    over some of the w-planes); the others are counted in ``counts["elsewhere"]``."""
    g = geometry
    real = np.float64 if double else np.float32
    cplx = np.complex128 if double else np.complex64
    nrow, nchan = uvw.shape[0], scale.size
    nsample = nrow * nchan
    counts = {"kept": 0, "flagged": 0, "off_grid": 0, "beyond_kernel_stack": 0, "elsewhere": 0}
    planes = range(g.num_planes) if planes is None else planes
    if on_host or not device_facts(queue.device).fp64:
        host = stacked_positions(as_host(uvw), scale, keep, signs, g, fold, planes)
        n = host["sample"].size
        counts.update(kept=n, flagged=host["flagged"], elsewhere=nsample - n - host["flagged"])

        def up(a, dtype):
            a = np.asarray(a, dtype)
            return cla.to_device(queue, a if n else np.zeros((1,) + a.shape[1:], dtype))

        return Plan(g, queue, (nrow,), nchan, counts, up(host["sample"], np.int32), up(host["packed"], np.int32),
                    None, None, planned_on="host", fraction=up(host["fraction"], real),
                    phase=None if host["phase"] is None else up(host["phase"], cplx))
    context = queue.context
    program = stacked_program(context, g, fold, double)
    uvw_d, scale_d, keep_d, stacking = stacked_inputs(queue, g, uvw, scale, keep, signs, staging)
    n = max(nsample, 1)
    status, packed_all, kept, position, tally = _classify_scratch(queue, nsample)
    wg = min(256, queue.device.max_work_group_size)
    if nsample:
        codegen_kernel(program, "classify_stacked")(
            queue, (-(-nsample // wg) * wg,), (wg,), uvw_d.data, scale_d.data,
            None if keep_d is None else keep_d.data, stacking, np.int32(planes.start), np.int32(planes.stop),
            status.data, packed_all.data, kept.data, tally.data)
    found = dict(zip(STATUSES, (int(c) for c in tally.get())))
    if found["not_finite"]:
        raise ValueError(f"uvw has NaN or infinite entries ({found['not_finite']} unmasked samples)")
    if found["beyond_kernel_stack"]:
        raise RuntimeError(f"clgrid internal error: {found['beyond_kernel_stack']} points' w-planes fall outside "
                           f"the stack")
    m = found["kept"]
    counts.update(kept=m, flagged=found["flagged"], elsewhere=found["elsewhere"])
    sample = cla.empty(queue, max(m, 1), np.int32)
    packed = cla.empty(queue, (max(m, 1), 4), np.int32)
    fraction = cla.empty(queue, (max(m, 1), 4), real)
    phase = cla.empty(queue, max(m, 1), cplx) if g.has_phase else None
    if m:
        ExclusiveScan.of(queue)(kept.data, position.data, nsample)
        launch(codegen_kernel(program, "compact_stacked"),
               queue, nsample, status.data, packed_all.data, position.data, uvw_d.data, scale_d.data,
               stacking, sample.data, packed.data, fraction.data, None if phase is None else phase.data)
    return Plan(g, queue, (nrow,), nchan, counts, sample, packed, None, None, fraction=fraction, phase=phase)
