"""Rows for the w-stacking source, for CPUs (``clgrid/cl_kernels/rows_stacked.cl``): every
point's kernel values computed once per plan, spreading owner-computes with one work-item
per grid row and no atomics (`StackedRowsGridding`), interpolation one work-item per point
from the same values (`StackedRowsDegridding`).  On CPU devices float atomics are
compare-and-swap loops; here nothing is atomic and the grid is the same bits every run.
Plans are arranged by (first plane, first u cell): ``starts[g][u]`` is where the points with
first plane g and first u cell u begin.

What a point keeps (on a CPU device, host memory; `settle`, after the engine released the
plan in the caller's order): W kernel values along u and W along v, with w the argument of
its first plane's value, from which its value on each plane is written per plane
(``plane_values``) and interpolation evaluates it, and its first cells in an int2.  The
kernel values are kept in float where the engine allows it (``tap_single``:
`clgrid.sources.accuracy.float_taps_allowed`; then the engine keeps the value and phase in
float too) and used in the operator's precision.  Evaluating the values along u in the
kernels as well kept less but spread slower on PoCL (docs/benchmarks/large.md)."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from ..planning.stacking import PlaneOrder, PointPlan
from ..sources.accuracy import float_taps_allowed
from .stacked import StackedStrategy, launch_size

__all__ = ["StackedRowsGridding", "StackedRowsDegridding"]


class _StackedRows(StackedStrategy):
    name = "rows_stacked"
    template = "rows_stacked.cl"
    counts = ("rows_work_group",)
    work_group_parameters = ("rows_work_group",)
    tap_single = False     # kernel values kept in float (the engine sets it where epsilon allows)

    @staticmethod
    def work_group_shape(tuning: dict) -> tuple:
        return (tuning["rows_work_group"],)

    def plane_order(self) -> PlaneOrder:
        return PlaneOrder("rows", self.nu, self.nv)

    @classmethod
    def program_parameters(cls, tuning: dict, precision: str, npol: int, grid_size, kernels) -> dict:
        return dict(super().program_parameters(tuning, precision, npol, grid_size, kernels),
                    **cls.float_taps_parameters(False))

    @classmethod
    def keeps_float_taps(cls, choice, precision: str, ndim: int, epsilon: float | None) -> bool:
        """In double precision where `clgrid.sources.accuracy.float_taps_allowed` allows it
        at ``epsilon`` (in single they are float already)."""
        return precision == "double" and float_taps_allowed(choice, precision, ndim, epsilon)

    @classmethod
    def float_taps_parameters(cls, single: bool) -> dict:
        return {"tap_single": bool(single), "value_single": bool(single)}

    def template_params(self, npol: int) -> dict:
        return dict(super().template_params(npol), **self.float_taps_parameters(self.tap_single))

    def settle(self, points: PointPlan) -> PointPlan:
        """Every point's kernel values (``extra["taps"]``: W along u, W along v), with w the
        argument of its first plane's value (``extra["wz"]``) and room for its value on the
        plane being spread (``extra["wv"]``), and its first cells in an int2 (``extra["cell"]``:
        first v cell; first u cell + first plane * (nu + 1), below the layout's key count,
        2^31); the offsets and the int4 first cells (``frac``, ``first``), which nothing else
        here reads, are released, and with float values the phases go to float too."""
        n = max(points.num_vis, 1)
        context, mf = self.queue.context, cl.mem_flags
        k, real = self.kernels, np.dtype(self.real_dtype).itemsize
        size = 4 if self.tap_single else real
        tap = cl.Buffer(context, mf.READ_WRITE, n * 2 * k.width * size)
        wz = cl.Buffer(context, mf.READ_WRITE, (n if k.use_w else 1) * real)
        wv = cl.Buffer(context, mf.READ_WRITE, (n if k.use_w else 1) * size)
        cell = cl.Buffer(context, mf.READ_WRITE, n * 8)
        if points.num_vis:
            wg = self.tuning["rows_work_group"]
            self.program("compute_taps")(self.queue, (launch_size(points.num_vis, wg),), (wg,), points.frac, tap,
                                         wz, points.first, cell, np.int32(self.nu), np.int32(points.num_vis))
            self.queue.finish()
        for name in ("frac", "first"):
            getattr(points, name).release()
            setattr(points, name, None)
        points.extra.update(taps=tap, wz=wz, wv=wv, cell=cell)
        if self.tap_single and points.phase is not None and np.dtype(self.complex_dtype) == np.complex128:
            # the phases in float too (value_types.cl), as the engine keeps the values
            phase = cla.Array(self.queue, (n,), np.complex128, data=points.phase).astype(np.complex64)
            points.phase.release()
            points.phase = phase.data
        return points


class StackedRowsGridding(_StackedRows):
    """Spread: one work-item per grid row adds every footprint row that falls in it."""

    def grid(self, points: PointPlan, npol: int, grid_buffer, wait_for=None, plane: int = 0) -> list:
        """Enqueue the spreading of ``points`` (with their values) onto ``plane`` of the grid."""
        start, count = self.active(points, plane)
        if count == 0:
            return []
        wg = self.tuning["rows_work_group"]
        events = []
        if self.kernels.use_w:          # the points' values on this plane, into their slot
            events.append(self.program("plane_values")(
                self.queue, (launch_size(count, wg),), (wg,), points.extra["cell"], points.extra["wz"],
                points.extra["wv"], np.int32(self.nu), np.int32(plane), np.int32(start), np.int32(count),
                wait_for=wait_for))
        events.append(self.program("spread_rows")(
            self.queue, (launch_size(self.nu, wg),), (wg,), points.extra["cell"], points.extra["taps"],
            points.extra["wv"], points.vis, grid_buffer, points.starts, np.int32(self.nu), np.int32(self.nv),
            np.int32(plane), wait_for=None if events else wait_for))
        return events


class StackedRowsDegridding(_StackedRows):
    """Interpolate: one work-item per point, from its kernel values."""

    def degrid(self, points: PointPlan, npol: int, grid_buffer, wait_for=None, plane: int = 0) -> list:
        """Enqueue the interpolation of ``plane`` of the grid at ``points``, added to their values."""
        start, count = self.active(points, plane)
        if count == 0:
            return []
        wg = self.tuning["rows_work_group"]
        return [self.program("interp_taps")(
            self.queue, (launch_size(count, wg),), (wg,), points.extra["cell"], points.extra["taps"],
            points.extra["wz"], grid_buffer,
            points.vis,
            np.int32(self.nu), np.int32(self.nv), np.int32(plane), np.int32(start), np.int32(count),
            wait_for=wait_for)]
