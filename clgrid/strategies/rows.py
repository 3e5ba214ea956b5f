"""Row-band gridding for CPUs: each work-item owns a band of grid rows, no atomics.

On a CPU OpenCL device float atomics are compare-and-swap loops and a work-group is a
loop on one core, so the GPU strategies pay for atomics they do not need: two cores
rarely touch the same cell.  Here the grid is cut into bands of ``band`` rows; one
work-item owns a band and alone writes it, adding every footprint row that falls in
it with plain loads and stores (the wgridding "rows" spread, `clgrid/cl_kernels/wgrid_analytic.cl`,
on the W-projection tables).  Visibilities are sorted by grid row, then column, on the
host, so a band reads one contiguous run of them (those within the widest support of
it) and walks its rows left to right; each visibility is read by the
``(2 s + band - 1) / band`` bands its footprint meets.  With no atomics and a fixed
order the grid is the same bits from run to run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from ..planning.host import Positions
from .base import DevicePlan, Strategy, extended, read_only_buffer

VECTOR_ACCESS = ("vload", "cast")


@dataclass
class RowsDevicePlan(DevicePlan):
    """A plan sorted by grid row on the device, with each band's run of it."""

    band_range: cl.Buffer     # int2 per band: [first, end) into the plan
    num_bands: int


def band_ranges(grid_v: np.ndarray, grid_size: int, band: int, reach: int) -> np.ndarray:
    """``(num_bands, 2)`` int32: for each band of ``band`` rows, the run of visibilities
    (sorted by ``grid_v``) whose row lies within ``reach`` rows of it."""
    first_rows = np.arange(0, grid_size, band)
    last_rows = np.minimum(first_rows + band, grid_size) - 1
    return np.column_stack([np.searchsorted(grid_v, first_rows - reach, "left"),
                            np.searchsorted(grid_v, last_rows + reach, "right")]).astype(np.int32)


class RowsGridding(Strategy):
    """Owner-computes gridding by bands of grid rows (grid_rows.cl), for CPU devices."""

    name = "rows"
    template = "grid_rows.cl"
    kernel_layout = "by_offset"
    atomics = False
    counts = ("band",)
    work_group_parameters = ()

    def check_tuning(self) -> None:
        if self.tuning["vector_access"] not in VECTOR_ACCESS:
            raise ValueError(f"tuning parameter 'vector_access' of 'rows' must be one of {VECTOR_ACCESS}, "
                             f"got {self.tuning['vector_access']!r}")

    @staticmethod
    def work_group_shape(tuning: dict) -> tuple:
        return (1,)

    def order(self, positions: Positions, plan) -> Positions:
        """By grid row, then column (stable): each band's visibilities are one run, and a
        band walks its rows left to right."""
        key = positions.grid_v.astype(np.int64) * self.grid_size + positions.grid_u
        return positions.take(np.argsort(key, kind="stable"))       # half the time of a lexsort

    def upload(self, positions: Positions, plan, npol: int) -> RowsDevicePlan:
        """The sorted positions on the device, with each band's run of them."""
        ranges = band_ranges(positions.grid_v, self.grid_size, self.tuning["band"], self.kernels.max_support)
        return extended(super().upload(positions, plan, npol), RowsDevicePlan,
                        band_range=read_only_buffer(self.queue.context, ranges), num_bands=ranges.shape[0])

    def grid(self, plan: RowsDevicePlan, npol: int, grid_buffer, wait_for=None) -> list:
        """Enqueue the gridding of ``plan`` into ``grid_buffer`` (zeroed); returns the events."""
        k = self.device_kernels
        return [self.kernel("grid_rows", npol)(
            self.queue, (plan.num_bands,), (1,), plan.packed, plan.vis, k.values, k.starts, k.supports,
            plan.band_range, grid_buffer, wait_for=wait_for)]
