"""The tiled strategy over a w-stacking plan: the imaging operator's GPU spread.

The same template as W-projection's (``clgrid/cl_kernels/grid_tiled.cl``, `TiledGridding`),
with the w-stacking kernel source and the "pieces" schedule (``tile_pieces.cl``): the points
whose first cell lies in one bin of ``bin_u x bin_v`` cells are cut into pieces of at most
``piece``, each spread by one work-group into a tile of local memory (the bin and the
W - 1 cells its footprints reach beyond it: W-projection's windows, which hold a footprint
whole) and the tile added to the grid once with float atomics (cuFINUFFT's "subproblem"
method, Shih et al. 2021).  The arrangement is the plan's, by (first plane, bin), made on
the device (`clgrid.planning.stacking`), and each plane's work-groups are listed there as
(bin, piece) pairs."""

from __future__ import annotations

import numpy as np

import pyopencl as cl

from ..device.codegen import launch
from ..device.scan import ExclusiveScan
from ..device.tuning import TuningTableError
from ..planning.plan import stacked_program
from ..planning.stacking import PlaneOrder, PointPlan, every_nth
from .stacked import StackedStrategy
from .tiled import tile_local_memory

__all__ = ["TiledStackedGridding"]

# What the OpenCL specification promises every device of local memory: emitted programs,
# made without a device, size their batch for it.
MIN_LOCAL_MEMORY = 32 * 1024


class TiledStackedGridding(StackedStrategy):
    """Tiles of local memory, one per (bin, piece), flushed once (grid_tiled.cl, "pieces")."""

    name = "tiled_stacked"
    template = "grid_tiled.cl"
    atomics = True
    counts = ("bin_u", "bin_v", "footprint_wg", "piece")
    work_group_parameters = ("footprint_wg",)

    def __init__(self, queue, grid_size, kernels, precision, tuning=None, binary=None):
        super().__init__(queue, grid_size, kernels, precision, tuning, binary)
        if not self.tuning["batch"]:
            self.tuning["batch"] = self.batch(self.tuning, kernels, precision, self.facts.local_memory)

    def check_tuning(self) -> None:
        t = self.tuning
        if t["mapping"] != "cells":
            raise TuningTableError(f"tiled_stacked: mapping = {t['mapping']!r}; the w-stacking tiles take "
                                   f"mapping 'cells' (their footprints lie whole in the tile)")
        if t["batch"] < 0:
            raise TuningTableError(f"tiled_stacked: batch = {t['batch']} must be >= 0")

    @staticmethod
    def work_group_shape(tuning: dict) -> tuple:
        return (tuning["footprint_wg"], 1)

    @staticmethod
    def local_memory(tuning: dict, kernels, precision: str, batch: int) -> int:
        """Bytes of local memory grid_tiles takes with ``batch`` entries at a time."""
        w = kernels.width
        return tile_local_memory(tuning["mapping"], batch, 1, precision, False, evaluated=True,
                                 tile_cells=(tuning["bin_u"] + w - 1) * (tuning["bin_v"] + w - 1),
                                 staged_reals=2 * (w | 1), chunks=False)

    @classmethod
    def batch(cls, tuning: dict, kernels, precision: str, local_memory: int) -> int:
        """Points held in local memory at a time: one per work-item, or fewer where the tile
        and the batch would not fit (a wide kernel in double)."""
        wg = tuning["footprint_wg"]
        fixed = cls.local_memory(tuning, kernels, precision, 0)
        per_point = cls.local_memory(tuning, kernels, precision, 1) - fixed
        batch = min(wg, (local_memory - fixed - 256) // per_point)
        if batch < 1:
            w = kernels.width
            raise ValueError(f"tuning [tiled_stacked] bin_u={tuning['bin_u']}, bin_v={tuning['bin_v']}: the tile "
                             f"of {fixed / 1024:.1f} KiB for a {w}^2 kernel leaves no room in the device's "
                             f"{local_memory / 1024:.1f} KiB of local memory; use smaller bins")
        return int(batch)

    @classmethod
    def program_parameters(cls, tuning, precision, npol, grid_size, kernels) -> dict:
        tuning = dict(tuning)
        if not tuning["batch"]:
            tuning["batch"] = cls.batch(tuning, kernels, precision, MIN_LOCAL_MEMORY)
        layout = PlaneOrder("bins", int(grid_size[0]), int(grid_size[1]), tuning["bin_u"], tuning["bin_v"])
        params = super().program_parameters(tuning, precision, npol, grid_size, kernels)
        wg_u, wg_v = cls.work_group_shape(tuning)
        return dict(params, npol=1, oversample=1, keys_per_plane=layout.keys_per_plane, wg_u=wg_u, wg_v=wg_v,
                    schedule="pieces", periodic=True, plan="plan_stacked.cl", source=kernels.device_source(),
                    grid_size=(int(grid_size[0]), int(grid_size[1])), regsz=0, shmsz=0, max_width=kernels.width,
                    footprint_unroll=1)

    def layout(self) -> PlaneOrder:
        return PlaneOrder("bins", self.nu, self.nv, self.tuning["bin_u"], self.tuning["bin_v"])

    @property
    def reach(self) -> int:
        """The planes a point spans: W with w, else 1."""
        return self.kernels.width if self.kernels.use_w else 1

    def arrange(self, plan, npol: int = 1) -> PointPlan:
        """By (first plane, bin), with each plane's work-groups: (bin, piece) for every piece
        of at most ``piece`` of the points with a tap on the plane whose first cell is in the
        bin, listed on the device; ``extra["jobs"][p]`` (host) is where plane p's begin, the
        last entry where they end."""
        points = super().arrange(plan, npol)
        k, bins = self.kernels, self.layout().keys_per_plane
        num_planes = points.plane_start.size - 1       # the plan's stack (a slab's, where it has one)
        n = num_planes * bins
        if n >= 2 ** 31 - 1:
            raise ValueError(f"{n} (plane, bin) pairs overflow 32-bit counts: use larger bins")
        context, mf = self.queue.context, cl.mem_flags
        pieces = cl.Buffer(context, mf.READ_WRITE, 4 * (n + 1))
        first_job = cl.Buffer(context, mf.READ_WRITE, 4 * (n + 1))
        program_kernel = self.program
        launch(program_kernel("count_pieces"), self.queue, n + 1, points.starts, np.int32(num_planes),
               np.int32(k.width if k.use_w else 1), pieces)
        ExclusiveScan(self.queue)(pieces, first_job, n + 1)
        jobs = every_nth(self.queue, stacked_program(context, plan.geometry, plan.geometry.do_wgridding,
                                                     self.precision == "double"),
                         first_job, bins, num_planes + 1)
        table = cl.Buffer(context, mf.READ_WRITE, 8 * max(int(jobs[-1]), 1))
        launch(program_kernel("list_jobs"), self.queue, n, pieces, first_job, np.int32(n), table)
        points.extra.update(subproblems=table, jobs=jobs.tolist())
        return points

    def grid(self, points: PointPlan, npol: int, grid_buffer, wait_for=None, plane: int = 0) -> list:
        """Enqueue the spreading of ``points`` (with their values) onto ``plane`` of the grid."""
        jobs = points.extra["jobs"]
        groups = jobs[plane + 1] - jobs[plane]
        if groups == 0:
            return []
        wg = self.tuning["footprint_wg"]
        return [self.program("grid_tiles")(
            self.queue, (groups * wg, 1), (wg, 1), points.first, points.frac, points.vis, points.starts,
            points.extra["subproblems"], np.int32(jobs[plane]), np.int32(plane), np.int32(self.reach), grid_buffer,
            wait_for=wait_for)]
