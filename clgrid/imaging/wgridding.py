"""Imaging accurate to ``epsilon``: `vis2dirty` / `dirty2vis` with ducc0.wgridder's keywords,
meaning and normalisation, and `WGridder`, the operator behind them kept for major cycles.

Conventions (measured against ducc0 0.42 with a direct sum; tests/test_vis2dirty.py holds
them).  With ``u, v, w = uvw * freq / c`` (wavelengths) after the flips (``flip_u`` negates
u, ...), pixel ``(ix, iy)`` of the ``(npix_x, npix_y)`` image is at

    x = (ix - npix_x // 2) * pixsize_x + s_u * center_x,   y = (iy - npix_y // 2) * pixsize_y + s_v * center_y

with ``s_u = -1`` when ``flip_u`` (so a flip mirrors the image about its centre, centre
offset included), ``n = sqrt(1 - x^2 - y^2)``, and

    vis2dirty:  dirty[ix, iy] = Re sum_k wgt_k vis_k exp(+2 pi i (u_k x + v_k y - w_k (n - 1))) / n
    dirty2vis:  vis_k = wgt_k sum_{ix, iy} dirty[ix, iy] exp(-2 pi i (u_k x + v_k y - w_k (n - 1))) / n

(the adjoint pair).  The ``/ n`` is there with ``divide_by_n`` and ``do_wgridding``; without
``do_wgridding`` the w term and ``/ n`` are both absent.  The image is not divided by the
sum of weights.  x goes with u and the first axis; y with v and the second.  Masked
(mask == 0) or zero-weight visibilities do not count; dirty2vis returns 0 for them.

How: the kernel (clgrid.sources.accuracy) spreads each visibility over W x W cells of a grid
padded by sigma, and with w over W of a stack of w-planes spaced so that the image's
range of ``n - 1`` is oversampled by sigma too (w-gridding, "improved w-stacking": Ye et
al. 2021, Arras et al. 2021).  Each plane is transformed, multiplied by its w phase and
summed; the sum is divided by the kernel's Fourier transform in u, v and w.  Points
with w < 0 are moved to (-u, -v, -w) and conjugated first (the image is real), which
halves the range of w the planes cover.

The points are planned once per operator, on the device (`clgrid.planning.stacking`: first
cells, offsets and plane in float64, sorted by plane and by bin or row).  Where the
work runs is the tuning table's ``[wgridding]`` choice (clgrid/platforms/*.toml, or
``tuning=``): ``spread = "bins"`` (a work-group per bin of cells and piece of its points,
accumulating in local memory: GPUs), ``"atomic"`` (a work-item per visibility, float
atomic adds) or ``"rows"`` (a work-item per grid row, no atomics, kernel values computed
once per operator: CPUs); ``fft = "host"`` (scipy.fft in place on the grid mapped to the host,
the crop as views, per-pixel work on ``nthreads`` threads), ``"mapped"`` (the same FFT,
with crop, w phase and correction by device kernels, clgrid/cl_kernels/wgrid_planes.cl) or
``"vkfft"`` (pyvkfft on the device with those kernels: nothing per plane crosses to the
host; with fp64 the correction and w phases are computed per pixel there as well).  Kernel values come from per-tap polynomials (clgrid.sources.accuracy.horner_coefficients).
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from functools import cached_property
from types import SimpleNamespace

import numpy as np
import pyopencl as cl

from ..sources.accuracy import choose_kernel, horner_coefficients, kernel_transform
from ..device.atomics import atomic_unavailable, build_options_for
from ..device.codegen import build_program, render
from ..operators.checks import check_finite_result, check_output, count_nonfinite, precision_of
from .fft import DeviceFFT, HostFFT, MappedHostFFT, clear_outside
from ..device.host_threads import in_slices
from ..device.runtime import device_facts, fill_zeros, get_queue
from ..strategies.base import check_precision, read_only_buffer
from ..device.transfer import download, host_empty, shared_staging, upload
from ..device.tuning import resolve_tuning
from ..planning.stacking import Geometry, Layout, PointPlan, plan_points

__all__ = ["WGridder", "vis2dirty", "dirty2vis", "choose_geometry", "imaging_work", "Geometry", "PointPlan"]

SPEED_OF_LIGHT = 299792458.0
MIN_NPIX = 16
SPREAD_MODES = ("atomic", "bins", "rows")
PIXEL_RUN = 1 << 16             # pixels the host's per-pixel work takes at a time (its phases stay in cache)
CHEBYSHEV_DEGREE = 24          # the w correction's series: exact to rounding (see _smooth_transform)
PIXELS_T = np.dtype([("pixsize_x", np.float64), ("pixsize_y", np.float64), ("center_x", np.float64),
                     ("center_y", np.float64), ("nshift", np.float64), ("w_start", np.float64), ("dw", np.float64),
                     ("cheb_lo", np.float64), ("cheb_hi", np.float64), ("npix_x", np.int32), ("npix_y", np.int32),
                     ("ncheb", np.int32), ("divide_by_n", np.int32)])   # wgrid_planes.cl's pixels_t


def _smooth_transform(s, support: int, beta: float, workers: int = 1):
    """`kernel_transform` at many points (one per pixel for w): through a Chebyshev
    interpolant of degree 24 on the points' range, exact to rounding there (degree 20 to 64
    differ by 1e-15 of the peak: the quadrature's own rounding) (the transform
    is entire and |s| <= 1/2), instead of a quadrature per pixel."""
    lo, hi = float(np.min(s)), float(np.max(s))
    if hi - lo < 1e-12:
        return np.full(np.shape(s), kernel_transform(lo, support, beta))
    cheb = np.polynomial.Chebyshev.interpolate(lambda x: kernel_transform(x, support, beta), 24,
                                               domain=[lo, hi])
    out = np.empty(np.shape(s))

    def rows(r):
        out[r] = cheb(s[r])

    in_slices(workers, len(out), rows)
    return out


def _abs_w_range(uvw, scale, keep, workers: int = 1) -> tuple:
    """Smallest and largest |w| in wavelengths over the kept samples (w * freq / c: the
    rounding of a product by a positive factor is monotonic, so over all samples these
    are the extreme |w| of the rows times the extreme factors), on ``workers`` threads."""
    if keep is None:
        parts = []

        def extremes(rows):
            aw = np.abs(uvw[rows, 2])
            if aw.size:
                parts.append((aw.min(), aw.max()))

        in_slices(workers, uvw.shape[0], extremes)
        lo = float(min(a for a, _ in parts)) * float(scale.min())
        hi = float(max(b for _, b in parts)) * float(scale.max())
    else:
        ws = np.abs(uvw[:, 2])[:, None] * scale[None, :]
        lo, hi = float(ws[keep].min()), float(ws[keep].max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError("uvw has NaN or infinite entries (in unmasked samples)")
    return lo, hi


def _pixel_blocks(rows: slice, block_rows: slice, npix_y: int, pixels: int = PIXEL_RUN):
    """(a, b): the image rows both in ``rows`` and in ``block_rows``, cut into runs of
    about ``pixels`` pixels (npix_y per row), so that the w phases spread over a run stay
    in cache while they are used."""
    lo, hi = max(rows.start, block_rows.start), min(rows.stop, block_rows.stop)
    step = max(1, pixels // npix_y)
    return [(a, min(a + step, hi)) for a in range(lo, hi, step)]


def _stepping(index: np.ndarray):
    """``index`` (1-D) as a slice when it steps by +1 or -1 (or has one entry), else None."""
    if index.size == 0:
        return None
    first = int(index[0])
    if index.size == 1:
        return slice(first, first + 1)
    step = int(index[1]) - first
    if step not in (1, -1) or not np.all(np.diff(index) == step):
        return None
    stop = int(index[-1]) + step
    return slice(first, stop if stop >= 0 else None, step)


def _good_size(n: float) -> int:
    """The smallest even size >= n with only small prime factors (fast FFTs); ``n`` (sigma
    times the image's side) is rounded up, never down: a grid smaller than sigma asks for
    loses accuracy (measured: 16 pixels at sigma 1.4 became 22 cells, and the image missed
    epsilon by 1.4 times)."""
    import scipy.fft

    m = scipy.fft.next_fast_len(math.ceil(n))
    while m % 2:
        m = scipy.fft.next_fast_len(m + 1)
    return m


def _n_minus_one_range(x, y):
    """Smallest and largest ``n - 1`` over the image box (x and y pixel centres)."""
    cx = 0.0 if x[0] <= 0 <= x[-1] else min(abs(x[0]), abs(x[-1]))
    cy = 0.0 if y[0] <= 0 <= y[-1] else min(abs(y[0]), abs(y[-1]))
    far = max(x[0] ** 2, x[-1] ** 2) + max(y[0] ** 2, y[-1] ** 2)
    if far >= 1.0:
        raise ValueError("the image reaches beyond the horizon (x^2 + y^2 >= 1 at a corner): "
                         "lower pixsize_x/pixsize_y, npix or the centre offset")
    return math.sqrt(1.0 - far) - 1.0, math.sqrt(1.0 - cx * cx - cy * cy) - 1.0


def imaging_work(cells, planes, nu: int, nv: int):
    """A rough model of imaging's work, in one unit for both parts: spreading ``cells``
    footprint cells (one complex multiply-add each, counted once per plane a point
    touches) and transforming ``planes`` padded grids of ``nu`` x ``nv`` (5 N log2 N each).
    It ranks kernels (`choose_geometry`) and weighs w-planes (`clgrid.dask.slabs`)."""
    return cells * 8.0 + planes * 5.0 * nu * nv * math.log2(nu * nv)


def _image_fields(npix_x, npix_y, pixsize_x, pixsize_y, do_wgridding, signs, center_x, center_y) -> tuple:
    """The `Geometry` fields the image keywords set (checked, naming the argument), and
    half the range of ``n - 1 - nshift`` over the image (the w-plane spacing follows it)."""
    for name, n in (("npix_x", npix_x), ("npix_y", npix_y)):
        if int(n) != n or n < MIN_NPIX or n % 2:
            raise ValueError(f"{name} must be an even integer >= {MIN_NPIX}, got {n!r}")
    for name, p in (("pixsize_x", pixsize_x), ("pixsize_y", pixsize_y)):
        if not (np.isfinite(p) and p > 0):
            raise ValueError(f"{name} must be a positive angle in radians, got {p!r}")
    npix_x, npix_y = int(npix_x), int(npix_y)
    cx, cy = signs[0] * center_x, signs[1] * center_y
    x = (np.arange(npix_x) - npix_x // 2) * pixsize_x + cx
    y = (np.arange(npix_y) - npix_y // 2) * pixsize_y + cy
    t_lo, t_hi = _n_minus_one_range(x, y) if do_wgridding else (0.0, 0.0)
    fields = dict(npix_x=npix_x, npix_y=npix_y, pixsize_x=float(pixsize_x), pixsize_y=float(pixsize_y),
                  center_x=float(cx), center_y=float(cy), do_wgridding=bool(do_wgridding),
                  nshift=0.5 * (t_lo + t_hi) if do_wgridding else 0.0)
    return fields, max(0.5 * (t_hi - t_lo), 1e-12)


def _signs(flip_u, flip_v, flip_w) -> tuple:
    return -1.0 if flip_u else 1.0, -1.0 if flip_v else 1.0, -1.0 if flip_w else 1.0


def choose_geometry(npix_x: int, npix_y: int, pixsize_x: float, pixsize_y: float, epsilon: float,
                    do_wgridding: bool, w_range: tuple, num_kept: int, flip_u: bool = False, flip_v: bool = False,
                    center_x: float = 0.0, center_y: float = 0.0, sigma_min: float = 1.1, sigma_max: float = 2.6,
                    precision: str = "double") -> Geometry:
    """The padded grid, kernel and w-planes for imaging ``num_kept`` samples whose |w|
    (wavelengths, after the flips: the planes cover |w| only) spans ``w_range`` = (lo, hi),
    with `WGridder`'s keywords: what `WGridder` chooses from its own points, and what
    operators that share one grid and one stack of planes (`clgrid.dask.slabs`) are given.
    The kernel is the cheapest that reaches ``epsilon`` for spreading that many samples
    plus the FFTs of that many planes."""
    fields, t_half = _image_fields(npix_x, npix_y, pixsize_x, pixsize_y, do_wgridding,
                                   _signs(flip_u, flip_v, False), center_x, center_y)
    w_min, w_max = (float(w_range[0]), float(w_range[1])) if do_wgridding and num_kept else (0.0, 0.0)
    ndim = 3 if do_wgridding else 2
    nvis = max(int(num_kept), 1)

    def sizes(choice):
        nu, nv = _good_size(choice.sigma * fields["npix_x"]), _good_size(choice.sigma * fields["npix_y"])
        if not do_wgridding:
            return nu, nv, 1.0, 1
        dw = 1.0 / (2.0 * choice.sigma * t_half)
        # the first plane of the largest |w| by the planning's own arithmetic
        # (`Geometry.first_planes`), not (w_max - w_min) / dw: the two round apart, and a
        # point whose taps reached one plane past the stack was refused as an internal error
        w_start = w_min - choice.support / 2 * dw
        top = math.ceil((w_max - w_start) / dw - choice.support / 2.0)
        return nu, nv, dw, max(top, int(math.ceil((w_max - w_min) / dw)), 0) + choice.support

    def cost(choice):
        nu, nv, _, planes = sizes(choice)
        return imaging_work(nvis * choice.support ** ndim, planes, nu, nv)

    choice = choose_kernel(epsilon, precision, ndim, cost=cost, sigma_min=sigma_min, sigma_max=sigma_max)
    nu, nv, dw, planes = sizes(choice)
    return Geometry(nu=nu, nv=nv, kernel=choice, w_min=w_min, dw=dw, num_planes=planes, **fields)


def _check_geometry(geometry: Geometry, fields: dict, w_range: tuple | None) -> None:
    """Refuse a given geometry that another image describes, or whose w-planes do not
    hold every tap of the points (|w| spanning ``w_range``; None: no point kept)."""
    for name, mine in fields.items():
        if getattr(geometry, name) != mine:
            raise ValueError(f"geometry's {name} = {getattr(geometry, name)!r} differs from this operator's "
                             f"{mine!r} (from its keywords)")
    if not geometry.do_wgridding or w_range is None:
        return
    first = geometry.first_planes(np.asarray(w_range, np.float64))
    if first[0] < 0 or first[1] + geometry.kernel.support > geometry.num_planes:
        covered = geometry.w_min + (geometry.num_planes - geometry.kernel.support) * geometry.dw
        raise ValueError(f"geometry does not cover the points: their |w| spans [{w_range[0]:.6g}, "
                         f"{w_range[1]:.6g}] wavelengths, its w-planes [{geometry.w_min:.6g}, {covered:.6g}]")


def _plane_range(planes, geometry: Geometry) -> range:
    if planes is None:
        return range(geometry.num_planes)
    try:
        lo, hi = planes
        ok = int(lo) == lo and int(hi) == hi and 0 <= lo < hi <= geometry.num_planes
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"planes must be (lo, hi) with 0 <= lo < hi <= {geometry.num_planes} (the geometry's "
                         f"w-planes), got {planes!r}")
    return range(int(lo), int(hi))


class WGridder:
    """The imaging operator for one set of points: ``vis2dirty(vis, wgt)`` and
    ``dirty2vis(dirty, wgt)``, with the plan, device program, grid and FFT kept between
    calls (a major cycle calls both many times).  Calls on one operator are serialised
    by a lock (they share its device buffers).

    ``geometry`` (a `Geometry` from `choose_geometry`; None: chosen from these points)
    lets operators over parts of one data set share one padded grid, kernel and stack of
    w-planes; it must agree with the image keywords and hold every tap of the points
    (refused otherwise, naming what differs).  ``planes`` = (lo, hi) restricts the
    operator to w-planes lo..hi-1: it spreads, transforms and interpolates only the taps
    that fall on them, so over a partition of the planes the images add up to the whole
    image, and the visibilities to the whole visibilities; points whose taps all fall
    outside add nothing.  ``deterministic``: the same image bits from run to run, for a
    price: the points planned on the host (`clgrid.planning.stacking.plan_points`'s ``on_host``)
    and spread by rows (no atomics)."""

    def __init__(self, uvw, freq, npix_x: int, npix_y: int, pixsize_x: float, pixsize_y: float,
                 epsilon: float, do_wgridding: bool = False, mask=None, flip_u: bool = False,
                 flip_v: bool = False, flip_w: bool = False, divide_by_n: bool = True,
                 center_x: float = 0.0, center_y: float = 0.0, sigma_min: float = 1.1,
                 sigma_max: float = 2.6, precision: str = "double", device=None, nthreads: int = 0,
                 verbosity: int = 0, tuning: dict | None = None, geometry: Geometry | None = None,
                 planes: tuple | None = None, deterministic: bool = False):
        uvw = np.asarray(uvw, np.float64)
        freq = np.asarray(freq, np.float64).reshape(-1) if np.ndim(freq) else np.asarray([freq], np.float64)
        if uvw.ndim != 2 or uvw.shape[1] != 3:
            raise ValueError(f"uvw must have shape (nrow, 3), got {uvw.shape}")
        if freq.size == 0 or not np.all(np.isfinite(freq)) or np.any(freq <= 0):
            raise ValueError("freq must be a non-empty array of positive frequencies in Hz")
        signs = _signs(flip_u, flip_v, flip_w)
        fields, _ = _image_fields(npix_x, npix_y, pixsize_x, pixsize_y, do_wgridding, signs, center_x, center_y)
        self.nrow, self.nchan = uvw.shape[0], freq.size
        self.shape = (self.nrow, self.nchan)
        if self.nrow * self.nchan >= 1 << 31:
            raise ValueError(f"nrow * nchan = {self.nrow * self.nchan} visibilities: at most 2^31 - 1 per operator")
        self.npix_x, self.npix_y = fields["npix_x"], fields["npix_y"]
        self.precision = precision
        self.divide_by_n = bool(divide_by_n) and bool(do_wgridding)
        self.verbosity = verbosity
        self.real = np.float64 if precision == "double" else np.float32
        self.complex = np.complex128 if precision == "double" else np.complex64
        self._lock = threading.Lock()

        keep = None
        if mask is not None:
            mask = np.asarray(mask)
            if mask.shape != self.shape:
                raise ValueError(f"mask must have shape (nrow, nchan) = {self.shape}, got {mask.shape}")
            keep = mask != 0
        scale = freq / SPEED_OF_LIGHT
        num_kept = self.nrow * self.nchan if keep is None else int(np.count_nonzero(keep))
        # With w-gridding every point goes to w >= 0 (the image is real, so V at (u, v, w)
        # is conj(V) at (-u, -v, -w)): the planes cover |w| only, half the range.
        workers = self._workers = int(nthreads) if nthreads and nthreads > 0 else (os.cpu_count() or 1)
        w_range = _abs_w_range(uvw, scale, keep, workers) if do_wgridding and num_kept else None
        if geometry is None:
            geometry = choose_geometry(npix_x, npix_y, pixsize_x, pixsize_y, epsilon, do_wgridding, w_range,
                                       num_kept, flip_u, flip_v, center_x, center_y, sigma_min, sigma_max, precision)
        else:
            _check_geometry(geometry, fields, w_range)
        self.geometry = geometry
        self.planes = _plane_range(planes, geometry)
        self._setup_device(device, tuning, uvw, scale, keep, signs, bool(deterministic))
        if verbosity:
            g, choice = geometry, geometry.kernel
            print(f"clgrid.WGridder: {self.plan.num_vis} visibilities (planned on the {self.plan.planned_on}), "
                  f"grid {g.nu}x{g.nv}, support {choice.support}, sigma {choice.sigma}, beta {choice.beta:.3f}, "
                  f"w-planes {self.planes.start}:{self.planes.stop} of {g.num_planes}, spread {self.spread_mode}, "
                  f"fft {self.fft_mode}")

    # -- set-up -------------------------------------------------------------------------
    @cached_property
    def _host_pixels(self):
        """Per-pixel quantities on the host, for the host FFT and for devices without fp64,
        as factors (`_correction_rows` multiplies them out a share of rows at a time, so a
        call allocates no image-sized table): the grid correction's factors along x and y
        (``cu``, ``cv``), and with w its w factor ``w_small`` and t = n - 1 - nshift
        (``t_small``), both on the distinct |x|, |y| (``radial``, the image's row and column
        indices into them; None without w)."""
        g, k = self.geometry, self.geometry.kernel
        x, y = g.image_lm()
        cu, cv = self._uv_correction()
        t_small = w_small = radial = None
        if g.do_wgridding:
            # n, and all that depends on it, depends on x^2 + y^2 only: evaluated on the
            # distinct |x| and |y| (a quarter of the image when it is centred) and spread
            # back by indexing.
            ax, ix = np.unique(np.abs(x), return_inverse=True)
            ay, iy = np.unique(np.abs(y), return_inverse=True)
            radial = (ix.reshape(-1), iy.reshape(-1))
            n = np.sqrt(1.0 - ax[:, None] ** 2 - ay[None, :] ** 2)
            t_small = (n - 1.0) - g.nshift
            w_small = _smooth_transform(g.dw * t_small, k.support, k.beta, self._workers)
            if self.divide_by_n:
                w_small = w_small * n
        return SimpleNamespace(cu=cu, cv=cv, w_small=w_small, t_small=t_small, radial=radial)

    def _correction_rows(self, rows: slice) -> np.ndarray:
        """The grid correction (float64) at the image rows ``rows``, every column."""
        host = self._host_pixels
        corr = np.multiply.outer(host.cu[rows], host.cv)
        if host.w_small is not None:
            ix, iy = host.radial
            corr *= host.w_small[ix[rows]][:, iy]
        return corr

    def _uv_correction(self):
        """The grid correction's factors along x and y: the kernel's transform at each
        pixel's frequency on the padded grid."""
        g, k = self.geometry, self.geometry.kernel
        cu = kernel_transform((np.arange(g.npix_x) - g.npix_x // 2) / g.nu, k.support, k.beta)
        cv = kernel_transform((np.arange(g.npix_y) - g.npix_y // 2) / g.nv, k.support, k.beta)
        return cu, cv

    def _setup_device(self, device, tuning, uvw, scale, keep, signs, deterministic):
        self.queue = get_queue(device)
        facts = self.facts = device_facts(self.queue.device)
        check_precision(self.precision, facts, atomics=True)
        self.staging = shared_staging(self.queue)
        # tuning: the [wgridding] section's keys, and "atomic" (the [atomic] section's
        # float atomic path, for the global adds)
        tuning = dict(tuning or {})
        atomic_path = {"atomic": tuning.pop("atomic")} if "atomic" in tuning else None
        wparams = resolve_tuning("wgridding", tuning, facts)
        self.spread_mode = wparams["spread"]
        if deterministic and self.spread_mode != "rows":
            if tuning.get("spread") not in (None, "rows"):
                raise ValueError(f"deterministic=True needs spread 'rows' (no atomics), not tuning [wgridding] "
                                 f"spread={tuning['spread']!r}")
            self.spread_mode = "rows"
        if self.spread_mode not in SPREAD_MODES:
            raise ValueError(f"tuning [wgridding] spread must be one of {SPREAD_MODES}, got {self.spread_mode!r}")
        self.fft = HostFFT(self._workers, wparams["host_fft"])
        self.fft_mode = wparams["fft"]
        if self.fft_mode not in ("host", "mapped", "vkfft"):
            raise ValueError(f"tuning [wgridding] fft must be 'host', 'mapped' or 'vkfft', got {self.fft_mode!r}")
        g = self.geometry
        if self.spread_mode == "rows":
            layout = Layout("rows", g.nu, g.nv)
        else:
            layout = Layout("bins", g.nu, g.nv, wparams["bin_u"], wparams["bin_v"])
        self.layout = layout
        self.plan: PointPlan = plan_points(self.queue, uvw, scale, keep, signs, g, layout, fold=g.do_wgridding,
                                           double=self.precision == "double", staging=self.staging,
                                           on_host=deterministic)

        params = resolve_tuning("atomic", atomic_path, facts)
        path = params.get("atomic", "cas")
        if atomic_unavailable(path, facts, self.precision == "double"):
            path = "cas"
        kernel = g.kernel
        coef = horner_coefficients(kernel.support, kernel.beta)
        self._wg = 64
        self._bins_wg = wparams["bins_work_group"]
        source = render("wgrid_analytic.cl", double=self.precision == "double", atomic=path, deterministic=False,
                        es_width=kernel.support, use_w=g.do_wgridding, es_degree=len(coef) - 1,
                        es_coef=coef.tolist(),
                        bin_u=layout.bin_u if layout.kind == "bins" else 0, bin_v=layout.bin_v,
                        keys_per_plane=layout.keys_per_plane, wg=self._bins_wg,
                        subproblem=wparams["bins_subproblem"], batch=self._bins_batch(facts))
        program = build_program(self.queue.context, source,
                                tuple(params.get("build_options", ())) + build_options_for(path))
        self._spread = cl.Kernel(program, "spread")
        self._interp = cl.Kernel(program, "interp")
        ctx, mf = self.queue.context, cl.mem_flags
        n = max(self.plan.num_vis, 1)
        self._vis = cl.Buffer(ctx, mf.READ_WRITE, n * np.dtype(self.complex).itemsize)
        self._grid_bytes = g.nu * g.nv * np.dtype(self.complex).itemsize
        self._grid = cl.Buffer(ctx, mf.READ_WRITE, self._grid_bytes)
        self._setup_data(program)
        if self.spread_mode == "rows":
            self._setup_rows(program, n)
        if self.spread_mode == "bins":
            self._spread_bins = cl.Kernel(program, "spread_bins")
            self._setup_subproblems(wparams["bins_subproblem"])
        self.device_fft = None
        if self.fft_mode == "mapped":
            self.device_fft = MappedHostFFT(self.queue, g.nu, g.nv, self.complex, g.npix_x, self.fft)
        if self.fft_mode == "vkfft":
            try:
                self.device_fft = DeviceFFT(self.queue, g.nu, g.nv, self.complex)
            except ImportError as exc:
                warnings.warn(f"clgrid: {exc}; using the host FFT", stacklevel=3)
                self.fft_mode = "host"
        if self.device_fft is not None:
            self._setup_planes(facts)

    def _setup_planes(self, facts):
        """The image side on the device (device FFT): per-pixel correction and w phases
        (computed there with fp64, sent by the host without), accumulator."""
        g, ctx, mf = self.geometry, self.queue.context, cl.mem_flags
        phase_double = bool(facts.fp64)
        source = render("wgrid_planes.cl", double=self.precision == "double", use_w=g.do_wgridding,
                        phase_double=phase_double)
        program = build_program(ctx, source)
        self._accumulate = cl.Kernel(program, "accumulate")
        self._finish = cl.Kernel(program, "finish")
        self._load_plane = cl.Kernel(program, "load_plane")

        def copy(a, dtype):
            return read_only_buffer(ctx, np.asarray(a, dtype))

        if phase_double:
            self._pixel_args = self._pixels(copy)
        else:
            host = self._host_pixels
            t = host.t_small[np.ix_(*host.radial)] if host.t_small is not None else np.zeros((g.npix_x, g.npix_y))
            self._pixel_args = (copy(np.mod(g.w_start * t, 1.0), np.float32), copy(g.dw * t, np.float32),
                                copy(1.0 / self._correction_rows(slice(None)), self.real))
        npix_bytes = g.npix_x * g.npix_y * np.dtype(self.real).itemsize
        self._image_acc = cl.Buffer(ctx, mf.READ_WRITE, npix_bytes)
        self._image_out = cl.Buffer(ctx, mf.READ_WRITE, npix_bytes)
        self._npix_bytes = npix_bytes

    def _pixels(self, copy):
        """wgrid_planes.cl's pixel model: its geometry (pixels_t), the correction's factors
        in u and v, and the Chebyshev series of its w factor in dw t over the image."""
        g, k = self.geometry, self.geometry.kernel
        cu, cv = self._uv_correction()
        lo = hi = 0.0
        cheb = np.ones(1)
        if g.do_wgridding:
            x, y = g.image_lm()
            t_lo, t_hi = _n_minus_one_range(x, y)
            lo, hi = g.dw * (t_lo - g.nshift), g.dw * (t_hi - g.nshift)
            pad = 1e-9 * max(abs(lo), abs(hi), 1e-300)
            lo, hi = lo - pad, hi + pad
            cheb = np.polynomial.Chebyshev.interpolate(lambda s: kernel_transform(s, k.support, k.beta),
                                                       CHEBYSHEV_DEGREE, domain=[lo, hi]).coef
        pix = np.array([(g.pixsize_x, g.pixsize_y, g.center_x, g.center_y, g.nshift, g.w_start, g.dw, lo, hi,
                         g.npix_x, g.npix_y, cheb.size, int(self.divide_by_n))], PIXELS_T)[0]
        return pix, copy(cu, np.float64), copy(cv, np.float64), copy(cheb, np.float64)

    def _setup_data(self, program):
        """Buffers for the caller's (nrow * nchan) values, and the kernels that pick the kept
        ones in plan order (weighted, conjugated where the point moved, phase-shifted)."""
        ctx, mf = self.queue.context, cl.mem_flags
        total = max(self.nrow * self.nchan, 1)
        self._vis_full = cl.Buffer(ctx, mf.READ_WRITE, total * np.dtype(self.complex).itemsize)
        self._wgt_full = cl.Buffer(ctx, mf.READ_ONLY, total * np.dtype(self.real).itemsize)
        self._tally = cl.Buffer(ctx, mf.READ_WRITE, 4 * 3)
        self._no_phase = cl.Buffer(ctx, mf.READ_ONLY, np.dtype(self.complex).itemsize)
        self._gather = cl.Kernel(program, "gather_vis")
        self._scatter = cl.Kernel(program, "scatter_vis")

    def _data_launch(self, kernel, use_wgt):
        """Gather or scatter; returns the tally (non-finite values, non-finite weights,
        non-zero weighted values) of the kept visibilities."""
        p = self.plan
        fill_zeros(self.queue, self._tally, 12, np.int32)
        size = -(-max(p.num_vis, 1) // self._wg) * self._wg
        source, target = (self._vis_full, self._vis) if kernel is self._gather else (self._vis, self._vis_full)
        phase = p.phase if p.phase is not None else self._no_phase
        kernel(self.queue, (size,), (self._wg,), source, self._wgt_full, p.src, phase, target,
               np.int32(p.num_vis), np.int32(use_wgt), np.int32(p.phase is not None), self._tally)
        tally = np.empty(3, np.int32)
        cl.enqueue_copy(self.queue, tally, self._tally)
        return tally

    def _checked_wgt(self, wgt):
        """``wgt`` as an array of the data's shape, or None: checked when called, also where
        nothing is kept (its values are checked on the device, among the kept samples)."""
        if wgt is None:
            return None
        wgt = np.asarray(wgt)
        self._check_values("wgt", wgt, self.shape)
        return wgt

    def _upload_wgt(self, wgt):
        """``wgt`` (checked) to the device; False when there is none (every weight 1)."""
        if wgt is None:
            return False
        upload(self.queue, np.asarray(wgt, self.real), self._wgt_full, self.staging)
        return True

    def _setup_rows(self, program, n):
        """Kernel values of every visibility, once (they depend on the plan only); the
        plan's starts are where each (first plane, first u cell) run begins."""
        g, p, ctx, mf = self.geometry, self.plan, self.queue.context, cl.mem_flags
        taps = (3 if g.do_wgridding else 2) * g.kernel.support
        self._tap = cl.Buffer(ctx, mf.READ_WRITE, n * taps * np.dtype(self.real).itemsize)
        if p.num_vis:
            size = -(-p.num_vis // self._wg) * self._wg
            cl.Kernel(program, "compute_taps")(self.queue, (size,), (self._wg,), p.frac, self._tap,
                                               np.int32(p.num_vis))
        self._spread_rows = cl.Kernel(program, "spread_rows")
        self._interp_taps = cl.Kernel(program, "interp_taps")
        self._rows_wg = 8

    def _bins_batch(self, facts) -> int:
        """Points the "bins" spread holds in local memory at a time: one per work-item, or
        fewer where the tile and the batch would not fit (a wide kernel in double)."""
        if self.layout.kind != "bins":
            return 0
        real = np.dtype(self.real).itemsize
        w = self.geometry.kernel.support
        tile = (self.layout.bin_u + w - 1) * (self.layout.bin_v + w - 1) * 2 * real
        per_point = 2 * real + 2 * (w | 1) * real + 8
        batch = min(self._bins_wg, (facts.local_memory - tile - 256) // per_point)
        if batch < 1:
            raise ValueError(f"tuning [wgridding] bin_u={self.layout.bin_u}, bin_v={self.layout.bin_v}: the tile of "
                             f"{tile / 1024:.1f} KiB for a {w}^2 kernel leaves no room in the device's "
                             f"{facts.local_memory / 1024:.1f} KiB of local memory; use smaller bins")
        return int(batch)

    def _setup_subproblems(self, size: int):
        """The work-groups of the "bins" spread, plane by plane: (bin, piece) for every piece
        of at most ``size`` of the points with a tap on the plane whose first cell is in the
        bin.  ``self._jobs[p]`` is where plane p's begin; the last entry, where they end."""
        g, p, bins = self.geometry, self.plan, self.layout.keys_per_plane
        runs = np.diff(p.key_starts).reshape(g.num_planes, bins)         # points per (first plane, bin)
        planes = np.arange(g.num_planes)
        lowest = np.maximum(planes - g.kernel.support + 1, 0) if g.do_wgridding else planes
        # a plane's points in a bin: runs of first planes lowest..p, each bin's points
        # being contiguous within a first plane (key order), so counted run by run
        total = np.zeros((g.num_planes, bins), np.int32)
        for back in range(g.kernel.support if g.do_wgridding else 1):
            first_plane = planes - back
            valid = first_plane >= lowest
            total[valid] += runs[first_plane[valid]]
        pieces = (-(-total // size)).reshape(-1)                           # plane-major
        busy = np.flatnonzero(pieces)
        counts = pieces[busy]
        bin_of = np.repeat((busy % bins).astype(np.int32), counts)
        piece = np.arange(bin_of.size, dtype=np.int32) - np.repeat((np.cumsum(counts) - counts).astype(np.int32), counts)
        table = np.stack([bin_of, piece], axis=1) if bin_of.size else np.zeros((1, 2), np.int32)
        self._subproblems = read_only_buffer(self.queue.context, table.astype(np.int32))
        self._jobs = np.concatenate([[0], np.cumsum(pieces.reshape(g.num_planes, bins).sum(axis=1))]).tolist()

    def _launch_spread(self, plane: int, wait_for=None):
        g, p = self.geometry, self.plan
        if self.spread_mode == "atomic":
            return self._launch(self._spread, plane, wait_for)
        if p.active(plane, g.kernel.support)[1] == 0:
            return None
        if self.spread_mode == "bins":
            jobs = self._jobs[plane + 1] - self._jobs[plane]
            return self._spread_bins(self.queue, (jobs * self._bins_wg,), (self._bins_wg,), p.first, p.frac,
                                     self._vis, self._grid, p.starts, self._subproblems, np.int32(self._jobs[plane]),
                                     np.int32(g.nu), np.int32(g.nv), np.int32(plane), wait_for=wait_for)
        size = -(-g.nu // self._rows_wg) * self._rows_wg
        return self._spread_rows(self.queue, (size,), (self._rows_wg,), p.first, self._tap, self._vis,
                                 self._grid, p.starts, np.int32(g.nu), np.int32(g.nv), np.int32(plane),
                                 wait_for=wait_for)

    def _launch_interp(self, plane: int, wait_for=None):
        if self.spread_mode != "rows":
            return self._launch(self._interp, plane, wait_for)
        start, count = self.plan.active(plane, self.geometry.kernel.support)
        if count == 0:
            return None
        g = self.geometry
        size = -(-count // self._wg) * self._wg
        return self._interp_taps(self.queue, (size,), (self._wg,), self.plan.first, self._tap, self._grid,
                                 self._vis, np.int32(g.nu), np.int32(g.nv), np.int32(plane), np.int32(start),
                                 np.int32(count), wait_for=wait_for)

    def _launch(self, kernel, plane: int, wait_for=None):
        p = self.plan
        start, count = p.active(plane, self.geometry.kernel.support)
        if count == 0:
            return None
        g = self.geometry
        size = -(-count // self._wg) * self._wg
        args = (p.first, p.frac, self._vis if kernel is self._spread else self._grid,
                self._grid if kernel is self._spread else self._vis, np.int32(g.nu), np.int32(g.nv),
                np.int32(plane), np.int32(start), np.int32(count), self.real(g.kernel.beta))
        return kernel(self.queue, (size,), (self._wg,), *args, wait_for=wait_for)

    def _check_values(self, name, a, shape, complex_ok: bool = False):
        """Refuse ``a`` unless it has ``shape`` and numbers the operator can take: integers
        or floats, or complex where ``complex_ok`` (vis); an image and weights are real."""
        kinds = "iufc" if complex_ok else "iuf"
        if a.dtype.kind not in kinds:
            wanted = "a numeric (complex, float or integer)" if complex_ok else "a real (float or integer)"
            raise TypeError(f"{name} must be {wanted} array, got dtype {a.dtype}")
        if a.shape != shape:
            raise ValueError(f"{name} must have shape {shape}, got {a.shape}")

    def _zero_data_warning(self, what):
        warnings.warn(f"clgrid: no visibility is unmasked with non-zero weight; {what} is zero",
                      stacklevel=3)

    # -- the operator ---------------------------------------------------------------------
    def vis2dirty(self, vis, wgt=None, progress=None) -> np.ndarray:
        """The dirty image (npix_x, npix_y) of ``vis`` (nrow, nchan), in ducc0's normalisation.
        ``progress(n)``, if given, is called after each w-plane with n = 1 (a progress bar's
        ``update``); there are ``len(planes)`` of them."""
        vis = np.asarray(vis)
        self._check_values("vis", vis, self.shape, complex_ok=True)
        wgt = self._checked_wgt(wgt)
        with self._lock:
            return self._vis2dirty(vis, wgt, progress)

    def _vis2dirty(self, vis, wgt, progress):
        p, g = self.plan, self.geometry
        if p.num_vis == 0:
            self._zero_data_warning("the image")
            return np.zeros((g.npix_x, g.npix_y), self.real)
        # the caller's array goes up as it is; the device picks, weights, conjugates and
        # phase-shifts the kept visibilities (gather_vis), and counts what is wrong
        use_wgt = self._upload_wgt(wgt)
        upload(self.queue, np.asarray(vis, self.complex), self._vis_full, self.staging)
        bad_vis, bad_wgt, nonzero = self._data_launch(self._gather, use_wgt)
        if bad_vis:
            raise ValueError(f"vis has NaN or infinite entries where not masked ({bad_vis})")
        if bad_wgt:
            raise ValueError(f"wgt has NaN or infinite entries where not masked ({bad_wgt})")
        if nonzero == 0:
            self._zero_data_warning("the image")
            return np.zeros((g.npix_x, g.npix_y), self.real)
        if self.device_fft is not None:
            return self._vis2dirty_device(progress)
        image = np.zeros((g.npix_x, g.npix_y), np.float64)
        phase, step = self._plane_phases()
        for plane in self.planes:
            if self.plan.active(plane, g.kernel.support)[1]:
                zero = fill_zeros(self.queue, self._grid, self._grid_bytes, self.real)
                event = self._launch_spread(plane, [zero])
                grid = self._map_grid([event])
                blocks = self.fft.backward(grid, g.npix_x, g.npix_y)

                def rows(r, blocks=blocks):
                    scratch = self._pixel_scratch()
                    for (bi, bj), view in blocks:
                        for a, b in _pixel_blocks(r, bi, g.npix_y):
                            part = view[a - bi.start:b - bi.start]
                            if phase is not None:
                                np.multiply(part, self._phases_at(phase, a, b, bj, scratch), out=part)
                            image[a:b, bj] += part.real

                in_slices(self._workers, g.npix_x, rows)
                del blocks
                grid.base.release(self.queue)
            self._advance(phase, step)
            if progress is not None:
                progress(1)
        out = np.empty((g.npix_x, g.npix_y), self.real)
        not_finite = []

        def corrected(r):
            with np.errstate(over="ignore", invalid="ignore"):
                np.divide(image[r], self._correction_rows(r), out=out[r])
            not_finite.append(np.count_nonzero(~np.isfinite(out[r])))

        in_slices(self._workers, g.npix_x, corrected)
        self._check_image(sum(not_finite))
        return out

    def _check_image(self, not_finite: int) -> None:
        """The image's overflow check, on either path (`clgrid.checks.check_finite_result`)."""
        check_finite_result(not_finite, f"the {np.dtype(self.real).name} image", self.precision,
                            double="complex128 visibilities")

    def _plane_args(self, plane):
        g = self.geometry
        return (np.int32(g.nu), np.int32(g.nv), np.int32(g.npix_x), np.int32(g.npix_y), np.int32(plane))

    def _vis2dirty_device(self, progress):
        """Spread, transform and crop every plane on the device; one image comes back."""
        g, q = self.geometry, self.queue
        fill_zeros(q, self._image_acc, self._npix_bytes, self.real)
        fill_zeros(q, self._tally, 12, np.int32)
        for plane in self.planes:
            if self.plan.active(plane, g.kernel.support)[1]:
                zero = fill_zeros(q, self._grid, self._grid_bytes, self.real)
                self._launch_spread(plane, [zero])
                self.device_fft.backward(self._grid)
                self._accumulate(q, (g.npix_y, g.npix_x), None, self._grid, self._image_acc, *self._pixel_args,
                                 *self._plane_args(plane))
            if progress is not None:
                q.finish()
                progress(1)
        self._finish(q, (g.npix_y, g.npix_x), None, self._image_acc, self._image_out, *self._pixel_args,
                     np.int32(g.npix_x), np.int32(g.npix_y), self._tally)
        image = host_empty((g.npix_x, g.npix_y), self.real, self.staging)
        not_finite = np.empty(3, np.int32)
        cl.enqueue_copy(q, not_finite, self._tally)
        download(self.queue, self._image_out, image, self.staging)
        self._check_image(int(not_finite[0]))
        return image

    def _dirty2vis_device(self, dirty):
        """The dirty image up once, checked and divided by the correction there; each plane
        made from it, transformed and interpolated on the device."""
        g, q = self.geometry, self.queue
        upload(self.queue, np.asarray(dirty, self.real), self._image_acc, self.staging)
        fill_zeros(q, self._tally, 12, np.int32)
        self._finish(q, (g.npix_y, g.npix_x), None, self._image_acc, self._image_out, *self._pixel_args,
                     np.int32(g.npix_x), np.int32(g.npix_y), self._tally)
        not_finite = np.empty(1, np.int32)
        cl.enqueue_copy(q, not_finite, self._tally)
        check_finite_result(int(not_finite[0]), "dirty divided by the grid correction", self.precision,
                            double="a float64 image", inputs="the image")      # dirty is finite (checked)
        for plane in self.planes:
            if self.plan.active(plane, g.kernel.support)[1]:
                fill_zeros(q, self._grid, self._grid_bytes, self.real)
                self._load_plane(q, (g.npix_y, g.npix_x), None, self._image_out, *self._pixel_args, self._grid,
                                 *self._plane_args(plane))
                self.device_fft.forward(self._grid)
                self._launch_interp(plane)

    def _dirty2vis_host(self, dirty):
        """Each plane made on the host, transformed there and sent to the device."""
        g = self.geometry
        image = np.empty((g.npix_x, g.npix_y), np.float64)

        def corrected(r):
            np.divide(dirty[r], self._correction_rows(r), out=image[r])

        in_slices(self._workers, g.npix_x, corrected)
        phase, step = self._plane_phases()
        if phase is not None:                    # the conjugate phases, advanced in place
            np.conjugate(phase, out=phase)
            step = step.conj()
        for plane in self.planes:
            if self.plan.active(plane, g.kernel.support)[1]:
                grid = self._map_grid()
                blocks = self.fft.image_blocks(grid, g.npix_x, g.npix_y)

                def rows(r):
                    clear_outside(grid, g.npix_x, g.npix_y, r)    # the last plane's transform is there
                    scratch = self._pixel_scratch()
                    for (bi, bj), view in blocks:
                        for a, b in _pixel_blocks(r, bi, g.npix_y):
                            part = view[a - bi.start:b - bi.start]
                            if phase is None:
                                part[...] = image[a:b, bj]
                                continue
                            np.multiply(self._phases_at(phase, a, b, bj, scratch), image[a:b, bj], out=part)

                in_slices(self._workers, g.npix_x, rows)
                self.fft.forward(grid, g.npix_x)
                del blocks
                grid.base.release(self.queue)
                self._launch_interp(plane).wait()
            self._advance(phase, step)

    def _map_grid(self, wait_for=None):
        """The device grid as a host array (mapped: on a CPU device no copy is made; on a
        GPU the driver moves it).  Release with ``grid.base.release(queue)``."""
        g = self.geometry
        grid, _ = cl.enqueue_map_buffer(self.queue, self._grid, cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                        (g.nu, g.nv), self.complex, wait_for=wait_for, is_blocking=True)
        return grid

    def _plane_phases(self):
        """exp(-2 pi i w_p t) for the first of the operator's planes (a fresh copy: callers
        advance it, `_advance`) and the factor from one plane to the next, both on the
        distinct |x|, |y| (``_host_pixels``' small grid: a quarter of a centred image; the
        callers spread them over the image a few rows at a time, `_phases_at`); kept with the
        operator up to 8 M entries (128 MiB each)."""
        g = self.geometry
        if not g.do_wgridding:
            return None, None
        cached = getattr(self, "_phases", None)
        if cached is None:
            # complex128 in either precision: a running product in complex64 drifts.
            t = self._host_pixels.t_small
            cached = (np.empty(t.shape, np.complex128), np.empty(t.shape, np.complex128))
            w_first = g.w_start + self.planes.start * g.dw

            def rows(r):
                cached[0][r] = np.exp(-2j * np.pi * w_first * t[r])
                cached[1][r] = np.exp(-2j * np.pi * g.dw * t[r])

            in_slices(self._workers, t.shape[0], rows)
            if t.size <= 1 << 23:
                self._phases = cached
        return cached[0].copy(), cached[1]

    @cached_property
    def _phase_index(self):
        """Where each image row's and column's phases sit in the flattened small grid: row
        offsets (npix_x,) and columns (npix_y,)."""
        ix, iy = self._host_pixels.radial
        return (ix.reshape(-1) * self._host_pixels.t_small.shape[1]).astype(np.intp), iy.reshape(-1).astype(np.intp)

    def _pixel_scratch(self):
        """One thread's buffers for `_phases_at`, a run of `_pixel_blocks` each."""
        size = max(1, PIXEL_RUN // self.geometry.npix_y) * self.geometry.npix_y
        return SimpleNamespace(index=np.empty(size, np.intp), phases=np.empty(size, np.complex128))

    @cached_property
    def _column_runs(self) -> dict:
        """`_stepping` of the small grid's columns under each block of image columns (filled
        as the blocks are met: two for a centred image)."""
        return {}

    def _phases_at(self, small, a: int, b: int, cols: slice, scratch):
        """``small`` (on the distinct |x|, |y|) at image rows a..b-1 and columns ``cols``
        (complex128; read only: it may be a view of ``small``).  Where the rows and the
        columns each step through the small grid by one (every block of a centred image:
        its quadrants mirror the small grid) it is a view, strided backwards where they
        mirror it; else it is gathered into ``scratch`` (`_pixel_scratch`).  Nothing is
        allocated: in a Dask worker (whose allocator gives every large temporary fresh
        pages: distributed sets MALLOC_TRIM_THRESHOLD_) a temporary per run doubled the
        time of a call (measured, 4096^2)."""
        ix, iy = self._host_pixels.radial
        key = (cols.start, cols.stop)
        if key not in self._column_runs:
            self._column_runs[key] = _stepping(iy[cols])
        row_run, column_run = _stepping(ix[a:b]), self._column_runs[key]
        if row_run is not None and column_run is not None:
            return small[row_run, column_run]
        rows, columns = self._phase_index
        columns = columns[cols]
        shape = (b - a, columns.size)
        index = scratch.index[:shape[0] * shape[1]].reshape(shape)
        np.add(rows[a:b, None], columns[None, :], out=index)
        phases = scratch.phases[:index.size].reshape(shape)
        np.take(small.reshape(-1), index, out=phases, mode="clip")
        return phases

    def _advance(self, phase, step) -> None:
        """The phases from one plane to the next (in place, on ``workers`` threads)."""
        if phase is None:
            return

        def rows(r):
            phase[r] *= step[r]

        in_slices(self._workers, phase.shape[0], rows)

    def dirty2vis(self, dirty, wgt=None) -> np.ndarray:
        """Visibilities (nrow, nchan) of the image ``dirty`` (npix_x, npix_y): the adjoint."""
        dirty = np.asarray(dirty)
        g = self.geometry
        self._check_values("dirty", dirty, (g.npix_x, g.npix_y))
        if not np.all(np.isfinite(dirty)):
            raise ValueError("dirty has NaN or infinite entries")
        wgt = self._checked_wgt(wgt)
        with self._lock:
            return self._dirty2vis(dirty, wgt)

    def _dirty2vis(self, dirty, wgt):
        p = self.plan
        out = host_empty(self.shape, self.complex, self.staging)
        if p.num_vis == 0:
            self._zero_data_warning("every visibility")
            out[...] = 0
            return out
        fill_zeros(self.queue, self._vis, p.num_vis * np.dtype(self.complex).itemsize, self.real)
        if self.device_fft is not None:
            self._dirty2vis_device(dirty)
        else:
            self._dirty2vis_host(dirty)
        use_wgt = self._upload_wgt(wgt)
        fill_zeros(self.queue, self._vis_full, out.nbytes, self.real)
        bad_wgt = self._data_launch(self._scatter, use_wgt)[1]
        if bad_wgt:
            raise ValueError(f"wgt has NaN or infinite entries where not masked ({bad_wgt})")
        check_finite_result(count_nonfinite(self.queue, self._vis_full, 2 * out.size, self.real),
                            f"the {np.dtype(self.complex).name} visibilities", self.precision,
                            double="a float64 image", inputs="the image or the weights")
        download(self.queue, self._vis_full, out, self.staging)
        return out


def vis2dirty(*, uvw, freq, vis, wgt=None, mask=None, npix_x, npix_y, pixsize_x, pixsize_y, epsilon,
              do_wgridding=False, flip_u=False, flip_v=False, flip_w=False, divide_by_n=True,
              center_x=0.0, center_y=0.0, sigma_min=1.1, sigma_max=2.6, nthreads=1, verbosity=0,
              dirty=None, device=None, tuning=None, **ignored):
    """ducc0.wgridder.vis2dirty's call on an OpenCL device; see the module docstring.

    ``vis`` complex64 or complex128 sets the precision; the image is float32 or float64
    (npix_x, npix_y).  ``dirty``, if given, receives the result.  ``allow_nshift`` and
    ``double_precision_accumulation`` are accepted and have no effect.  ``device`` and
    ``tuning`` (overrides of the table's ``[wgridding]`` section: ``spread``, ``fft``) are
    clgrid's own.
    """
    _refuse_unknown(ignored)
    vis = np.asarray(vis)
    precision = precision_of(vis.dtype, "vis", {"single": np.complex64, "double": np.complex128})
    op = WGridder(uvw, freq, npix_x, npix_y, pixsize_x, pixsize_y, epsilon, do_wgridding, mask, flip_u,
                  flip_v, flip_w, divide_by_n, center_x, center_y, sigma_min, sigma_max, precision,
                  device, nthreads, verbosity, tuning)
    if dirty is not None:
        check_output(dirty, "dirty", (op.npix_x, op.npix_y), op.real)
    image = op.vis2dirty(vis, _checked_wgt(wgt, vis.real.dtype))
    if dirty is not None:
        dirty[...] = image
        return dirty
    return image


def dirty2vis(*, uvw, freq, dirty, wgt=None, mask=None, pixsize_x, pixsize_y, epsilon,
              do_wgridding=False, flip_u=False, flip_v=False, flip_w=False, divide_by_n=True,
              center_x=0.0, center_y=0.0, sigma_min=1.1, sigma_max=2.6, nthreads=1, verbosity=0,
              vis=None, device=None, npix_x=0, npix_y=0, tuning=None, **ignored):
    """ducc0.wgridder.dirty2vis's call on an OpenCL device: visibilities (nrow, nchan) of
    ``dirty`` (float32 or float64, which sets the precision); ``vis`` receives them if given."""
    _refuse_unknown(ignored)
    dirty = np.asarray(dirty)
    precision = precision_of(dirty.dtype, "dirty", {"single": np.float32, "double": np.float64})
    if dirty.ndim != 2:
        raise ValueError(f"dirty must be 2-D (npix_x, npix_y), got shape {dirty.shape}")
    for name, n, have in (("npix_x", npix_x, dirty.shape[0]), ("npix_y", npix_y, dirty.shape[1])):
        if n and n != have:
            raise ValueError(f"{name}={n} does not match dirty's shape {dirty.shape}")
    op = WGridder(uvw, freq, dirty.shape[0], dirty.shape[1], pixsize_x, pixsize_y, epsilon, do_wgridding,
                  mask, flip_u, flip_v, flip_w, divide_by_n, center_x, center_y, sigma_min, sigma_max,
                  precision, device, nthreads, verbosity, tuning)
    if vis is not None:
        check_output(vis, "vis", op.shape, op.complex)
    result = op.dirty2vis(dirty, _checked_wgt(wgt, dirty.dtype))
    if vis is not None:
        vis[...] = result
        return vis
    return result


def _checked_wgt(wgt, real_dtype):
    """``wgt`` as an array of floats (NaN and infinities are counted where they matter, on
    the device, among the unmasked visibilities)."""
    if wgt is None:
        return None
    wgt = np.asarray(wgt)
    if not np.issubdtype(wgt.dtype, np.floating):
        raise TypeError(f"wgt must be a float array, got {wgt.dtype}")
    return wgt


def _refuse_unknown(ignored):
    unknown = set(ignored) - {"allow_nshift", "double_precision_accumulation"}
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
