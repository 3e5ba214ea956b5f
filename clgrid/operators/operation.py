"""What `Gridder` and `Degridder` share: checked geometry, one device queue, a strategy,
the device grid, planning, values per call and the report.

Both directions plan positions the same way (`clgrid.planning.plan`), let their
strategy order the plan once (cached in the plan) and bring values with each call
(`clgrid.planning.values`).  One operator may be shared by threads: a lock serialises its
calls, since they share the device grid and scratch buffers (calls on different
operators run side by side).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..planning.plan import GridGeometry, Plan, make_plan
from ..errors import DeviceCapabilityError
from ..sources.tables import KernelStack
from ..planning.host import check_arguments
from ..device.runtime import device_facts, get_queue
from ..strategies import strategy_label
from ..device.tuning import resolve_tuning
from ..device.transfer import Staging
from ..strategies.base import PRECISIONS, DevicePlan, check_precision

__all__ = ["GridOperation", "PreparedVisibilities", "kernel_seconds", "rows_of"]

# Device bytes a (row, channel) sample can take while planned and gridded (uvw, the
# planning scratch and plan, values in and in order, sort entries), and 64 more per
# polarisation: a conservative bound, so streamed chunks leave room to spare.
BYTES_PER_SAMPLE = 256
BYTES_PER_VISIBILITY = 64
# An analytic kernel source's exact offsets: complex128 per sample in the plan, and again
# in each arrangement's order.
OFFSET_BYTES_PER_SAMPLE = 32


@dataclass
class PreparedVisibilities:
    """A plan with one call's values on the device, in the strategy's order: run it with
    ``execute`` (any number of times, as benchmarks do)."""

    plan: Plan
    device_plan: DevicePlan | None
    npol: int
    norm: np.ndarray | None = None
    value_exponent: int = 0    # the values on the device are the caller's times 2^value_exponent (deterministic)
    magnitude: object = None   # () -> sum of |Re| + |Im| of the weighted values, in the caller's precision
    strategy: object = None    # the strategy that arranged them and launches (`GridOperation.strategy_for`)

    @property
    def grid_point_additions(self) -> int:
        """Complex multiply-adds into (or reads of) grid points: seed 004's GGPAPS count."""
        return self.plan.footprint_cells * self.npol


class GridOperation:
    """Base of `Gridder` and `Degridder`; ``strategies`` maps method names to strategy classes."""

    strategies: dict = {}
    kind = ""  # "grid" or "degrid": which strategies (`clgrid.strategies.SPELLINGS`)
    done = ""  # what happens to a visibility, for reports and warnings

    def __init__(self, grid_size: int, cell_size: float, kernels: KernelStack, method: str = "auto",
                 device=None, precision: str = "single", tuning: dict | None = None,
                 on_dropped: str = "warn", binary=None, interpolation: str = "nearest"):
        check_arguments(grid_size, cell_size, kernels, on_dropped)
        self.grid_size = int(grid_size)
        self.cell_size = float(cell_size)
        self.kernels = kernels
        self.on_dropped = on_dropped
        self.queue = get_queue(device)
        self.context = self.queue.context    # held: Intel's CPU runtime refuses clRetainContext once the
        #                                      caller's last reference to a context it passed is gone
        self.facts = device_facts(self.queue.device)
        check_precision(precision, self.facts, atomics=False)
        self.precision = precision
        self._check_grid_fits(1)             # before a strategy says something less to the point
        if method == "auto":
            method = self.auto_method(interpolation)
        self.label = strategy_label(self.kind, method, interpolation)
        self.method, self.interpolation = method, interpolation
        self.strategy = self.strategies[self.label](self.queue, self.grid_size, kernels, precision, tuning, binary)
        self._tuning, self._binary, self._by_npol = tuning, binary, {}
        self._grid_buffers: dict = {}
        self._scratch: dict = {}
        self._lock = threading.RLock()
        self.last_report: dict | None = None
        self.last_events: list = []
        self.chunk_samples: int | None = None   # samples per streamed chunk; None: what fits the device
        self._transfer_queue = None
        self._staging = False     # made when first needed

    @property
    def device(self):
        return self.queue.device

    def auto_method(self, interpolation: str) -> str:
        """``method="auto"``: the tuning table's choice for this device (``[auto]``), or the
        texture path's own distribution for linear interpolation."""
        if interpolation == "linear":
            return "atomic" if self.kind == "grid" else "gather"
        return resolve_tuning("auto", None, self.facts)[self.kind]

    @property
    def geometry(self) -> GridGeometry:
        """What a plan must have been made for to serve this operator."""
        return GridGeometry(self.grid_size, self.cell_size, self.kernels, self.strategy.interpolation,
                        self.strategy.tuning.get("time_block", 0))

    # -- planning ---------------------------------------------------------------

    def plan(self, uvw, freqs=None, flags=None) -> Plan:
        """Plan positions once, for any number of calls with new values.

        ``uvw`` (..., 3): wavelengths, or metres when ``freqs`` (Hz) is given; a numpy
        array or a float64 `pyopencl.array.Array` on this operator's context.
        ``flags`` shaped like the samples ``(..., [nchan])`` flag every polarisation
        of a sample (ducc0's ``mask`` is the negation), with a trailing polarisation
        axis each one.  The plan serves every `Gridder` and `Degridder` of the same
        geometry on the same context.  Planning runs on the device in float64,
        bit-identical to the reference, where the device has fp64 (``plan.planned_on``).
        """
        where = "host" if (self.strategy.host_planning or not self.facts.fp64) else "device"
        shape = tuple(getattr(uvw, "shape", np.shape(uvw)))
        nsample = int(np.prod(shape[:-1])) * (1 if freqs is None else int(np.size(freqs)))
        if nsample > self.samples_per_chunk(1):
            raise ValueError(f"{nsample} samples do not fit {self.facts.name} in one plan (at most "
                             f"{self.samples_per_chunk(1)}): plan them in parts, or let grid(uvw, vis) and "
                             f"degrid(grid, uvw) stream them")
        with self._lock:
            return make_plan(self.queue, self.geometry, uvw, freqs, flags, self.on_dropped, self.done,
                             where=where, hold=self.strategy.hold_positions, staging=self.staging)

    def samples_per_chunk(self, npol: int) -> int:
        """(row, channel) samples that one plan and one call's values may hold on the device:
        ``chunk_samples`` if set, else half the memory the grid leaves (the other half
        takes the next chunk's upload), within the largest buffer."""
        if self.chunk_samples:
            return int(self.chunk_samples)
        facts = self.facts
        free = facts.global_memory * 7 // 8 - self._grid_bytes(npol)      # an eighth for programs, tables
        per_sample = BYTES_PER_SAMPLE + BYTES_PER_VISIBILITY * npol
        if self.kernels.evaluated:
            per_sample += OFFSET_BYTES_PER_SAMPLE
        return int(max(1, min(free // 2 // per_sample, facts.max_allocation // 16, 2 ** 31 - 1)))

    def row_chunks(self, shape: tuple, nchan, npol: int):
        """Slices of the first axis of uvw ``shape`` that fit the device one at a time, or
        None when all of it fits (rows, or whole baselines of tracks, are never split)."""
        per_row = int(np.prod(shape[1:-1])) * (nchan or 1)
        total = shape[0] * per_row
        limit = self.samples_per_chunk(npol)
        if total <= limit:
            return None
        rows = max(1, limit // max(per_row, 1))
        return [slice(start, min(start + rows, shape[0])) for start in range(0, shape[0], rows)]

    @property
    def staging(self):
        """Pinned staging for host arrays (`clgrid.device.transfer`), on devices with memory of their
        own; None on those that share the host's (they copy directly)."""
        if self._staging is False:
            self._staging = Staging(self.transfer_queue) if Staging.worth_it(self.device) else None
        return self._staging

    @property
    def transfer_queue(self) -> cl.CommandQueue:
        """A second queue on the context: a streamed chunk's upload overlaps the last one's kernels."""
        if self._transfer_queue is None:
            self._transfer_queue = cl.CommandQueue(self.queue.context, self.queue.device)
        return self._transfer_queue

    def _plan_for(self, plan_or_uvw, freqs, flags) -> tuple:
        """``(plan, seconds planning took)``: a given plan is checked, uvw planned."""
        if isinstance(plan_or_uvw, Plan):
            if freqs is not None or flags is not None:
                raise ValueError("freqs and flags belong to the plan: pass them to plan(), not with a Plan")
            plan_or_uvw.check_usable_by(self.geometry, self.context)
            return plan_or_uvw, 0.0
        started = time.perf_counter()
        plan = self.plan(plan_or_uvw, freqs, flags)
        return plan, time.perf_counter() - started

    def strategy_for(self, npol: int):
        """``self.strategy``, or where the tuning table has values for ``npol`` polarisations
        (``[[<section>.when]] npol = ...``) a sibling strategy built with them (kept)."""
        if npol not in self._by_npol:
            name, facts = self.strategy.name, self.facts
            general = resolve_tuning(name, self._tuning, facts, precision=self.precision)
            specific = resolve_tuning(name, self._tuning, facts, npol=npol, precision=self.precision)
            changed = {k: v for k, v in specific.items() if general[k] != v}
            sibling = self.strategy
            if changed:
                sibling = self.strategies[self.label](self.queue, self.grid_size, self.kernels, self.precision,
                                                      {**(self._tuning or {}), **changed}, self._binary)
                sibling.deterministic = self.strategy.deterministic
            self._by_npol[npol] = sibling
        return self._by_npol[npol]

    def arranged(self, plan: Plan, npol: int) -> DevicePlan:
        """The order of ``plan`` for the strategy of ``npol`` polarisations, with an analytic
        kernel's offsets in that order (made once, kept in the plan)."""
        strategy = self.strategy_for(npol)
        key = (strategy.arrangement_key(), npol)
        return plan.arranged(key, lambda p: strategy.with_fraction(strategy.arrange(p, npol), p))

    # -- device buffers ---------------------------------------------------------

    def _grid_bytes(self, npol: int) -> int:
        return npol * self.grid_size ** 2 * np.dtype(PRECISIONS[self.precision][1]).itemsize

    def _check_grid_fits(self, npol: int) -> None:
        facts = self.facts
        need = self._grid_bytes(npol)
        if need > facts.max_allocation or need > facts.global_memory:
            raise DeviceCapabilityError(
                f"a {npol}-polarisation {self.grid_size}^2 {self.precision} grid needs "
                f"{need / 2**30:.2f} GiB; {facts.name} allows {facts.max_allocation / 2**30:.2f} GiB "
                f"per buffer ({facts.global_memory / 2**30:.2f} GiB in all): grid fewer polarisations "
                f"per call, in single precision, or on a smaller grid")

    def grid_buffer(self, npol: int) -> cl.Buffer:
        """The device grid for ``npol`` polarisations, kept between calls."""
        if npol not in self._grid_buffers:
            self._check_grid_fits(npol)
            self._grid_buffers[npol] = cl.Buffer(self.queue.context, cl.mem_flags.READ_WRITE,
                                                 self._grid_bytes(npol))
        return self._grid_buffers[npol]

    def scratch(self, name: str, nbytes: int) -> cl.Buffer:
        """A device buffer of at least ``nbytes`` kept between calls (one per name)."""
        nbytes = max(int(nbytes), 16)
        buffer = self._scratch.get(name)
        if buffer is None or buffer.size < nbytes:
            buffer = self._scratch[name] = cl.Buffer(self.queue.context, cl.mem_flags.READ_WRITE, nbytes)
        return buffer

    def check_device_grid(self, grid: cla.Array, name: str) -> int:
        """npol of a device grid given as ``out`` or input, or a clear error."""
        if grid.context.int_ptr != self.queue.context.int_ptr:
            raise ValueError(f"{name} is a device array of another OpenCL context than the operator's")
        if (grid.ndim != 3 or grid.shape[1:] != (self.grid_size,) * 2 or grid.shape[0] not in (1, 2, 4)
                or grid.dtype != self.strategy.complex_dtype or not grid.flags.c_contiguous):
            raise ValueError(f"{name} must be a C-contiguous {np.dtype(self.strategy.complex_dtype)} array of "
                             f"shape (npol, {self.grid_size}, {self.grid_size}), npol 1, 2 or 4; got "
                             f"{grid.dtype} {grid.shape}")
        return grid.shape[0]

    # -- reports ------------------------------------------------------------------

    def _keep_report(self, counts: dict, started: float, plan_seconds: float, kernel_events: list) -> dict:
        """The counts plus who did the work and how long it took; kept in ``last_report``."""
        report = dict(counts, method=self.method, interpolation=self.interpolation, precision=self.precision,
                      device=self.device.name.strip(), plan_seconds=plan_seconds,
                      kernel_seconds=kernel_seconds(kernel_events),
                      total_seconds=time.perf_counter() - started)
        self.last_report = report
        return report


def kernel_seconds(events):
    """Device time of finished events, from OpenCL profiling; None on a queue without it."""
    try:
        return sum((e.profile.end - e.profile.start) * 1e-9 for e in events)
    except cl.Error:   # PROFILING_INFO_NOT_AVAILABLE: the caller's queue does not profile
        return None


def rows_of(a, shape: tuple, rows: slice):
    """Rows ``rows`` of ``a`` (None, or an array broadcasting to ``shape`` or to ``shape``
    without its last axis: weights and flags per visibility or per sample)."""
    if a is None:
        return None
    a = np.asarray(a)
    target = shape if a.ndim == len(shape) else shape[:-1]
    try:
        return np.broadcast_to(a, target)[rows]
    except ValueError:
        return a     # the call refuses it by name


def with_values(device_plan: DevicePlan, vis: cl.Buffer) -> DevicePlan:
    """The arranged plan with one call's values (the arrangement itself stays untouched)."""
    return replace(device_plan, vis=vis)
