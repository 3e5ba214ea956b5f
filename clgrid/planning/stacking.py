"""Where each visibility goes in the w-gridding operator (`clgrid.imaging.wgridding`): its first
grid cells, w-plane and offsets, planned once per operator, on the device.

Spreading wants the points of one w-plane together, and within a plane in the order
its kernel walks the grid: by first u cell for the CPUs' owner-computes rows
(``Layout("rows")``), by bin of cells for the GPUs' one work-group per bin
(``Layout("bins")``).  Both are a sort by a small integer key, so planning is three
passes on the device (``clgrid/cl_kernels/wgrid_plan.cl``): a key per (row, channel) sample,
a counting sort by key (`clgrid.device.counting_sort`, which also gives where each key's run
starts: the row and bin tables the kernels read), and the positions of the kept
samples in that order.  The arithmetic is float64 with the operations of
`plan_on_host`, so cells and offsets are bit-identical to the host's (tested); devices
without fp64 plan on the host.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from ..sources.accuracy import KernelChoice
from ..device.codegen import build_program, render, kernel as codegen_kernel
from ..device.counting_sort import CountingSort
from ..device.runtime import device_facts, fill_zeros
from ..strategies.base import read_only_buffer
from ..device.transfer import upload

__all__ = ["Geometry", "Layout", "PointPlan", "plan_points", "plan_on_host"]


@dataclass(frozen=True)
class Geometry:
    """Image and grid: what every plan of one operator shares."""

    npix_x: int
    npix_y: int
    pixsize_x: float
    pixsize_y: float
    center_x: float        # already multiplied by the u/v flip sign
    center_y: float
    nu: int                # padded grid
    nv: int
    kernel: KernelChoice
    do_wgridding: bool
    w_min: float = 0.0     # wavelengths, after the w flip
    dw: float = 1.0        # w-plane spacing
    num_planes: int = 1
    nshift: float = 0.0    # (n - 1) = nshift + t, |t| <= t_half over the image

    @property
    def w_start(self) -> float:
        """w of plane 0."""
        return self.w_min - self.kernel.support / 2 * self.dw

    @property
    def cells_per_wavelength(self) -> tuple:
        """(u, v) in wavelengths times these is the position in grid cells."""
        return self.nu * self.pixsize_x, self.nv * self.pixsize_y

    @property
    def has_phase(self) -> bool:
        """Whether gridding multiplies each visibility by a phase (centre shift, nshift)."""
        return bool(self.center_x or self.center_y or self.nshift)

    def first_planes(self, w):
        """The first w-plane of points at ``w`` (wavelengths, folded to w >= 0), as float64:
        their taps fall on planes first .. first + support - 1.  The planning's arithmetic
        (`plan_on_host`, wgrid_plan.cl), so that whoever splits points by plane agrees
        with it to the bit."""
        return np.ceil(self.plane_positions(w) - self.kernel.support / 2.0)

    def plane_positions(self, w):
        """Where points at ``w`` fall in the stack, in planes from plane 0."""
        return (np.asarray(w, np.float64) - self.w_start) / self.dw

    def image_lm(self):
        x = (np.arange(self.npix_x) - self.npix_x // 2) * self.pixsize_x + self.center_x
        y = (np.arange(self.npix_y) - self.npix_y // 2) * self.pixsize_y + self.center_y
        return x, y


@dataclass(frozen=True)
class Layout:
    """The order of the points within a w-plane: ``"rows"`` (by first u cell) or ``"bins"``
    (by the ``bin_u`` x ``bin_v`` bin of cells holding the first cell)."""

    kind: str
    nu: int
    nv: int
    bin_u: int = 1
    bin_v: int = 1

    def __post_init__(self):
        if self.kind not in ("rows", "bins"):
            raise ValueError(f"layout must be 'rows' or 'bins', got {self.kind!r}")

    @property
    def bins(self) -> tuple:
        return -(-self.nu // self.bin_u), -(-self.nv // self.bin_v)

    @property
    def keys_per_plane(self) -> int:
        # rows: nu + 1 so that the table of starts holds each plane's end as its row nu
        if self.kind == "rows":
            return self.nu + 1
        return self.bins[0] * self.bins[1]

    def keys(self, first: np.ndarray) -> np.ndarray:
        """The sort key of first cells (n, 3): plane, then place in the plane."""
        plane = first[:, 2].astype(np.int64) * self.keys_per_plane
        if self.kind == "rows":
            return plane + first[:, 0]
        return plane + (first[:, 0] // self.bin_u) * self.bins[1] + first[:, 1] // self.bin_v


@dataclass
class PointPlan:
    """The kept visibilities in key order, on the device: ``first`` (int4: first u cell, first
    v cell, both modulo the grid, first plane), ``frac`` (real4: the first taps' offsets
    from the point, in cells and planes, in [-W/2, -W/2 + 1)), ``src`` (the sample's index
    in the caller's (nrow * nchan) array; -index - 1 where the point moved to -uvw and is
    conjugated), ``phase`` (the factor gridding applies; None when there is none) and
    ``starts`` (where each key's run begins: the layout's row or bin table).
    ``plane_start[p]`` (host) is where the points whose first plane is p begin, and
    ``key_starts`` (host) is ``starts`` down to the end of the last plane."""

    first: cl.Buffer
    frac: cl.Buffer
    src: cl.Buffer
    phase: cl.Buffer | None
    starts: cl.Buffer
    plane_start: np.ndarray
    key_starts: np.ndarray
    num_vis: int
    planned_on: str

    def active(self, plane: int, support: int) -> tuple[int, int]:
        """(start, count) of the visibilities with a tap on ``plane``."""
        lo = self.plane_start[max(0, plane - support + 1)]
        hi = self.plane_start[min(plane + 1, len(self.plane_start) - 1)]
        return int(lo), int(hi - lo)


def _points(uvw, scale, keep, signs, fold):
    """u, v, w (wavelengths, flipped, folded) of the kept samples, their flat indices and
    whether each moved to -uvw."""
    nchan = scale.size
    flat = np.flatnonzero(keep.reshape(-1)) if keep is not None else np.arange(uvw.shape[0] * nchan)
    rows, chans = np.divmod(flat, nchan)
    f = scale[chans]
    u, v, w = (uvw[rows, axis] * signs[axis] * f for axis in range(3))
    if not (np.all(np.isfinite(u)) and np.all(np.isfinite(v)) and np.all(np.isfinite(w))):
        raise ValueError("uvw has NaN or infinite entries (in unmasked samples)")
    moved = (w < 0) if fold else np.zeros(w.shape, bool)
    if fold:
        u, v, w = (np.where(moved, -a, a) for a in (u, v, w))
    return u, v, w, flat, moved


def plan_on_host(uvw, scale, keep, signs, geometry: Geometry, layout: Layout, fold: bool) -> dict:
    """The plan in numpy, float64: the reference the device planning matches bit for bit,
    and the planning of devices without fp64.  Returns host arrays named as `PointPlan`'s
    fields (``frac`` float64, ``phase`` complex128 or None, ``starts`` of every key and
    the end)."""
    g, support = geometry, geometry.kernel.support
    u, v, w, flat, moved = _points(uvw, scale, keep, signs, fold)
    half = support / 2.0
    cells_u, cells_v = g.cells_per_wavelength
    pos_u, pos_v = u * cells_u, v * cells_v
    first_u, first_v = np.ceil(pos_u - half), np.ceil(pos_v - half)
    if g.do_wgridding:
        pos_w = g.plane_positions(w)
        first_w = g.first_planes(w)
        frac_w = first_w - pos_w
    else:
        first_w = frac_w = np.zeros_like(u)
    first = np.zeros((u.size, 4), np.int32)
    first[:, 0] = first_u.astype(np.int64) % g.nu
    first[:, 1] = first_v.astype(np.int64) % g.nv
    first[:, 2] = first_w
    if g.do_wgridding and (np.any(first[:, 2] < 0) or np.any(first[:, 2] + support > g.num_planes)):
        raise RuntimeError("clgrid internal error: a point's w-planes fall outside the stack")
    key = layout.keys(first)
    order = np.argsort(key, kind="stable")
    frac = np.zeros((u.size, 4), np.float64)
    frac[:, 0], frac[:, 1], frac[:, 2] = first_u - pos_u, first_v - pos_v, frac_w
    src = np.where(moved, -flat - 1, flat)
    phase = None
    if g.has_phase:
        phase = np.exp(2j * np.pi * (u * g.center_x + v * g.center_y - w * g.nshift))[order]
    counts = np.bincount(key, minlength=g.num_planes * layout.keys_per_plane)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return dict(first=first[order], frac=frac[order], src=src[order].astype(np.int32), phase=phase, starts=starts)


def _copy(queue, host, dtype) -> cl.Buffer:
    return read_only_buffer(queue.context, np.asarray(host, dtype))


def _plane_start(starts: np.ndarray, geometry: Geometry, layout: Layout) -> np.ndarray:
    return starts[np.arange(geometry.num_planes + 1) * layout.keys_per_plane].astype(np.int64)


GEOMETRY_T = np.dtype([("sign_u", np.float64), ("sign_v", np.float64), ("sign_w", np.float64),
                       ("cells_u", np.float64), ("cells_v", np.float64), ("w_start", np.float64),
                       ("dw", np.float64), ("center_x", np.float64), ("center_y", np.float64),
                       ("nshift", np.float64), ("nu", np.int32), ("nv", np.int32), ("nchan", np.int32),
                       ("nsample", np.int32)])   # wgrid_plan.cl's geometry_t


def plan_points(queue, uvw, scale, keep, signs, geometry: Geometry, layout: Layout, fold: bool,
                double: bool, staging=None, on_host: bool = False) -> PointPlan:
    """Plan the samples of ``uvw`` (nrow, 3) metres at ``scale`` (nchan,) = freq / c, where
    ``keep`` (nrow, nchan; None: all) is set, on ``queue``'s device.  ``signs``: the flips
    (+1 or -1 per axis); ``fold``: move w < 0 to -uvw; ``double``: offsets and phases in
    double.  ``staging`` (`clgrid.device.transfer.Staging`), if given, carries uvw to the device.
    ``on_host``: plan in numpy (as devices without fp64 do), for an order within each key
    fixed by the input (the device's counting sort orders a key's points by its atomics,
    which differ from run to run)."""
    g = geometry
    real = np.float64 if double else np.float32
    cplx = np.complex128 if double else np.complex64
    nrow, nchan = uvw.shape[0], scale.size
    if on_host or not device_facts(queue.device).fp64:
        host = plan_on_host(uvw, scale, keep, signs, g, layout, fold)
        n = max(host["first"].shape[0], 1)
        pad = lambda a, dtype: np.concatenate([np.asarray(a, dtype), np.zeros((n - a.shape[0],) + a.shape[1:], dtype)])
        return PointPlan(_copy(queue, pad(host["first"], np.int32), np.int32),
                         _copy(queue, pad(host["frac"], real), real), _copy(queue, pad(host["src"], np.int32), np.int32),
                         None if host["phase"] is None else _copy(queue, pad(host["phase"], cplx), cplx),
                         _copy(queue, host["starts"], np.int32), _plane_start(host["starts"], g, layout),
                         host["starts"], int(host["first"].shape[0]), "host")

    ctx, mf = queue.context, cl.mem_flags
    nsample = nrow * nchan
    num_keys = g.num_planes * layout.keys_per_plane
    uvw_buf = cl.Buffer(ctx, mf.READ_ONLY, max(uvw.nbytes, 8))
    if uvw.size:
        upload(queue, np.asarray(uvw, np.float64), uvw_buf, staging)
    scale_buf = _copy(queue, scale, np.float64)
    keep_buf = None if keep is None else _copy(queue, keep.reshape(-1), np.uint8)
    source = render("wgrid_plan.cl", double=double, use_w=g.do_wgridding, fold=fold, layout=layout.kind,
                    bin_u=layout.bin_u, bin_v=layout.bin_v, keys_per_plane=layout.keys_per_plane,
                    num_planes=g.num_planes, support=g.kernel.support)
    program = build_program(ctx, source)
    cells_u, cells_v = g.cells_per_wavelength
    geo = np.array([(signs[0], signs[1], signs[2], cells_u, cells_v, g.w_start, g.dw, g.center_x, g.center_y,
                     g.nshift, g.nu, g.nv, nchan, nsample)], GEOMETRY_T)[0]
    n = max(nsample, 1)
    keyed = cl.Buffer(ctx, mf.READ_WRITE, 16 * n)
    index = cl.Buffer(ctx, mf.READ_WRITE, 4 * n)
    bad = cl.Buffer(ctx, mf.READ_WRITE, 8)
    fill_zeros(queue, bad, 8, np.int32)
    if nsample:
        codegen_kernel(program, "classify")(queue, (nsample,), None, uvw_buf, scale_buf, keep_buf, geo, keyed, index, bad)
    starts = cl.Buffer(ctx, mf.READ_WRITE, 4 * (num_keys + 2))
    _, order, _ = CountingSort(queue, "p.x", num_keys + 1)(keyed, index, nsample, starts=starts)
    keyed.release()
    index.release()
    host_starts = np.empty(num_keys + 2, np.int32)
    cl.enqueue_copy(queue, host_starts, starts)
    host_bad = np.empty(2, np.int32)
    cl.enqueue_copy(queue, host_bad, bad).wait()
    if host_bad[0]:
        raise ValueError(f"uvw has NaN or infinite entries ({host_bad[0]} unmasked samples)")
    if host_bad[1]:
        raise RuntimeError(f"clgrid internal error: {host_bad[1]} points' w-planes fall outside the stack")
    num_vis = int(host_starts[num_keys])
    m = max(num_vis, 1)
    first = cl.Buffer(ctx, mf.READ_WRITE, 16 * m)
    frac = cl.Buffer(ctx, mf.READ_WRITE, 4 * np.dtype(real).itemsize * m)
    src = cl.Buffer(ctx, mf.READ_WRITE, 4 * m)
    phase = cl.Buffer(ctx, mf.READ_WRITE, np.dtype(cplx).itemsize * m) if g.has_phase else None
    if num_vis:
        codegen_kernel(program, "positions")(queue, (num_vis,), None, uvw_buf, scale_buf, geo, order, np.int32(num_vis),
                                        first, frac, src, phase)
    queue.finish()
    order.release()
    uvw_buf.release()
    return PointPlan(first, frac, src, phase, starts, _plane_start(host_starts, g, layout), host_starts[:num_keys + 1],
                     num_vis, "device")
