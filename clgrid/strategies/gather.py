"""Gather degridding (seed 001): a team of work-items per visibility gathers grid x kernel
over the footprint and reduces; visibilities sorted by w-plane and cell on the host."""

from __future__ import annotations

import numpy as np

from ..errors import DeviceCapabilityError
from ..runtime import is_intel_cpu_runtime
from ..plan import Plan, Samples, sorted_by_cell
from .base import DevicePlan, Strategy

REDUCTIONS = ("local", "subgroup")


class GatherDegridding(Strategy):
    """The fastest degridder of seed 001: any visibility order, sorted for the caches."""

    name = "degrid_gather"
    template = "degrid_gather.cl"
    kernel_layout = "by_offset"
    atomics = False
    counts = ("lanes_per_vis", "teams_per_group", "vis_per_batch", "points_per_item", "groups_per_cu",
              "sort_tile")

    def __init__(self, queue, grid_size, kernels, precision, tuning=None, binary=None):
        super().__init__(queue, grid_size, kernels, precision, tuning, binary)
        t = self.tuning
        if t["reduction"] not in REDUCTIONS:
            raise ValueError(f"tuning parameter 'reduction' must be one of {REDUCTIONS}, "
                             f"got {t['reduction']!r}")
        if t["reduction"] == "subgroup" and not self.facts.subgroups:
            raise DeviceCapabilityError(f"reduction='subgroup' needs sub-groups (cl_khr_subgroups, "
                                        f"cl_intel_subgroups or __opencl_c_subgroups), which "
                                        f"{self.facts.name} ({self.facts.platform}) lacks")
        if t["reduction"] == "local" and t["vis_per_batch"] == 1 and is_intel_cpu_runtime(self.facts):
            # measured with intel-opencl-rt 2026.2; Oclgrind finds no error in the same launch
            raise DeviceCapabilityError("vis_per_batch = 1 crashes Intel's OpenCL CPU runtime (a "
                                        "segmentation fault in the kernel launch): use 2 or more")

    @property
    def group_size(self) -> int:
        return self.tuning["lanes_per_vis"] * self.tuning["teams_per_group"]

    work_group_parameters = ("lanes_per_vis", "teams_per_group")

    @staticmethod
    def work_group_shape(tuning: dict) -> tuple:
        return (tuning["lanes_per_vis"] * tuning["teams_per_group"],)

    def arrange(self, plan: Plan, samples: Samples) -> Plan:
        """Sorted by w-plane and cell (in tiles of ``sort_tile`` cells) when ``sort`` says so."""
        return sorted_by_cell(plan, self.tuning["sort_tile"]) if self.tuning["sort"] else plan

    def template_params(self, npol: int) -> dict:
        return dict(super().template_params(npol), subgroups=self.tuning["reduction"] == "subgroup")

    def kernel_arguments(self, plan: DevicePlan) -> tuple:
        """What the kernel reads its weights from: the tables by offset."""
        k = self.device_kernels
        return k.values, k.starts, k.supports

    def degrid(self, plan: DevicePlan, npol: int, grid_buffer, wait_for=None) -> list:
        """Enqueue the degridding of ``plan`` from ``grid_buffer``; returns the events."""
        t = self.tuning
        if t["reduction"] == "local":
            self.check_local_memory(self.group_size * t["vis_per_batch"] * npol
                                    * np.dtype(self.complex_dtype).itemsize,
                                    "lower vis_per_batch, lanes_per_vis or teams_per_group")
        per_group = t["teams_per_group"] * t["vis_per_batch"]
        groups = max(1, min(-(-plan.num_vis // per_group), t["groups_per_cu"] * self.facts.compute_units))
        return [self.kernel("degrid_gather", npol)(
            self.queue, (groups * self.group_size,), (self.group_size,),
            plan.packed, *self.kernel_arguments(plan), grid_buffer, plan.vis,
            np.int32(plan.num_vis), wait_for=wait_for)]
