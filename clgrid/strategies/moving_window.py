"""Moving-window gridding (Romein, seed 004 §4-5): registers, not device memory, absorb the sums.

Work-items own grid points of a kernel-sized window, one point per subgrid, and keep
their sums in registers while a baseline's kernel slides over the grid; they add to
the device grid (atomically) only when their point changes.  Exact for a support that
varies along a baseline (seed 000 §8.1): a baseline's samples are cut into *chunks*
of one support and one sign of w, each gridded with its own window, so no sample is
gridded with a window of the wrong size.  Samples must arrive ordered by baseline,
then time (`clgrid.baseline_order`).

`time_block` (tuning, 0 = off) offers seed 000's approximation as an explicit option:
w, hence the w-plane and support, held over blocks of that many time steps
(`baseline_order.hold_w`).  Its error grows with the block: on LOFAR HBA tracks shrunk
to a 128^2 grid of a 15 degree field (60 s steps, 8 w-planes; the test
``test_time_block_holds_w_and_its_error_is_bounded``) the relative Frobenius error
against the exact grid is about 2e-3 (at most 5e-3) for 2 steps and 8e-3 (at most
1.3e-2) for 8; seed 000 measured 7.4e-3 for 10 steps of 30 s on SKA data.  Since
this strategy grids a changing support exactly at no extra cost, the option buys
little speed here (benchmarks/moving_window.py measures it).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyopencl as cl

from ..baseline_order import baseline_of, hold_w, track_shape
from ..kernels import offset_range
from .base import DevicePlan, Strategy, read_only_buffer

FLUSHES = ("atomic", "plain")


@dataclass
class MovingWindowPlan(DevicePlan):
    """The generic plan in chunk order, plus the chunks and the work-group list.

    ``chunks`` (int4 each): first visibility, count, support, conjugate flag.
    ``work`` (int2 each, one per work-group): chunk, tile of that chunk's window.
    """

    chunks: cl.Buffer
    work: cl.Buffer
    num_chunks: int
    num_groups: int


def chunk_runs(baseline, support, conjugate, max_length: int):
    """Order samples into chunks; returns ``(order, start, count)`` of the chunks.

    A chunk is a run of one baseline with one support and one sign of w, at most
    ``max_length`` samples long, in the samples' own order: by time, then channel,
    as Algorithm 2 loops.  (On LOFAR tracks that order moves the window 3.7 times
    less often than channel by channel: a subband's channels lie within a cell or so.)
    """
    run = (baseline.astype(np.int64) * (support.max() + 1) + support) * 2 + conjugate
    order = np.argsort(run, kind="stable")
    run = run[order]
    new_run = np.flatnonzero(np.diff(run, prepend=-1))
    position = np.arange(run.size) - np.repeat(new_run, np.diff(np.append(new_run, run.size)))
    start = np.flatnonzero(position % max_length == 0)
    return order, start, np.diff(np.append(start, run.size))


def window_units(width, coarsen_u: int, coarsen_v: int):
    """Work-items one window of ``width`` needs: each owns coarsen_u x coarsen_v points."""
    return -(-width // coarsen_u) * -(-width // coarsen_v)


def work_list(width, count, tiles_per_window):
    """One (chunk, tile) row per work-group, the most expensive chunks first."""
    cost = count.astype(np.int64) * width.astype(np.int64) ** 2
    order = np.argsort(-cost, kind="stable")
    chunk = np.repeat(order, tiles_per_window[order])
    first = np.repeat(np.cumsum(tiles_per_window[order]) - tiles_per_window[order], tiles_per_window[order])
    tile = np.arange(chunk.size) - first
    return np.stack([chunk, tile], axis=1).astype(np.int32)


class MovingWindowGridding(Strategy):
    """Seed 004's strategy: one work-group per tile of a chunk's window, atomic flushes."""

    name = "moving_window"
    template = "grid_moving_window.cl"
    counts = ("work_group_size", "coarsen_u", "coarsen_v", "batch", "chunk_visibilities")

    def __init__(self, queue, grid_size, kernels, precision, tuning=None, binary=None):
        super().__init__(queue, grid_size, kernels, precision, tuning, binary)
        t = self.tuning
        if t["time_block"] < 0:
            raise ValueError(f"time_block must be >= 0 (0: exact), got {t['time_block']}")
        if t["flush"] not in FLUSHES:
            raise ValueError(f"flush must be one of {FLUSHES}, got {t['flush']!r}")
        if t["flush"] == "plain":
            warnings.warn("moving_window with flush='plain' adds to the grid without atomics: "
                          "results are wrong where work-groups meet; use it only to time the flush",
                          stacklevel=3)
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
    def offset_rows(self) -> tuple:
        """`KernelStack.offset_rows` on the device (values, row starts), uploaded when first read."""
        values, starts = self.kernels.offset_rows(self.complex_dtype)
        return read_only_buffer(self.queue.context, values), read_only_buffer(self.queue.context, starts)

    def kernel_arguments(self, plan) -> tuple:
        """What the kernel reads its weights from: the offset rows."""
        return self.offset_rows

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

    def arrange(self, plan, npol: int) -> MovingWindowPlan:
        """Chunks of baseline-ordered samples (refused without a baseline axis)."""
        track_shape(plan)
        return super().arrange(plan, npol)

    def chunk_tracks(self, positions, plan) -> tuple:
        """``(order, start, count)`` of the positions' chunks (`chunk_runs`)."""
        return chunk_runs(baseline_of(plan, positions.sample), positions.support, positions.conj,
                            self.tuning["chunk_visibilities"])

    def upload(self, positions, plan, npol: int) -> MovingWindowPlan:
        """The positions in chunk order, the chunk table and the work-group list, on the device."""
        return self.upload_chunks(positions, *self.chunk_tracks(positions, plan))

    def upload_chunks(self, plan, order, start, count) -> MovingWindowPlan:
        """`upload` for chunks already made: ``order`` of the visibilities, ``start`` and
        ``count`` of each chunk in that order."""
        t = self.tuning
        support = plan.support[order][start]
        conjugate = plan.conj[order][start]
        width = 2 * support + 1
        tiles = -(-window_units(width, t["coarsen_u"], t["coarsen_v"]) // t["work_group_size"])
        chunks = np.stack([start, count, support, conjugate], axis=1).astype(np.int32)
        work = work_list(width, count, tiles)
        context = self.queue.context
        return MovingWindowPlan(
            packed=read_only_buffer(context, plan.packed()[order]), vis=None, num_vis=plan.num_kept,
            source=read_only_buffer(context, plan.sample[order].astype(np.int32)),
            chunks=read_only_buffer(context, chunks),
            work=read_only_buffer(context, work), num_chunks=len(chunks), num_groups=len(work))

    def grid(self, plan: MovingWindowPlan, npol: int, grid_buffer, wait_for=None) -> list:
        """Enqueue the gridding of ``plan`` into ``grid_buffer``; returns the events."""
        size = self.tuning["work_group_size"]
        return [self.kernel("grid_moving_window", npol)(
            self.queue, (plan.num_groups * size,), (size,),
            plan.packed, plan.vis, *self.kernel_arguments(plan), plan.chunks, plan.work,
            grid_buffer, wait_for=wait_for)]
