"""The w-stacking plan in the orders the imaging operator's spreads want (`arrange`).

Spreading wants the points of one w-plane together, and within a plane in the order
its kernel walks the grid: by first u cell for the CPUs' owner-computes rows
(``PlaneOrder("rows")``), by bin of cells for the GPUs' one work-group per bin
(``PlaneOrder("bins")``).  Both are a sort of the plan (`clgrid.planning.plan.plan_stacked`) by
a small integer key, a counting sort on the device (`clgrid.device.counting_sort`, which
also gives where each key's run starts: the row and bin tables the kernels read), then the
plan's points taken into that order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyopencl as cl

import pyopencl.array as cla

from ..device.codegen import kernel as codegen_kernel, launch
from ..device.counting_sort import CountingSort
from ..device.scan import ExclusiveScan
from .plan import stacked_program

__all__ = ["PlaneOrder", "PointPlan", "arrange"]


@dataclass(frozen=True)
class PlaneOrder:
    """The order of the points within a w-plane: ``"rows"`` (by first u cell) or ``"bins"``
    (by the ``bin_u`` x ``bin_v`` bin of cells holding the first cell)."""

    kind: str
    nu: int
    nv: int
    bin_u: int = 1
    bin_v: int = 1

    def __post_init__(self):
        if self.kind not in ("rows", "bins"):
            raise ValueError(f"layout must be 'rows' or 'bins', got {self.kind!r}")

    @property
    def bins(self) -> tuple:
        return -(-self.nu // self.bin_u), -(-self.nv // self.bin_v)

    @property
    def keys_per_plane(self) -> int:
        # rows: nu + 1 so that the table of starts holds each plane's end as its row nu
        if self.kind == "rows":
            return self.nu + 1
        return self.bins[0] * self.bins[1]

    def keys(self, first: np.ndarray) -> np.ndarray:
        """The sort key of first cells (n, 3): plane, then place in the plane."""
        plane = first[:, 2].astype(np.int64) * self.keys_per_plane
        if self.kind == "rows":
            return plane + first[:, 0]
        return plane + (first[:, 0] // self.bin_u) * self.bins[1] + first[:, 1] // self.bin_v


@dataclass
class PointPlan:
    """The kept visibilities in key order, on the device: ``first`` (int4: first u cell, first
    v cell, both modulo the grid, first plane), ``frac`` (real4: the first taps' offsets
    from the point, in cells and planes, in [-W/2, -W/2 + 1)), ``src`` (the sample's index
    in the caller's (nrow * nchan) array; -index - 1 where the point moved to -uvw and is
    conjugated), ``phase`` (the factor gridding applies; None when there is none) and
    ``starts`` (where each key's run begins: the layout's row or bin table).
    ``plane_start[p]`` (host) is where the points whose first plane is p begin (the last
    entry: where the last plane's end)."""

    first: cl.Buffer
    frac: cl.Buffer
    src: cl.Buffer
    phase: cl.Buffer | None
    starts: cl.Buffer
    plane_start: np.ndarray
    num_vis: int
    planned_on: str
    vis: object = None           # one call's values in this order (a cl.Buffer), or None
    extra: dict = field(default_factory=dict)   # what a strategy adds (tables, kernel values)

    def wait_ready(self) -> "PointPlan":
        """Wait for the host copies of the tables that were enqueued without waiting
        (``extra["ready"]``, the last of them: the queue is in order), then run the checks
        and conversions that read them (``extra["after_ready"]``); returns self."""
        ready = self.extra.pop("ready", None)
        if ready is not None:
            ready.wait()
        for then in self.extra.pop("after_ready", []):
            then()
        self.plane_start = np.asarray(self.plane_start, np.int64)
        return self

    def active(self, plane: int, support: int) -> tuple[int, int]:
        """(start, count) of the visibilities with a tap on ``plane``."""
        lo = self.plane_start[max(0, plane - support + 1)]
        hi = self.plane_start[min(plane + 1, len(self.plane_start) - 1)]
        return int(lo), int(hi - lo)


def _key_expression(layout: PlaneOrder) -> str:
    """`PlaneOrder.keys` as a C expression of the packed plan ``p`` (clgrid/cl_kernels/counting_sort.cl)."""
    plane = f"(p.w & 0x7fffffff) * {layout.keys_per_plane}"
    if layout.kind == "rows":
        return f"{plane} + p.x"
    return f"{plane} + (p.x / {layout.bin_u}) * {layout.bins[1]} + p.y / {layout.bin_v}"


def arrange(plan, layout: PlaneOrder, stable: bool = False) -> PointPlan:
    """``plan`` (a w-stacking `clgrid.planning.plan.Plan`) in the order of ``layout``, on the
    device: a counting sort by key, whose order within a key follows its atomics, or with
    ``stable`` a sort on the host that keeps the caller's order within a key (the same
    order every run: deterministic images)."""
    g, queue = plan.geometry, plan.queue
    n = plan.num_kept
    num_keys = g.num_planes * layout.keys_per_plane
    if not 0 < num_keys < 2 ** 31 - 1:
        raise ValueError(f"{num_keys} sort keys ({g.num_planes} w-planes of {layout.keys_per_plane}) overflow "
                         f"32-bit counts: use larger bins or fewer w-planes")
    context, mf = queue.context, cl.mem_flags
    starts = cl.Buffer(context, mf.READ_WRITE, 4 * (num_keys + 1))
    double = np.dtype(plan.fraction.dtype) == np.float64
    program = stacked_program(context, g, fold=g.do_wgridding, double=double)
    if stable or n == 0:
        packed = plan.packed.get()[:n]
        first = packed.copy()
        first[:, 3] &= 0x7FFFFFFF
        keys = layout.keys(first[:, [0, 1, 3]])
        order = np.argsort(keys, kind="stable").astype(np.int32)
        cl.enqueue_copy(queue, starts, np.concatenate([[0], np.cumsum(np.bincount(keys, minlength=num_keys))])
                        .astype(np.int32))
        order_d = cla.to_device(queue, order if n else np.zeros(1, np.int32))
    else:
        index = cla.arange(queue, n, dtype=np.int32)
        _, order_buffer, _ = CountingSort(queue, _key_expression(layout), num_keys)(plan.packed.data, index.data,
                                                                                    n, starts=starts)
        order_d = cla.Array(queue, (n,), np.int32, data=order_buffer)
    real, cplx = plan.fraction.dtype, None if plan.phase is None else plan.phase.dtype
    m = max(n, 1)
    first_d = cl.Buffer(context, mf.READ_WRITE, 16 * m)
    frac_d = cl.Buffer(context, mf.READ_WRITE, 4 * np.dtype(real).itemsize * m)
    src_d = cl.Buffer(context, mf.READ_WRITE, 4 * m)
    phase_d = None if cplx is None else cl.Buffer(context, mf.READ_WRITE, np.dtype(cplx).itemsize * m)
    if n:
        launch(codegen_kernel(program, "take_stacked"),
               queue, n, order_d.data, plan.sample.data, plan.packed.data, plan.fraction.data,
               None if plan.phase is None else plan.phase.data, np.int32(n), np.int32(plan.values_by_position),
               first_d, frac_d, src_d, phase_d)
    plane_start = every_nth(queue, starts, layout.keys_per_plane, g.num_planes + 1).astype(np.int64)
    return PointPlan(first_d, frac_d, src_d, phase_d, starts, plane_start, n, plan.planned_on)


def every_nth(queue, values: cl.Buffer, step: int, count: int) -> np.ndarray:
    """``values[k * step]`` for k in [0, count), to the host (int32), waited for: a small
    download instead of the whole table (`clgrid.device.scan.ExclusiveScan.every_nth`)."""
    host = np.empty(count, np.int32)
    ExclusiveScan.of(queue).every_nth(values, step, count, host).wait()
    return host
