"""One work-item per point, for the w-stacking source (``clgrid/cl_kernels/points.cl``):
its 2W kernel values in registers, its W x W footprint added to one w-plane with float
atomics (`PointGridding`: "points") or gathered from it (`PointDegridding`:
"degrid_points", the GPU imaging operator's interpolation).  Any order of the points is
correct; plans are arranged by (first plane, bin of cells) for the caches."""

from __future__ import annotations

import numpy as np

from ..planning.stacking import PointPlan
from .stacked import StackedStrategy, launch_size

__all__ = ["PointGridding", "PointDegridding"]


class _Points(StackedStrategy):
    template = "points.cl"
    counts = ("points_work_group",)
    work_group_parameters = ("points_work_group",)

    @staticmethod
    def work_group_shape(tuning: dict) -> tuple:
        return (tuning["points_work_group"],)

    def _launch(self, name: str, points: PointPlan, source, target, plane: int, wait_for) -> list:
        start, count = self.active(points, plane)
        if count == 0:
            return []
        wg = self.tuning["points_work_group"]
        return [self.program(name)(self.queue, (launch_size(count, wg),), (wg,), points.first, points.frac, source,
                                   target, np.int32(self.nu), np.int32(self.nv), np.int32(plane), np.int32(start),
                                   np.int32(count), wait_for=wait_for)]


class PointGridding(_Points):
    """Spread: a work-item per point, float atomic adds."""

    name = "points"
    atomics = True

    def grid(self, points: PointPlan, npol: int, grid_buffer, wait_for=None, plane: int = 0) -> list:
        """Enqueue the spreading of ``points`` (with their values) onto ``plane`` of the grid."""
        return self._launch("spread", points, points.vis, grid_buffer, plane, wait_for)


class PointDegridding(_Points):
    """Interpolate: a work-item per point gathers its footprint; each plane's share is added
    to the point's value."""

    name = "degrid_points"

    def degrid(self, points: PointPlan, npol: int, grid_buffer, wait_for=None, plane: int = 0) -> list:
        """Enqueue the interpolation of ``plane`` of the grid at ``points``, added to their values."""
        return self._launch("interp", points, grid_buffer, points.vis, plane, wait_for)
