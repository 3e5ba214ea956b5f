"""The w-stacking FPGA strategies (``clgrid/cl_kernels/fpga_stacked.cl``): the imaging
operator's spread (`FpgaStackedGridding`, "fpga_stacked") and interpolation
(`FpgaStackedDegridding`, "degrid_fpga_stacked") as single work-item pipelines for Intel's
FPGA SDK for OpenCL, with the exponential-of-semicircle kernel evaluated in the pipeline.
As the W-projection FPGA strategies (`clgrid.strategies.fpga`) do, they walk the points
tile by tile, in an order made on the host (an FPGA has no use for a device sort): by first
plane, then by the tile of ``tile x tile`` cells holding the first cell; each such run is
accumulated in (read from) an on-chip copy of its tile plus the W - 1 cells its footprints
reach.  On any other OpenCL device they run as a functional emulation, which is how they
are tested here; ``clgrid emit --imaging --method fpga`` writes them for ``aoc``."""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from ..planning.stacking import PlaneOrder, PointPlan
from .base import read_only_buffer
from .stacked import StackedStrategy

__all__ = ["FpgaStackedGridding", "FpgaStackedDegridding"]


class _FpgaStacked(StackedStrategy):
    template = "fpga_stacked.cl"
    counts = ("tile", "unroll_u")
    stable = True          # the host order of an FPGA pipeline: the same every run
    arranges_by_layout = False     # its runs are made on the host (arrange)

    def plane_order(self) -> PlaneOrder:
        return PlaneOrder("bins", self.nu, self.nv, self.tuning["tile"], self.tuning["tile"])

    def arrangement_key(self) -> tuple:
        return (type(self).__name__, self.precision, self.tuning["tile"])

    @property
    def padded_side(self) -> int:
        """Side of the on-chip tile: the tile plus the cells its footprints reach beyond it."""
        return self.tuning["tile"] + self.kernels.width - 1

    def _check_on_chip(self, copies: int) -> None:
        side = self.padded_side
        self.check_local_memory(copies * side * side * np.dtype(self.complex_dtype).itemsize,
                                f"{copies} on-chip tiles of {side}^2 cells: lower the tuning parameter 'tile'")

    def arrange(self, plan, npol: int = 1) -> PointPlan:
        """By (first plane, tile of the first cell), on the host, with ``extra["runs"]``:
        (first cell u, v of the tile, start, end) of every non-empty run, plane-major, and
        ``extra["run_start"][g]`` (host) where first plane g's runs begin."""
        self.stable = True
        points = super().arrange(plan, npol)
        layout = self.plane_order()
        num_planes = points.plane_start.size - 1       # the plan's stack (a slab's, where it has one)
        starts = np.empty(num_planes * layout.keys_per_plane + 1, np.int32)
        cl.enqueue_copy(self.queue, starts, points.starts)
        counts = np.diff(starts)
        busy = np.flatnonzero(counts)
        tile = self.tuning["tile"]
        bin_ = busy % layout.keys_per_plane
        runs = np.column_stack([(bin_ // layout.bins[1]) * tile, (bin_ % layout.bins[1]) * tile,
                                starts[busy], starts[busy] + counts[busy]]).astype(np.int32)
        plane_of = busy // layout.keys_per_plane
        run_start = np.searchsorted(plane_of, np.arange(num_planes + 1)).tolist()
        points.extra.update(runs=read_only_buffer(self.queue.context, runs if runs.size else np.zeros((1, 4), np.int32)),
                            run_start=run_start)
        return points

    def _launch(self, name: str, points: PointPlan, source, target, plane: int, wait_for) -> list:
        run_start, k = points.extra["run_start"], self.kernels
        lo = run_start[max(0, plane - k.width + 1) if k.use_w else plane]
        hi = run_start[plane + 1]
        if hi == lo:
            return []
        return [self.program(name)(self.queue, (1,), (1,), points.first, points.frac, source, target,
                                   points.extra["runs"], np.int32(lo), np.int32(hi), np.int32(self.nu),
                                   np.int32(self.nv), np.int32(plane), wait_for=wait_for)]


class FpgaStackedGridding(_FpgaStacked):
    """Spread, a run at a time, into a banked on-chip tile added to the grid once per run."""

    name = "fpga_stacked"
    counts = _FpgaStacked.counts + ("banks",)

    def grid(self, points: PointPlan, npol: int, grid_buffer, wait_for=None, plane: int = 0) -> list:
        """Enqueue the spreading of ``points`` (with their values) onto ``plane`` of the grid."""
        self._check_on_chip(self.tuning["banks"])
        return self._launch("spread_fpga", points, points.vis, grid_buffer, plane, wait_for)


class FpgaStackedDegridding(_FpgaStacked):
    """Interpolate, a run at a time, from an on-chip copy of its tile."""

    name = "degrid_fpga_stacked"
    counts = _FpgaStacked.counts + ("shift_depth",)

    def degrid(self, points: PointPlan, npol: int, grid_buffer, wait_for=None, plane: int = 0) -> list:
        """Enqueue the interpolation of ``plane`` of the grid at ``points``, added to their values."""
        self._check_on_chip(1)
        return self._launch("interp_fpga", points, grid_buffer, points.vis, plane, wait_for)
