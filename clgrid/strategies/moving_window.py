"""Moving-window gridding (Romein, seed 004 §4-5): registers, not device memory, absorb the sums.

Work-items own grid points of a kernel-sized window, one point per subgrid, and keep
their sums in registers while a baseline's kernel slides over the grid; they add to
the device grid (atomically) only when their point changes.  Exact for a support that
varies along a baseline (seed 000 §8.1): a baseline's samples are cut into *chunks*
of one support and one sign of w, each gridded with its own window, so no sample is
gridded with a window of the wrong size (`clgrid.strategies.track_chunks`, on the
device for plans made there).  Samples must arrive ordered by baseline, then time
(`clgrid.planning.baseline_order`).

`time_block` (tuning, 0 = off) offers seed 000's approximation as an explicit option:
w, hence the w-plane and support, held over blocks of that many time steps
(`baseline_order.hold_w`).  Its error grows with the block: on LOFAR HBA tracks shrunk
to a 128^2 grid of a 15 degree field (60 s steps, 8 w-planes; the test
``test_time_block_holds_w_and_its_error_is_bounded``) the relative Frobenius error
against the exact grid stays below 1e-2 for 2 steps and 3e-2 for 8 (the test's bounds;
the measured errors: docs/benchmarks/internals.md); seed 000 reports 7.4e-3 for 10 steps of 30 s on
SKA data.  Since
this strategy grids a changing support exactly at no extra cost, the option buys
little speed here (benchmarks/moving_window.py measures it).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyopencl as cl

from ..call_warnings import warn
from ..planning.baseline_order import hold_w, track_shape
from ..sources.tables import offset_range
from .base import DeviceKernelStack, Strategy, extended, read_only_buffer
from .track_chunks import ChunkedPlan, LongestFirst, SupportAndSign, TrackChunker

FLUSHES = ("atomic", "plain")


@dataclass
class MovingWindowPlan(ChunkedPlan):
    """The plan in chunk order with its chunks (`ChunkedPlan`), plus the work-group list:
    ``work`` (int2 each, one per work-group): chunk, tile of that chunk's window."""

    work: cl.Buffer
    num_groups: int


def window_units(width, coarsen_u: int, coarsen_v: int):
    """Work-items one window of ``width`` needs: each owns coarsen_u x coarsen_v points."""
    return -(-width // coarsen_u) * -(-width // coarsen_v)


class MovingWindowGridding(Strategy):
    """Seed 004's strategy: one work-group per tile of a chunk's window, atomic flushes."""

    name = "moving_window"
    template = "grid_moving_window.cl"
    kernel_layout = "offset_rows"
    counts = ("work_group_size", "coarsen_u", "coarsen_v", "batch", "chunk_visibilities", "arrange_wg")

    def __init__(self, queue, grid_size, kernels, precision, tuning=None, binary=None):
        super().__init__(queue, grid_size, kernels, precision, tuning, binary)
        t = self.tuning
        if t["time_block"] < 0:
            raise ValueError(f"time_block must be >= 0 (0: exact), got {t['time_block']}")
        if t["flush"] not in FLUSHES:
            raise ValueError(f"flush must be one of {FLUSHES}, got {t['flush']!r}")
        if t["flush"] == "plain":
            warn("moving_window with flush='plain' adds to the grid without atomics: "
                 "results are wrong where work-groups meet; use it only to time the flush",
                 stacklevel=None)
        window = 32 if self.interpolation == "linear" else 16    # window indices (+ position)
        staged = t["batch"] * (window + 4 * np.dtype(self.complex_dtype).itemsize)   # + 4 pols
        self.check_local_memory(staged, f"batch {t['batch']} stages that much; lower batch")
        if 2 * kernels.max_support + 1 >= 2 ** 15:
            raise ValueError(f"moving_window packs window positions in 15 bits: support "
                             f"{kernels.max_support} is too large")
        if grid_size ** 2 >= 2 ** 31:
            raise ValueError(f"moving_window indexes cells with 32-bit integers: grid_size {grid_size} "
                             f"is above {int(np.sqrt(2 ** 31 - 1))}")

    @cached_property
    def device_kernels(self) -> DeviceKernelStack:
        """`KernelStack.offset_rows` on the device (values, row starts; no sides, and no
        supports: a chunk carries its own), uploaded when first read."""
        values, starts = self.kernels.offset_rows(self.complex_dtype)
        context = self.queue.context
        return DeviceKernelStack(read_only_buffer(context, values), read_only_buffer(context, starts), None, None)

    work_group_parameters = ("work_group_size",)

    @staticmethod
    def work_group_shape(tuning: dict) -> tuple:
        return (tuning["work_group_size"],)

    @classmethod
    def program_parameters(cls, tuning, precision, npol, grid_size, kernels) -> dict:
        return dict(super().program_parameters(tuning, precision, npol, grid_size, kernels),
                    offset_range=offset_range(kernels.oversample))

    @property
    def hold_positions(self):
        """w held over `time_block` time steps, if asked (planned on the host then)."""
        time_block = self.tuning["time_block"]
        return None if time_block <= 1 else (lambda samples: hold_w(samples, time_block))

    @cached_property
    def chunker(self) -> TrackChunker:
        """Chunks: runs of one baseline, support and sign of w, at most chunk_visibilities long,
        longest first (a work-group's time goes with its chunk's count)."""
        t = self.tuning
        return TrackChunker(self.queue, self.kernels, SupportAndSign(self.kernels), LongestFirst,
                            t["chunk_visibilities"], t["arrange_wg"])

    def arrange(self, plan, npol: int) -> MovingWindowPlan:
        """Chunks of baseline-ordered samples (refused without a baseline axis), cut on the
        device for plans made there, and their work-groups."""
        track_shape(plan)
        return self.with_work(self.chunker.arrange(plan))

    def with_work(self, chunked: ChunkedPlan) -> MovingWindowPlan:
        """``chunked`` with its work-group list: every tile of every chunk's window, in chunk
        order, so the longest-running work-groups start first."""
        t = self.tuning
        tiles = -(-window_units(2 * chunked.supports + 1, t["coarsen_u"], t["coarsen_v"]) // t["work_group_size"])
        work, num_groups = self.chunker.work_list(chunked, tiles)
        return extended(chunked, MovingWindowPlan, work=work, num_groups=num_groups)

    def grid(self, plan: MovingWindowPlan, npol: int, grid_buffer, wait_for=None) -> list:
        """Enqueue the gridding of ``plan`` into ``grid_buffer``; returns the events."""
        size = self.tuning["work_group_size"]
        return [self.kernel("grid_moving_window", npol)(
            self.queue, (plan.num_groups * size,), (size,),
            plan.packed, plan.vis, *self.kernel_arguments(plan), plan.chunks, plan.work,
            grid_buffer, wait_for=wait_for)]
