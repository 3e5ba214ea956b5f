"""Gather degridding (seed 001): a team of work-items per visibility gathers grid x kernel
over the footprint and reduces; visibilities sorted by w-plane and cell tile on the device."""

from __future__ import annotations

from functools import cached_property

import numpy as np

from ..device.counting_sort import CountingSort
from ..errors import DeviceCapabilityError
from ..device.runtime import is_intel_cpu_runtime
from .base import DevicePlan, Strategy

REDUCTIONS = ("local", "subgroup")
MAX_SORT_KEYS = 2 ** 24   # counts of a counting sort: 64 MiB of scratch at most


class GatherDegridding(Strategy):
    """The fastest degridder of seed 001: any visibility order, sorted for the caches."""

    name = "degrid_gather"
    template = "degrid_gather.cl"
    kernel_layout = "by_offset"
    atomics = False
    analytic_source = True
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

    @cached_property
    def cell_sort(self) -> CountingSort:
        """Orders plans by w-plane, then by tile of ``sort_tile`` cells (rows of tiles), on
        the device; by tile alone where planes times tiles would be too many keys."""
        tile = self.tuning["sort_tile"]
        per_row = -(-self.grid_size // tile)
        tiles = per_row * per_row
        tile_key = f"(p.y / {tile}) * {per_row} + p.x / {tile}"
        if self.kernels.num_planes * tiles <= MAX_SORT_KEYS:
            return CountingSort(self.queue, f"(p.w & 0x7fffffff) * {tiles} + {tile_key}",
                                self.kernels.num_planes * tiles)
        return CountingSort(self.queue, tile_key, tiles)

    def arrange(self, plan, npol: int) -> DevicePlan:
        """Sorted by w-plane and cell tile on the device when ``sort`` says so (seed 001,
        "Input ordering"): neighbours read the same kernel plane and grid rows."""
        if not self.tuning["sort"]:
            return DevicePlan(plan.packed.data, None, plan.num_kept, plan.sample.data)
        packed, source, _ = self.cell_sort(plan.packed.data, plan.sample.data, plan.num_kept)
        return DevicePlan(packed, None, plan.num_kept, source)

    @classmethod
    def program_parameters(cls, tuning, precision, npol, grid_size, kernels) -> dict:
        return dict(super().program_parameters(tuning, precision, npol, grid_size, kernels),
                    subgroups=tuning["reduction"] == "subgroup")

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
