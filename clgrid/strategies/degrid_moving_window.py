"""Moving-window degridding (seed 001 after seed 004): work-items own grid points on a
support-strided lattice and reuse them along each baseline's time-ordered track."""

from __future__ import annotations

from functools import cached_property

import numpy as np
import pyopencl as cl

from ..device.runtime import fill_zeros
from .base import Strategy
from .track_chunks import Channel, ChunkedPlan, TrackChunker, WidestFirst


def tile_window(window: int, max_u: int, max_items: int):
    """Work-group shape (lx, ly) and tiles (tx, ty) covering a window x window lattice.

    Tiles are made as even as possible so that no tile is mostly idle (33 = 17 + 16,
    not 32 + 1).
    """
    tx = -(-window // max_u)
    lx = -(-window // tx)
    ty = -(-window // max(1, max_items // lx))
    ly = -(-window // ty)
    return lx, ly, tx, ty


class MovingWindowDegridding(Strategy):
    """Degridding for time-ordered tracks: a work-group per track segment (and window tile)."""

    name = "degrid_moving_window"
    template = "degrid_moving_window.cl"
    kernel_layout = "by_offset"
    counts = ("group_u", "group_items", "steps_per_group", "vis_per_batch", "arrange_wg")

    work_group_parameters = ("group_items",)

    @staticmethod
    def work_group_shape(tuning: dict) -> tuple:
        """The largest work-group it launches (a window tile is never wider)."""
        return (tuning["group_items"],)

    @cached_property
    def chunker(self) -> TrackChunker:
        """Segments: a track (baseline, channel) in time order, at most steps_per_group long,
        its window as wide as its widest support; widest first, so that each launch (one
        window width) takes consecutive segments."""
        return TrackChunker(self.queue, self.kernels, Channel(), WidestFirst, self.tuning["steps_per_group"],
                            self.tuning["arrange_wg"])

    def arrange(self, plan, npol: int) -> ChunkedPlan:
        """Track by track, cut into segments (on the device for plans made there)."""
        return self.chunker.arrange(plan)

    def degrid(self, plan: ChunkedPlan, npol: int, grid_buffer, wait_for=None) -> list:
        """Zero the visibilities, then one launch per window width; returns the events."""
        t = self.tuning
        kernel = self.kernel("degrid_moving_window", npol)
        itemsize = np.dtype(self.complex_dtype).itemsize
        values = t["vis_per_batch"] * npol
        self.check_local_memory(values * itemsize, "lower vis_per_batch")
        max_items = min(t["group_items"], self.facts.local_memory // (values * itemsize),
                        kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE,
                                                   self.queue.device))
        events = [fill_zeros(self.queue, plan.vis, plan.num_vis * npol * itemsize, self.real_dtype, wait_for)]
        k = self.device_kernels
        first = 0
        for support, count in zip(plan.supports, plan.per_support):
            window = 2 * int(support) + 1
            lx, ly, tx, ty = tile_window(window, t["group_u"], max_items)
            events.append(kernel(
                self.queue, (tx * lx, ty * ly, int(count)), (lx, ly, 1),
                plan.packed, k.values, k.starts, k.supports, grid_buffer, plan.vis,
                plan.chunks, np.int32(first), np.int32(window), cl.LocalMemory(values * lx * ly * itemsize),
                wait_for=events[:1]))
            first += int(count)
        return events
