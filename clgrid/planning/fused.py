"""The imaging operator's points planned and arranged in one go (`plan_arranged`).

`clgrid.planning.plan.plan_stacked` then `clgrid.planning.stacking.arrange` make the plan in
the caller's order (classify; scan of the kept flags; compact), then sort it by the
layout's key (count; scan; place; take): five passes over the points and two host reads
(the counts, where each plane's run starts).  The imaging engine keeps only the
arrangement, so here the points go straight to their places
(``clgrid/cl_kernels/plan_arranged.cl``): one pass classifies every sample, counts each
key and ranks each point within its key (one atomic increment); a scan of the key counts
gives where each key's run starts; a second pass writes every kept point at its key's
start plus its rank.  The arithmetic is plan_positions.cl's (bit-identical to the float64
host twin `clgrid.planning.host.stacked_positions`); the order within a key is the
atomics', as the counting sort's.  Nothing is waited for here where every sample is
kept (nothing masked, every plane planned: the counts are known, or uvw is refused):
the counts and where each plane's run starts come back without waiting, and the
caller waits once, with its strategy's tables (`PointPlan.wait_ready`, which also
refuses uvw with NaN); otherwise the counts are read after the first pass (they size
the points).

Devices without fp64 and ``stable`` arrangements (deterministic images) keep the two-step
path.
"""

from __future__ import annotations

import numpy as np
import pyopencl as cl

from ..device.codegen import build_program, kernel as codegen_kernel, launch, render
from ..device.runtime import fill_zeros
from ..device.scan import ExclusiveScan
from .plan import STATUSES, Plan, stacked_inputs
from .stacking import PlaneOrder, PointPlan, _key_expression

__all__ = ["plan_arranged"]

def _program(context, geometry, layout: PlaneOrder, fold: bool, double: bool) -> cl.Program:
    g = geometry
    return build_program(context, render("plan_arranged.cl", stacked=True, double=double, use_w=g.do_wgridding,
                                         fold=fold, support=g.kernel.support, num_planes=g.num_planes,
                                         key=_key_expression(layout)))


def plan_arranged(queue, geometry, uvw, scale, keep, signs, fold: bool, double: bool, layout: PlaneOrder,
                  staging=None, planes: range | None = None, sparse_share: float = 0.0) -> tuple:
    """``(plan, points, index)``: the samples of ``uvw`` planned as
    `clgrid.planning.plan.plan_stacked` plans them (same arguments) and arranged in
    ``layout``'s order as `clgrid.planning.stacking.arrange` arranges them, without the plan in
    the caller's order: ``plan`` holds the counts and ``points`` (kept as its arrangement
    under ``arrangement_key`` by the caller), its per-point arrays released.  Where fewer
    than ``sparse_share`` of the samples are kept, the values go by position
    (``plan.values_by_position``) and ``index`` (host int32, read with the tables) is the
    sample of each point in this order; else ``index`` is None.  ``points.extra["ready"]`` is the
    event after which ``points.plane_start``, ``index`` and ``plan.counts`` hold their
    values: call ``points.wait_ready()`` (it also refuses uvw with NaN or infinities where
    that was not known before)."""
    g, context = geometry, queue.context
    real = np.float64 if double else np.float32
    cplx = np.complex128 if double else np.complex64
    nrow, nchan = uvw.shape[0], scale.size
    nsample = nrow * nchan
    planes = range(g.num_planes) if planes is None else planes
    num_keys = g.num_planes * layout.keys_per_plane
    if not 0 < num_keys < 2 ** 31 - 1:
        raise ValueError(f"{num_keys} sort keys ({g.num_planes} w-planes of {layout.keys_per_plane}) overflow "
                         f"32-bit counts: use larger bins or fewer w-planes")
    program = _program(context, g, layout, fold, double)
    uvw_d, scale_d, keep_d, stacking = stacked_inputs(queue, g, uvw, scale, keep, signs, staging)
    mf, n = cl.mem_flags, max(nsample, 1)
    key = cl.Buffer(context, mf.READ_WRITE, 4 * n)
    rank = cl.Buffer(context, mf.READ_WRITE, 4 * n)
    key_counts = cl.Buffer(context, mf.READ_WRITE, 4 * (num_keys + 1))
    starts = cl.Buffer(context, mf.READ_WRITE, 4 * (num_keys + 1))
    tally = np.zeros(len(STATUSES), np.int32)
    tally_d = cl.Buffer(context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=tally)   # (Oclgrind reads fills as unset)
    fill_zeros(queue, key_counts, 4 * (num_keys + 1), np.int32)
    if nsample:
        launch(codegen_kernel(program, "classify_keyed"), queue, nsample, uvw_d.data, scale_d.data,
               None if keep_d is None else keep_d.data, stacking, np.int32(planes.start), np.int32(planes.stop),
               key, rank, key_counts, tally_d)
    counts = {"kept": nsample, "flagged": 0, "off_grid": 0, "beyond_kernel_stack": 0, "elsewhere": 0}

    def check_counts():
        """The counts to the plan; uvw that cannot be planned refused."""
        found = dict(zip(STATUSES, (int(c) for c in tally)))
        if found["not_finite"]:
            raise ValueError(f"uvw has NaN or infinite entries ({found['not_finite']} unmasked samples)")
        if found["beyond_kernel_stack"] or found["off_grid"]:
            raise RuntimeError(f"clgrid internal error: {found['beyond_kernel_stack'] + found['off_grid']} points' "
                               f"taps fall outside the grid or the stack of w-planes")
        counts.update(kept=found["kept"], flagged=found["flagged"], elsewhere=found["elsewhere"])

    # every sample is kept (or uvw is refused) where nothing is masked and every plane is
    # planned: then the counts come back with the tables, at the end; else they size the points
    every_kept = keep is None and planes == range(g.num_planes)
    cl.enqueue_copy(queue, tally, tally_d, is_blocking=not every_kept)
    if not every_kept:
        check_counts()
    m = counts["kept"]
    by_position = m < sparse_share * nsample
    size = max(m, 1)
    first = cl.Buffer(context, mf.READ_WRITE, 16 * size)
    frac = cl.Buffer(context, mf.READ_WRITE, 4 * np.dtype(real).itemsize * size)
    src = cl.Buffer(context, mf.READ_WRITE, 4 * size)
    phase = cl.Buffer(context, mf.READ_WRITE, np.dtype(cplx).itemsize * size) if g.has_phase else None
    sample = cl.Buffer(context, mf.READ_WRITE, 4 * size) if by_position else None
    scan = ExclusiveScan.of(queue)
    scan(key_counts, starts, num_keys + 1)            # entry num_keys is 0: starts ends with m
    if m:
        launch(codegen_kernel(program, "place_keyed"), queue, nsample, uvw_d.data, scale_d.data, stacking, key,
               rank, starts, np.int32(by_position), first, frac, src, phase, sample)
    # where each plane's run starts, and the samples in this order, back without waiting
    plane_start = np.empty(g.num_planes + 1, np.int32)
    ready = scan.every_nth(starts, layout.keys_per_plane, g.num_planes + 1, plane_start)
    index = None
    if by_position:
        index = np.empty(m, np.int32)
        if m:
            ready = cl.enqueue_copy(queue, index, sample, is_blocking=False)
    points = PointPlan(first, frac, src, phase, starts, plane_start, m, "device")
    points.extra.update(ready=ready, after_ready=[] if not every_kept else [check_counts])
    plan = Plan(g, queue, (nrow,), nchan, counts, None, None, None, None, planned_on="device")
    plan.values_by_position = by_position
    plan.release_points()
    return plan, points, index
