"""FPGA strategies (Intel FPGA SDK for OpenCL): single work-item gridding and
degridding that keep a tile of the grid on chip.

Seed 000 (memo 74): FPGA gridding is limited by global memory bandwidth and
layout.  So one pipeline, launched as one work-item, walks the visibilities tile
by tile, sorted here on the host (then by w-plane, so a tile reads one kernel
plane after another): the gridder accumulates each tile plus a kernel-wide halo
on chip and adds it to the global grid once; the degridder reads each tile plus
halo once.  Nothing else touches the grid, so there are no atomics.  On any other
OpenCL device the same kernels run as a functional emulation (one work-item, the
same results), which is how they are tested here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from ..planning.host import Positions
from .base import DevicePlan, Strategy, extended


@dataclass
class TileOrder:
    """The kept visibilities of a plan grouped by the tile that holds their grid cell.

    ``order`` lists them tile by tile, by w-plane within a tile; tile ``t`` (one
    that has visibilities) starts at grid cell ``corners[t]`` (u, v) and holds
    ``order[first[t]:first[t + 1]]``.
    """

    order: np.ndarray
    corners: np.ndarray
    first: np.ndarray

    @classmethod
    def of(cls, plan: Positions, tile: int) -> "TileOrder":
        tiles_u = -(-plan.grid_size // tile)
        key = (plan.grid_v // tile).astype(np.int64) * tiles_u + plan.grid_u // tile
        order = np.lexsort((plan.plane, key))
        keys, starts = np.unique(key[order], return_index=True)
        corners = np.column_stack([keys % tiles_u, keys // tiles_u]) * tile
        return cls(order, corners.astype(np.int32), np.append(starts, order.size).astype(np.int32))

    @property
    def num_tiles(self) -> int:
        return int(self.corners.shape[0])


@dataclass
class FpgaDevicePlan(DevicePlan):
    """A plan on the device in tile order, with where each tile starts."""

    corners: cl.Buffer
    first: cl.Buffer
    num_tiles: int


class FpgaStrategy(Strategy):
    """What both FPGA kernels share: one work-item, a tile order, a tile plus halo on chip."""

    kernel_name = ""
    counts = ("tile", "unroll_u")
    atomics = False
    work_group_parameters = ()

    @staticmethod
    def work_group_shape(tuning: dict) -> tuple:
        return (1, 1)

    @classmethod
    def program_parameters(cls, tuning, precision, npol, grid_size, kernels) -> dict:
        """The FPGA kernels also bake in the halo: the stack's widest support."""
        return dict(super().program_parameters(tuning, precision, npol, grid_size, kernels),
                    max_support=kernels.max_support)

    @property
    def padded_side(self) -> int:
        """Side of the on-chip tile: the tile plus a halo of the widest support on each side."""
        return self.tuning["tile"] + 2 * self.kernels.max_support

    def on_chip_tiles(self) -> int:
        """How many padded tiles per polarisation the kernel keeps in local memory."""
        return 1

    def _check_on_chip(self, npol: int) -> None:
        side = self.padded_side
        need = self.on_chip_tiles() * npol * side * side * np.dtype(self.complex_dtype).itemsize
        self.check_local_memory(need, f"{self.on_chip_tiles() * npol} on-chip tiles of {side}^2 cells: tile "
                                      f"{self.tuning['tile']} plus a halo of {self.kernels.max_support}; "
                                      f"lower the tuning parameter 'tile'")

    def order(self, positions: Positions, plan) -> Positions:
        """Tile by tile, by w-plane within a tile: the order the single pipeline walks
        (on the host: an FPGA pipeline has no use for a device sort)."""
        return positions.take(TileOrder.of(positions, self.tuning["tile"]).order)

    def upload(self, positions: Positions, plan, npol: int) -> FpgaDevicePlan:
        """The ordered positions on the device, with the first visibility and corner of each tile."""
        tiles = TileOrder.of(positions, self.tuning["tile"])
        ro = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        return extended(super().upload(positions, plan, npol), FpgaDevicePlan,
                        corners=cl.Buffer(self.queue.context, ro, hostbuf=tiles.corners),
                        first=cl.Buffer(self.queue.context, ro, hostbuf=tiles.first), num_tiles=tiles.num_tiles)

    def _launch(self, plan: FpgaDevicePlan, npol: int, grid_buffer, wait_for=None) -> cl.Event:
        """Run the strategy's kernel as a single work-item over every tile of ``plan``."""
        self._check_on_chip(npol)
        k = self.device_kernels
        return self.kernel(self.kernel_name, npol)(
            self.queue, (1,), (1,), plan.packed, plan.corners, plan.first, k.values, k.starts, k.sides,
            k.supports, grid_buffer, plan.vis, np.int32(plan.num_tiles), wait_for=wait_for)


class FpgaGridding(FpgaStrategy):
    """Gridding into a banked on-chip tile, added to the grid once per tile (grid_fpga.cl)."""

    name = "fpga"
    template = "grid_fpga.cl"
    kernel_name = "grid_fpga"
    counts = FpgaStrategy.counts + ("banks",)

    def on_chip_tiles(self) -> int:
        return self.tuning["banks"]

    def grid(self, plan: FpgaDevicePlan, npol: int, grid_buffer, wait_for=None) -> list:
        """Enqueue the gridding of ``plan`` into ``grid_buffer`` (zeroed); returns the events."""
        return [self._launch(plan, npol, grid_buffer, wait_for)]


class FpgaDegridding(FpgaStrategy):
    """Degridding from an on-chip copy of each tile, a shift register per sum (degrid_fpga.cl)."""

    name = "degrid_fpga"
    template = "degrid_fpga.cl"
    kernel_name = "degrid_fpga"
    counts = FpgaStrategy.counts + ("shift_depth",)

    def degrid(self, plan: FpgaDevicePlan, npol: int, grid_buffer, wait_for=None) -> list:
        """Enqueue the degridding of ``plan`` from ``grid_buffer``; returns the events."""
        return [self._launch(plan, npol, grid_buffer, wait_for)]
