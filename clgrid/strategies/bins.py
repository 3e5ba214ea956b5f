"""Bins (cuFINUFFT's "subproblem" method, Shih et al. 2021) for the w-stacking source: the
points whose first cell lies in one bin of ``bin_u x bin_v`` cells, cut into pieces of at
most ``bins_subproblem``, each piece spread by one work-group into a tile of local memory
(the bin and the W - 1 cells its footprints reach beyond it) and the tile added to the grid
once with float atomics (``clgrid/cl_kernels/grid_bins.cl``).  The GPU imaging operator's
spread.  Plans are arranged by (first plane, bin) on the device, and each plane's
work-groups listed as (bin, piece) pairs."""

from __future__ import annotations

import numpy as np

import pyopencl as cl

from ..device.codegen import launch
from ..device.scan import ExclusiveScan
from ..planning.stacking import PlaneOrder, PointPlan
from .stacked import StackedStrategy

__all__ = ["BinsGridding"]

# What the OpenCL specification promises every device of local memory: emitted programs,
# made without a device, size their batch for it.
MIN_LOCAL_MEMORY = 32 * 1024


class BinsGridding(StackedStrategy):
    """Bins of cells spread in local memory and flushed once (grid_bins.cl)."""

    name = "bins"
    template = "grid_bins.cl"
    atomics = True
    counts = ("bin_u", "bin_v", "bins_work_group", "bins_subproblem")
    work_group_parameters = ("bins_work_group",)

    def __init__(self, queue, grid_size, kernels, precision, tuning=None, binary=None):
        super().__init__(queue, grid_size, kernels, precision, tuning, binary)
        if not self.tuning["bins_batch"]:
            self.tuning["bins_batch"] = self.batch(self.tuning, kernels, precision, self.facts.local_memory)

    @staticmethod
    def work_group_shape(tuning: dict) -> tuple:
        return (tuning["bins_work_group"],)

    @staticmethod
    def batch(tuning: dict, kernels, precision: str, local_memory: int) -> int:
        """Points held in local memory at a time: one per work-item, or fewer where the tile
        and the batch would not fit (a wide kernel in double)."""
        real = 8 if precision == "double" else 4
        w = kernels.width
        tile = (tuning["bin_u"] + w - 1) * (tuning["bin_v"] + w - 1) * 2 * real
        per_point = 2 * real + 2 * (w | 1) * real + 8
        batch = min(tuning["bins_work_group"], (local_memory - tile - 256) // per_point)
        if batch < 1:
            raise ValueError(f"tuning [bins] bin_u={tuning['bin_u']}, bin_v={tuning['bin_v']}: the tile of "
                             f"{tile / 1024:.1f} KiB for a {w}^2 kernel leaves no room in the device's "
                             f"{local_memory / 1024:.1f} KiB of local memory; use smaller bins")
        return int(batch)

    @classmethod
    def program_parameters(cls, tuning, precision, npol, grid_size, kernels) -> dict:
        tuning = dict(tuning)
        if not tuning["bins_batch"]:
            tuning["bins_batch"] = cls.batch(tuning, kernels, precision, MIN_LOCAL_MEMORY)
        layout = PlaneOrder("bins", int(grid_size[0]), int(grid_size[1]), tuning["bin_u"], tuning["bin_v"])
        params = super().program_parameters(tuning, precision, npol, grid_size, kernels)
        return dict(params, keys_per_plane=layout.keys_per_plane, wg=tuning["bins_work_group"],
                    subproblem=tuning["bins_subproblem"], batch=tuning["bins_batch"])

    def plane_order(self) -> PlaneOrder:
        return PlaneOrder("bins", self.nu, self.nv, self.tuning["bin_u"], self.tuning["bin_v"])

    def arrange(self, plan, npol: int = 1) -> PointPlan:
        """By (first plane, bin), with each plane's work-groups (`add_tables`)."""
        return self.add_tables(super().arrange(plan, npol), plan.geometry).wait_ready()

    def add_tables(self, points: PointPlan, geometry) -> PointPlan:
        """``points`` (arranged by (first plane, bin) for ``geometry``) with each plane's
        work-groups: (bin, piece) for every piece of at most ``bins_subproblem`` of the points
        with a tap on the plane whose first cell is in the bin, listed on the device;
        ``extra["jobs"][p]`` (host) is where plane p's begin, the last entry where they end,
        once `PointPlan.wait_ready` (the copy back is not waited for here; the table is
        sized for the most pieces the points can make)."""
        k, bins = self.kernels, self.plane_order().keys_per_plane
        num_planes = points.plane_start.size - 1       # the plan's stack (a slab's, where it has one)
        n = num_planes * bins
        if n >= 2 ** 31 - 1:
            raise ValueError(f"{n} (plane, bin) pairs overflow 32-bit counts: use larger bins")
        context, mf = self.queue.context, cl.mem_flags
        reach = k.width if k.use_w else 1
        pieces = cl.Buffer(context, mf.READ_WRITE, 4 * (n + 1))
        first_job = cl.Buffer(context, mf.READ_WRITE, 4 * (n + 1))
        program_kernel = self.set_up_kernel
        launch(program_kernel("count_pieces"), self.queue, n + 1, points.starts, np.int32(num_planes),
               np.int32(reach), pieces)
        scan = ExclusiveScan.of(self.queue)
        scan(pieces, first_job, n + 1)
        # each entry's points (at most reach * num_vis over all entries) make ceil(count / piece)
        # pieces: at most reach * num_vis / piece, plus one for each entry that has points
        most = reach * points.num_vis // self.tuning["bins_subproblem"] + min(n, reach * points.num_vis) + 1
        table = cl.Buffer(context, mf.READ_WRITE, 8 * most)
        launch(program_kernel("list_jobs"), self.queue, n, pieces, first_job, np.int32(n), table)
        jobs = np.empty(num_planes + 1, np.int32)
        points.extra["ready"] = scan.every_nth(first_job, bins, num_planes + 1, jobs)
        points.extra.setdefault("after_ready", []).append(lambda: points.extra.update(jobs=jobs.tolist()))
        points.extra.update(subproblems=table)
        return points

    def grid(self, points: PointPlan, npol: int, grid_buffer, wait_for=None, plane: int = 0) -> list:
        """Enqueue the spreading of ``points`` (with their values) onto ``plane`` of the grid."""
        jobs = points.extra["jobs"]
        groups = jobs[plane + 1] - jobs[plane]
        if groups == 0:
            return []
        wg = self.tuning["bins_work_group"]
        return [self.program("spread_bins")(
            self.queue, (groups * wg,), (wg,), points.first, points.frac, points.vis, grid_buffer, points.starts,
            points.extra["subproblems"], np.int32(jobs[plane]), np.int32(self.nu), np.int32(self.nv),
            np.int32(plane), wait_for=wait_for)]
