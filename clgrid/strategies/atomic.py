"""Atomic gridding (seed 003 §3.1): one work-group per visibility, atomics to the grid."""

from __future__ import annotations

import numpy as np

from .base import DevicePlan, Strategy


class AtomicGridding(Strategy):
    """The baseline: any visibility order, no preprocessing, every addition atomic."""

    name = "atomic"
    template = "grid_atomic.cl"

    def grid(self, plan: DevicePlan, npol: int, grid_buffer, wait_for=None) -> list:
        """Enqueue the gridding of ``plan`` into ``grid_buffer``; returns the event, in a list."""
        t = self.tuning
        groups = max(1, min(plan.num_vis, t["groups_per_cu"] * self.facts.compute_units))
        local = self.local_size()
        k = self.device_kernels
        return [self.kernel("grid_atomic", npol)(
            self.queue, (groups * local[0], local[1]), local,
            plan.packed, plan.vis, k.values, k.starts, k.sides, k.supports, grid_buffer,
            np.int32(plan.num_vis), wait_for=wait_for)]
