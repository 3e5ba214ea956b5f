"""What the w-stacking work distributions share (the imaging operator's: `clgrid.imaging`).

A w-stacking strategy grids onto, or degrids from, one w-plane of a periodic ``nu x nv``
grid at a time, with the exponential-of-semicircle kernel evaluated at each point's exact
offsets (`clgrid.sources.analytic.StackedKernel`, ``clgrid/cl_kernels/source_stacked.cl``).
It takes a w-stacking `clgrid.planning.plan.Plan` (`clgrid.planning.plan.plan_stacked`),
orders it once (`arrange`, kept in the plan: the points with a tap on a plane are then one
run), and launches with one call's values in that order and the plane (``grid`` or
``degrid``, returning events), as the W-projection strategies do with theirs.
"""

from __future__ import annotations

from dataclasses import replace


from ..device.codegen import kernel as codegen_kernel
from ..errors import KernelBuildError
from ..sources.analytic import StackedKernel
from ..planning.stacking import PlaneOrder, PointPlan, arrange
from .base import Strategy

__all__ = ["StackedStrategy", "launch_size"]


def launch_size(count: int, group: int) -> int:
    """``count`` work-items rounded up to whole work-groups of ``group``."""
    return -(-max(count, 1) // group) * group


class StackedStrategy(Strategy):
    """Base of the w-stacking strategies: a grid of ``grid_size = (nu, nv)`` cells (periodic,
    indexed ``[u][v]``), a `StackedKernel` source, and plans arranged by `plane_order` (cached in the
    plan; strategies of the same layout share one arrangement)."""

    atomics = False
    work_group_parameters = ()
    stable = False     # arrange in the same order every run (deterministic images)
    # `arrange` is the layout's order (`clgrid.planning.stacking.arrange`) then `add_tables`:
    # the imaging engine may plan straight into that order (`clgrid.planning.fused`)
    arranges_by_layout = True

    @classmethod
    def check_kernel_source(cls, kernels) -> None:
        if not isinstance(kernels, StackedKernel):
            raise ValueError(f"{cls.name!r} is a w-stacking distribution: it takes a StackedKernel source "
                             f"(clgrid.imaging's), got {type(kernels).__name__}")

    @staticmethod
    def work_group_shape(tuning: dict) -> tuple:
        return (1,)

    @property
    def nu(self) -> int:
        return int(self.grid_size[0])

    @property
    def nv(self) -> int:
        return int(self.grid_size[1])

    @classmethod
    def program_parameters(cls, tuning: dict, precision: str, npol: int, grid_size, kernels) -> dict:
        cls.check_kernel_source(kernels)
        params = {k: v for k, v in tuning.items() if k not in ("build_options", "aoc_options", "binary")}
        params.setdefault("atomic", "cas")
        return dict(params, double=precision == "double", deterministic=False, plan="plan_stacked.cl",
                    source=kernels.device_source(), **kernels.template_parameters())

    def template_params(self, npol: int) -> dict:
        return self.program_parameters(self.tuning, self.precision, npol, self.grid_size, self.kernels)

    def plane_order(self) -> PlaneOrder:
        """The order of the points within a plane this strategy wants."""
        return PlaneOrder("bins", self.nu, self.nv, 32, 32)

    def arrangement_key(self) -> tuple:
        return (type(self).__name__, self.precision, repr(sorted(self.tuning.items())), self.stable)

    def arrange(self, plan, npol: int = 1) -> PointPlan:
        """``plan`` in `plane_order`'s order (by first plane, then place); with ``stable`` the same
        order every run (a stable sort on the host)."""
        return arrange(plan, self.plane_order(), stable=self.stable)

    def add_tables(self, points: PointPlan, geometry) -> PointPlan:
        """What the strategy's kernels read beside the points arranged in `layout`'s order for
        ``geometry`` (`arrange` adds it; the imaging engine's fused planning,
        `clgrid.planning.fused`, calls it itself; here: nothing)."""
        return points

    def settle(self, points: PointPlan) -> PointPlan:
        """What the strategy derives from its arrangement once the plan in the caller's order
        is released (the imaging engine calls it once per arrangement; here: nothing)."""
        return points

    def with_fraction(self, device_plan, plan):
        return device_plan           # the arrangement carries the offsets already

    @staticmethod
    def with_values(points: PointPlan, values) -> PointPlan:
        """The arranged points with one call's values (in their order)."""
        return replace(points, vis=values)

    def active(self, points: PointPlan, plane: int) -> tuple[int, int]:
        """(start, count) of the points with a tap on ``plane``."""
        return points.active(plane, self.kernels.width if self.kernels.use_w else 1)

    def program(self, name: str):
        return self.kernel(name, 1)

    def set_up_kernel(self, name: str):
        """Kernel ``name`` for a launch enqueued now, in the calling thread (the tables
        `add_tables` makes): one object per thread and program, kept across operators
        (`clgrid.device.codegen.kernel`; a new pyopencl Kernel reads its invoker from
        pyopencl's on-disk cache, a visible part of a set-up).  A program from a binary, or
        one whose build fails (the atomic path's fallback), goes through `program`."""
        if not self.binary:
            try:
                if getattr(self, "_set_up_program", None) is None:
                    self._set_up_program = self._build(1)
                return codegen_kernel(self._set_up_program, name)
            except KernelBuildError:
                pass
        return self.program(name)


def check_plane(plane: int, kernels: StackedKernel) -> int:
    if not 0 <= plane < kernels.num_planes:
        raise ValueError(f"plane {plane} is outside the stack's {kernels.num_planes} w-planes")
    return int(plane)
