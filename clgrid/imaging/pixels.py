"""The imaging operator's per-pixel work (`PixelModel`): the grid correction an image is
divided by (the kernel's transform along x and y, and with w its transform in w at each
pixel's n - 1, through a Chebyshev series), and the w phases of each plane, on the host (for
the host FFT and for devices without fp64) or as the model a device kernel evaluates
(clgrid/cl_kernels/wgrid_planes.cl).  Quantities depending on n alone are kept on the distinct
|x| and |y| of the image (a quarter of a centred image) and spread over it a run of pixels
at a time, so that no image-sized table is made per call."""

from __future__ import annotations

from functools import cached_property, lru_cache
from types import SimpleNamespace

import numpy as np

from ..device.host_threads import in_slices
from ..sources.accuracy import kernel_transform
from .geometry import ImageGeometry, n_minus_one_range

__all__ = ["PixelModel", "PIXEL_RUN", "PIXELS_T", "pixel_blocks"]

PIXEL_RUN = 1 << 16             # pixels the host's per-pixel work takes at a time (its phases stay in cache)
CHEBYSHEV_DEGREE = 24          # the w correction's series: exact to rounding (see _smooth_transform)
PIXELS_T = np.dtype([("pixsize_x", np.float64), ("pixsize_y", np.float64), ("center_x", np.float64),
                     ("center_y", np.float64), ("nshift", np.float64), ("w_start", np.float64), ("dw", np.float64),
                     ("cheb_lo", np.float64), ("cheb_hi", np.float64), ("tilt_x", np.float64), ("tilt_y", np.float64),
                     ("npix_x", np.int32), ("npix_y", np.int32),
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


def pixel_blocks(rows: slice, block_rows: slice, npix_y: int, pixels: int = PIXEL_RUN):
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




@lru_cache(maxsize=32)
def _axis_correction(npix: int, n: int, support: int, beta: float) -> np.ndarray:
    """The kernel's transform at each pixel's frequency along one axis (read-only; kept, so
    that operators of one geometry made call after call compute it once)."""
    out = kernel_transform((np.arange(npix) - npix // 2) / n, support, beta)
    out.flags.writeable = False
    return out


class PixelModel:
    """The per-pixel work of one operator: ``geometry``, ``planes`` (the operator's), whether
    the image is divided by n, and the host threads it may use."""

    def __init__(self, geometry: ImageGeometry, planes: range, divide_by_n: bool, workers: int):
        self.geometry, self.planes, self.divide_by_n, self._workers = geometry, planes, divide_by_n, workers

    @cached_property
    def host(self):
        """Per-pixel quantities on the host, for the host FFT and for devices without fp64,
        as factors (`correction_rows` multiplies them out a share of rows at a time, so a
        call allocates no image-sized table): the grid correction's factors along x and y
        (``cu``, ``cv``), and with w its w factor ``w_small`` and t = n - 1 - nshift
        (``t_small``), both on the distinct |x|, |y| (``radial``, the image's row and column
        indices into them; None without w)."""
        g, k = self.geometry, self.geometry.kernel
        x, y = g.image_lm()
        cu, cv = self.uv_correction()
        t_small = w_small = radial = tilt = None
        if g.do_wgridding:
            # n, and all that depends on it, depends on x^2 + y^2 only: evaluated on the
            # distinct |x| and |y| (a quarter of the image when it is centred) and spread
            # back by indexing.
            ax, ix = np.unique(np.abs(x), return_inverse=True)
            ay, iy = np.unique(np.abs(y), return_inverse=True)
            radial = (ix.reshape(-1), iy.reshape(-1))
            n = np.sqrt(1.0 - ax[:, None] ** 2 - ay[None, :] ** 2)
            t_small = (n - 1.0) - g.nshift
            if g.tilted:
                # a recentred image: t = t_small + tilt_x x + tilt_y y; its w factor per pixel
                # (``w_small`` then the whole image's), its phases the radial ones times a
                # row and a column factor (`tilt_phases`)
                tilt = (g.tilt_x * x, g.tilt_y * y)
                t_full = t_small[np.ix_(radial[0], radial[1])] + tilt[0][:, None] + tilt[1][None, :]
                w_small = _smooth_transform(g.dw * t_full, k.support, k.beta, self._workers)
                del t_full
                if self.divide_by_n:
                    w_small *= n[np.ix_(radial[0], radial[1])]
            else:
                w_small = _smooth_transform(g.dw * t_small, k.support, k.beta, self._workers)
                if self.divide_by_n:
                    w_small = w_small * n
        return SimpleNamespace(cu=cu, cv=cv, w_small=w_small, t_small=t_small, radial=radial, tilt=tilt)

    def correction_rows(self, rows: slice) -> np.ndarray:
        """The grid correction (float64) at the image rows ``rows``, every column."""
        host = self.host
        corr = np.multiply.outer(host.cu[rows], host.cv)
        if host.w_small is not None and host.tilt is not None:
            corr *= host.w_small[rows]                          # per pixel
        elif host.w_small is not None:
            ix, iy = host.radial
            corr *= host.w_small[ix[rows]][:, iy]
        return corr

    def uv_correction(self):
        """The grid correction's factors along x and y: the kernel's transform at each
        pixel's frequency on the padded grid."""
        g, k = self.geometry, self.geometry.kernel
        return (_axis_correction(g.npix_x, g.nu, int(k.support), float(k.beta)),
                _axis_correction(g.npix_y, g.nv, int(k.support), float(k.beta)))


    def device_model(self, copy):
        """wgrid_planes.cl's pixel model: its geometry (pixels_t), the correction's factors
        in u and v, and the Chebyshev series of its w factor in dw t over the image."""
        g, k = self.geometry, self.geometry.kernel
        cu, cv = self.uv_correction()
        lo = hi = 0.0
        cheb = np.ones(1)
        if g.do_wgridding:
            x, y = g.image_lm()
            t_lo, t_hi = n_minus_one_range(x, y, g.tilt_x, g.tilt_y)
            lo, hi = g.dw * (t_lo - g.nshift), g.dw * (t_hi - g.nshift)
            pad = 1e-9 * max(abs(lo), abs(hi), 1e-300)
            lo, hi = lo - pad, hi + pad
            cheb = np.polynomial.Chebyshev.interpolate(lambda s: kernel_transform(s, k.support, k.beta),
                                                       CHEBYSHEV_DEGREE, domain=[lo, hi]).coef
        pix = np.array([(g.pixsize_x, g.pixsize_y, g.center_x, g.center_y, g.nshift, g.w_start, g.dw, lo, hi,
                         g.tilt_x, g.tilt_y, g.npix_x, g.npix_y, cheb.size, int(self.divide_by_n))], PIXELS_T)[0]
        return pix, copy(cu, np.float64), copy(cv, np.float64), copy(cheb, np.float64)

    def plane_phases(self):
        """exp(-2 pi i w_p t) for the first of the operator's planes (a fresh copy: callers
        advance it, `advance`) and the factor from one plane to the next, both on the
        distinct |x|, |y| (``host``' small grid: a quarter of a centred image; the
        callers spread them over the image a few rows at a time, `phases_at`); kept with the
        operator up to 8 M entries (128 MiB each)."""
        g = self.geometry
        if not g.do_wgridding:
            return None, None
        cached = getattr(self, "_phases", None)
        if cached is None:
            # complex128 in either precision: a running product in complex64 drifts.
            t = self.host.t_small
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
        ix, iy = self.host.radial
        return (ix.reshape(-1) * self.host.t_small.shape[1]).astype(np.intp), iy.reshape(-1).astype(np.intp)

    def scratch(self):
        """One thread's buffers for `phases_at`, a run of `_pixel_blocks` each."""
        size = max(1, PIXEL_RUN // self.geometry.npix_y) * self.geometry.npix_y
        return SimpleNamespace(index=np.empty(size, np.intp), phases=np.empty(size, np.complex128))

    @cached_property
    def _column_runs(self) -> dict:
        """`_stepping` of the small grid's columns under each block of image columns (filled
        as the blocks are met: two for a centred image)."""
        return {}

    def phases_at(self, small, a: int, b: int, cols: slice, scratch):
        """``small`` (on the distinct |x|, |y|) at image rows a..b-1 and columns ``cols``
        (complex128; read only: it may be a view of ``small``).  Where the rows and the
        columns each step through the small grid by one (every block of a centred image:
        its quadrants mirror the small grid) it is a view, strided backwards where they
        mirror it; else it is gathered into ``scratch`` (`scratch`).  Nothing is
        allocated: in a Dask worker (whose allocator gives every large temporary fresh
        pages: distributed sets MALLOC_TRIM_THRESHOLD_) a temporary per run made a call
        much slower (docs/benchmarks/dask.md)."""
        ix, iy = self.host.radial
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

    def tilt_phases(self, conjugate: bool = False):
        """A recentred image's w phases' row and column factors, exp(-2 pi i w_p tilt_x x) and
        the same in y, for the first of the operator's planes, with their steps from one
        plane to the next: (row, row_step, column, column_step) (conjugated with
        ``conjugate``), or None without a tilt (`advance_tilt` moves them on)."""
        tilt = self.host.tilt if self.geometry.do_wgridding else None
        if tilt is None:
            return None
        g = self.geometry
        w_first = g.w_start + self.planes.start * g.dw
        sign = 1.0 if conjugate else -1.0
        return (np.exp(sign * 2j * np.pi * w_first * tilt[0]), np.exp(sign * 2j * np.pi * g.dw * tilt[0]),
                np.exp(sign * 2j * np.pi * w_first * tilt[1]), np.exp(sign * 2j * np.pi * g.dw * tilt[1]))

    @staticmethod
    def advance_tilt(tilt) -> None:
        """`tilt_phases`' factors from one plane to the next (in place)."""
        if tilt is not None:
            tilt[0][...] *= tilt[1]
            tilt[2][...] *= tilt[3]

    def advance(self, phase, step) -> None:
        """The phases from one plane to the next (in place, on ``workers`` threads)."""
        if phase is None:
            return

        def rows(r):
            phase[r] *= step[r]

        in_slices(self._workers, phase.shape[0], rows)

