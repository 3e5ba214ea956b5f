"""What `Gridder` and `Degridder` share: checked geometry, a device queue, a strategy,
the device grid, planning and the report.

Both directions plan visibilities the same way (`plan.py`), then let their strategy
order them and put them on the device; they differ only in what goes in and out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from .errors import DeviceCapabilityError
from .kernels import KernelStack
from .plan import Plan, Samples, check_arguments
from .runtime import get_queue
from .tuning import resolve_tuning
from .strategies.base import DevicePlan

__all__ = ["GridOperation", "PreparedVisibilities", "kernel_seconds"]


@dataclass
class PreparedVisibilities:
    """Planned visibilities already on the device, in the strategy's order: run them with
    ``execute`` (any number of times)."""

    plan: Plan
    device_plan: DevicePlan | None
    samples: Samples
    strategy: object = None  # the strategy that arranged and uploaded them (`strategy_for`)


class GridOperation:
    """Base of `Gridder` and `Degridder`; ``strategies`` maps method names to strategy classes."""

    strategies: dict = {}
    default_method = ""
    done = ""  # what happens to a visibility, for reports and warnings

    def __init__(self, grid_size: int, cell_size: float, kernels: KernelStack, method: str | None = None,
                 device=None, precision: str = "single", tuning: dict | None = None,
                 on_dropped: str = "warn", binary=None):
        method = self.default_method if method is None else method
        check_arguments(grid_size, cell_size, kernels, on_dropped)
        if method not in self.strategies:
            raise ValueError(f"unknown method {method!r}; choose one of {list(self.strategies)}")
        self.grid_size = int(grid_size)
        self.cell_size = float(cell_size)
        self.kernels = kernels
        self.method = method
        self.on_dropped = on_dropped
        self.queue = get_queue(device)
        self.strategy = self.strategies[method](self.queue, self.grid_size, kernels, precision, tuning,
                                                binary)
        self._tuning, self._binary, self._by_npol = tuning, binary, {}
        self.precision = precision
        self._check_grid_fits(1)
        self._grid_buffers: dict = {}
        self.last_report: dict | None = None

    @property
    def device(self):
        return self.queue.device

    def _grid_bytes(self, npol: int) -> int:
        return npol * self.grid_size ** 2 * np.dtype(self.strategy.complex_dtype).itemsize

    def _check_grid_fits(self, npol: int) -> None:
        facts = self.strategy.facts
        need = self._grid_bytes(npol)
        if need > facts.max_allocation or need > facts.global_memory:
            raise DeviceCapabilityError(
                f"a {npol}-polarisation {self.grid_size}^2 {self.precision} grid needs "
                f"{need / 2**30:.2f} GiB; {facts.name} allows {facts.max_allocation / 2**30:.2f} GiB "
                f"per buffer ({facts.global_memory / 2**30:.2f} GiB in all): grid fewer polarisations "
                f"per call, in single precision, or on a smaller grid")

    def grid_buffer(self, npol: int) -> cl.Buffer:
        """The device grid for ``npol`` polarisations, kept between calls."""
        if npol not in self._grid_buffers:
            self._grid_buffers[npol] = cl.Buffer(self.queue.context, cl.mem_flags.READ_WRITE,
                                                 self._grid_bytes(npol))
        return self._grid_buffers[npol]

    def strategy_for(self, npol: int):
        """``self.strategy``, or where the tuning table has values for ``npol`` polarisations
        (``[[<section>.when]] npol = ...``) a sibling strategy built with them (kept)."""
        if npol not in self._by_npol:
            name, facts = self.strategy.name, self.strategy.facts
            general = resolve_tuning(name, self._tuning, facts, precision=self.precision)
            specific = resolve_tuning(name, self._tuning, facts, npol=npol, precision=self.precision)
            changed = {k: v for k, v in specific.items() if general[k] != v}
            self._by_npol[npol] = self.strategy if not changed else self.strategies[self.method](
                self.queue, self.grid_size, self.kernels, self.precision, {**(self._tuning or {}), **changed},
                self._binary)
        return self._by_npol[npol]

    def prepare_samples(self, samples: Samples) -> PreparedVisibilities:
        """Plan validated samples, let the strategy order them, and upload them (one
        validation, then as many operations as wanted, as benchmarks do)."""
        self._check_grid_fits(samples.npol)
        strategy = self.strategy_for(samples.npol)
        plan = strategy.plan(samples, self.cell_size, self.on_dropped, done=self.done)
        plan = strategy.arrange(plan, samples)
        device_plan = strategy.upload(plan, samples) if plan.num_kept else None
        return PreparedVisibilities(plan, device_plan, samples, strategy)

    def _keep_report(self, counts: dict, started: float, planned: float, kernel_events: list) -> dict:
        """The counts plus who did the work and how long it took; kept in ``last_report``."""
        report = dict(counts, method=self.method, precision=self.precision,
                      device=self.device.name.strip(), plan_seconds=planned - started,
                      kernel_seconds=kernel_seconds(kernel_events),
                      total_seconds=time.perf_counter() - started)
        self.last_report = report
        return report


def kernel_seconds(events) -> float:
    """Device time of finished events, from OpenCL profiling."""
    return sum((e.profile.end - e.profile.start) * 1e-9 for e in events)
