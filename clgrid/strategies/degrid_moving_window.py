"""Moving-window degridding (seed 001 after seed 004): work-items own grid points on a
support-strided lattice and reuse them along each baseline's time-ordered track."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from ..baseline_order import track_keys
from ..plan import Positions
from ..runtime import fill_zeros
from .base import DevicePlan, Strategy, extended


@dataclass
class WindowLaunch:
    """Segments sharing one window width, launched together: (first, count) per segment."""

    window: int
    segments: cl.Buffer
    num_segments: int


@dataclass
class TrackedDevicePlan(DevicePlan):
    """A device plan ordered track by track, with its segments grouped by window width."""

    launches: list


def track_segments(keys: np.ndarray, steps: int):
    """First index and length of each segment: a track's run of at most ``steps`` visibilities."""
    n = keys.size
    new_track = np.r_[True, keys[1:] != keys[:-1]]
    track_first = np.flatnonzero(new_track)
    step = np.arange(n) - track_first[np.cumsum(new_track) - 1]
    first = np.flatnonzero(new_track | (step % steps == 0))
    return first, np.diff(np.r_[first, n])


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
    counts = ("group_u", "group_items", "steps_per_group", "vis_per_batch")

    work_group_parameters = ("group_items",)

    @staticmethod
    def work_group_shape(tuning: dict) -> tuple:
        """The largest work-group it launches (a window tile is never wider)."""
        return (tuning["group_items"],)

    def order(self, positions: Positions, plan) -> Positions:
        """Track by track (baseline, channel), in time order within a track."""
        return positions.take(np.argsort(track_keys(plan, positions.sample), kind="stable"))

    def upload(self, positions: Positions, plan, npol: int) -> TrackedDevicePlan:
        first, count = track_segments(track_keys(plan, positions.sample), self.tuning["steps_per_group"])
        window = 2 * np.maximum.reduceat(positions.support, first) + 1
        ro = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        launches = []
        for w in np.unique(window):
            mine = window == w
            table = np.ascontiguousarray(np.column_stack([first[mine], count[mine]]), np.int32)
            launches.append(WindowLaunch(int(w), cl.Buffer(self.queue.context, ro, hostbuf=table),
                                         int(mine.sum())))
        return extended(super().upload(positions, plan, npol), TrackedDevicePlan, launches=launches)

    def degrid(self, plan: TrackedDevicePlan, npol: int, grid_buffer, wait_for=None) -> list:
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
        for launch in plan.launches:
            lx, ly, tx, ty = tile_window(launch.window, t["group_u"], max_items)
            events.append(kernel(
                self.queue, (tx * lx, ty * ly, launch.num_segments), (lx, ly, 1),
                plan.packed, k.values, k.starts, k.supports, grid_buffer, plan.vis,
                launch.segments, np.int32(launch.window), cl.LocalMemory(values * lx * ly * itemsize),
                wait_for=events[:1]))
        return events
