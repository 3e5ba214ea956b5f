"""Atomic gridding (seed 003 §3.1): one work-group per visibility, atomics to the grid."""

from __future__ import annotations

import numpy as np

from .base import DevicePlan, Strategy


class AtomicGridding(Strategy):
    """The baseline: any visibility order, no preprocessing, every addition atomic."""

    name = "atomic"
    template = "grid_atomic.cl"
    analytic_source = True

    def arrange(self, plan, npol: int) -> DevicePlan:
        """Any order will do: the plan as it is, no copy."""
        return DevicePlan(plan.packed.data, None, plan.num_kept, plan.sample.data)

    def grid(self, plan: DevicePlan, npol: int, grid_buffer, wait_for=None) -> list:
        """Enqueue the gridding of ``plan`` into ``grid_buffer``; returns the event, in a list."""
        t = self.tuning
        groups = max(1, min(plan.num_vis, t["groups_per_cu"] * self.facts.compute_units))
        local = self.local_size()
        return [self.kernel("grid_atomic", npol)(
            self.queue, (groups * local[0], local[1]), local,
            plan.packed, plan.vis, *self.kernel_arguments(plan), grid_buffer,
            np.int32(plan.num_vis), wait_for=wait_for)]
