"""The imaging operator's geometry: the image, the padded grid it is gridded on, the kernel
(its width, shape and padding from ``epsilon``) and the stack of w-planes, chosen from the
image keywords and the points' |w| range (`choose_geometry`); operators over parts of one
data set (several devices, Dask slabs) share one."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..device.host_threads import in_slices
from ..sources.accuracy import KernelChoice, choose_kernel

__all__ = ["ImageGeometry", "choose_geometry", "imaging_work", "image_fields", "flip_signs", "abs_w_range",
           "check_geometry", "plane_ranges", "DIRECTIONS", "n_minus_one_range", "recentre_tilt",
           "MIN_NPIX", "GRID_CELL_LIMIT"]

MIN_NPIX = 16
DIRECTIONS = ("vis2dirty", "dirty2vis")       # an operator's two calls


# cells of a padded grid (and so pixels of an image) that the kernels index with 32-bit
# integers; beyond it an image is made in facets
GRID_CELL_LIMIT = 2 ** 31 - 1


@dataclass(frozen=True)
class ImageGeometry:
    """The image, its padded grid, the kernel and the stack of w-planes: what every part of one
    imaging operator shares (`choose_geometry` makes it)."""

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
    nshift: float = 0.0    # the w term s = nshift + t, |t| <= t_half over the image
    tilt_x: float = 0.0    # the w term s = n - 1 + tilt_x x + tilt_y y; points at u + tilt_x w, v + tilt_y w
    tilt_y: float = 0.0

    @property
    def w_start(self) -> float:
        """w of plane 0."""
        return self.w_min - self.kernel.support / 2 * self.dw

    @property
    def cells_per_wavelength(self) -> tuple:
        """(u, v) in wavelengths times these is the position in grid cells."""
        return self.nu * self.pixsize_x, self.nv * self.pixsize_y

    @property
    def tilted(self) -> bool:
        """Whether the w term is tilted (`recentre`: an off-centre image)."""
        return bool(self.tilt_x or self.tilt_y)

    def w_term(self, x, y):
        """The w term s at image coordinates x, y (arrays that broadcast): n - 1, plus the
        tilt; a point at (u, v, w) is gridded at (u + tilt_x w, v + tilt_y w, w)."""
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        s = np.sqrt(1.0 - x * x - y * y) - 1.0
        if self.tilted:
            s = s + self.tilt_x * x + self.tilt_y * y
        return s

    @property
    def has_phase(self) -> bool:
        """Whether gridding multiplies each visibility by a phase (centre shift, nshift)."""
        return bool(self.center_x or self.center_y or self.nshift)

    def first_planes(self, w):
        """The first w-plane of points at ``w`` (wavelengths, folded to w >= 0), as float64:
        their taps fall on planes first .. first + support - 1.  The planning's arithmetic
        (`clgrid.planning.host.stacked_positions`, plan_positions.cl), so that whoever splits points by plane agrees
        with it to the bit."""
        return np.ceil(self.plane_positions(w) - self.kernel.support / 2.0)

    def plane_positions(self, w):
        """Where points at ``w`` fall in the stack, in planes from plane 0."""
        return (np.asarray(w, np.float64) - self.w_start) / self.dw

    def image_lm(self):
        x = (np.arange(self.npix_x) - self.npix_x // 2) * self.pixsize_x + self.center_x
        y = (np.arange(self.npix_y) - self.npix_y // 2) * self.pixsize_y + self.center_y
        return x, y



def abs_w_range(uvw, scale, keep, workers: int = 1) -> tuple:
    """Smallest and largest |w| in wavelengths over the kept samples (w * freq / c: the
    rounding of a product by a positive factor is monotonic, so over all samples these
    are the extreme |w| of the rows times the extreme factors), on ``workers`` threads."""
    parts = []
    block_rows = 1 << 16                   # rows at a time: no temporaries of the data's size

    def extremes(rows):
        for a in range(rows.start, rows.stop, block_rows):
            block = slice(a, min(a + block_rows, rows.stop))
            if keep is None:
                kept = np.abs(uvw[block, 2])
            else:
                kept = (np.abs(uvw[block, 2])[:, None] * scale[None, :])[keep[block]]
            if kept.size:
                parts.append((kept.min(), kept.max()))

    in_slices(workers, uvw.shape[0], extremes)
    lo = float(min(a for a, _ in parts))
    hi = float(max(b for _, b in parts))
    if keep is None:
        lo, hi = lo * float(scale.min()), hi * float(scale.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError("uvw has NaN or infinite entries (in unmasked samples)")
    return lo, hi


def _good_size(n: float) -> int:
    """The smallest even size >= n with only small prime factors (fast FFTs); ``n`` (sigma
    times the image's side) is rounded up, never down: a grid smaller than sigma asks for
    loses the accuracy the kernel was chosen for (small images missed epsilon:
    docs/reliability.md)."""
    m = _next_fast_len(math.ceil(n))
    while m % 2:
        m = _next_fast_len(m + 1)
    return m


@functools.lru_cache(maxsize=4096)
def _next_fast_len(n: int) -> int:
    """The smallest m >= n whose prime factors are all 2, 3, 5, 7 or 11: what
    ``scipy.fft.next_fast_len(n)`` returns for complex transforms, without importing
    scipy.fft (which brings scipy.special, ~20 MiB, into the process)."""
    m = max(int(n), 1)
    while True:
        rest = m
        for p in (2, 3, 5, 7, 11):
            while rest % p == 0:
                rest //= p
        if rest == 1:
            return m
        m += 1


def n_minus_one_range(x, y, tilt_x: float = 0.0, tilt_y: float = 0.0):
    """Smallest and largest w term ``s = n - 1 + tilt_x x + tilt_y y`` over the image box (x
    and y pixel centres, increasing).  s is concave: its least value is at a corner, its
    greatest where its gradient vanishes (x / n = tilt_x, y / n = tilt_y: the origin
    without a tilt), or the point of the box nearest the origin."""
    far = max(x[0] ** 2, x[-1] ** 2) + max(y[0] ** 2, y[-1] ** 2)
    if far >= 1.0:
        raise ValueError("the image reaches beyond the horizon (x^2 + y^2 >= 1 at a corner): "
                         "lower pixsize_x/pixsize_y, npix or the centre offset")
    if not (tilt_x or tilt_y):
        cx = 0.0 if x[0] <= 0 <= x[-1] else min(abs(x[0]), abs(x[-1]))
        cy = 0.0 if y[0] <= 0 <= y[-1] else min(abs(y[0]), abs(y[-1]))
        return math.sqrt(1.0 - far) - 1.0, math.sqrt(1.0 - cx * cx - cy * cy) - 1.0

    def s(a, b):
        return math.sqrt(1.0 - a * a - b * b) - 1.0 + tilt_x * a + tilt_y * b

    n = 1.0 / math.sqrt(1.0 + tilt_x ** 2 + tilt_y ** 2)
    top_x, top_y = tilt_x * n, tilt_y * n
    if not (x[0] <= top_x <= x[-1] and y[0] <= top_y <= y[-1]):
        raise ValueError(f"clgrid internal error: a w-term tilt ({tilt_x}, {tilt_y}) whose top lies outside the image")
    return min(s(a, b) for a in (x[0], x[-1]) for b in (y[0], y[-1])), s(top_x, top_y)


def imaging_work(cells, planes, nu: int, nv: int):
    """A rough model of imaging's work, in one unit for both parts: spreading ``cells``
    footprint cells (one complex multiply-add each, counted once per plane a point
    touches) and transforming ``planes`` padded grids of ``nu`` x ``nv`` (5 N log2 N each).
    It ranks kernels (`choose_geometry`) and weighs w-planes (`clgrid.dask.slabs`)."""
    return cells * 8.0 + planes * 5.0 * nu * nv * math.log2(nu * nv)


def recentre_tilt(center_x: float, center_y: float) -> tuple:
    """The w-term tilt of an image centred at (center_x, center_y) (flipped): the slope of
    n there, so that s = n - 1 + tilt . (x, y) is flat at the centre and its range over the
    image is about a centred image's (ducc0 0.42 recentres the same way: its plane count
    for an off-centre field is a centred field's)."""
    n0 = math.sqrt(1.0 - center_x ** 2 - center_y ** 2)
    return center_x / n0, center_y / n0


def image_fields(npix_x, npix_y, pixsize_x, pixsize_y, do_wgridding, signs, center_x, center_y,
                 recentre: bool = False) -> tuple:
    """The `ImageGeometry` fields the image keywords set (checked, naming the argument), and
    half the range of the w term ``s - nshift`` over the image (the w-plane spacing follows
    it).  ``recentre``: tilt the w term of an off-centre image (`recentre_tilt`)."""
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
    tilt = recentre_tilt(cx, cy) if do_wgridding and recentre and (cx or cy) else (0.0, 0.0)
    t_lo, t_hi = n_minus_one_range(x, y, *tilt) if do_wgridding else (0.0, 0.0)
    fields = dict(npix_x=npix_x, npix_y=npix_y, pixsize_x=float(pixsize_x), pixsize_y=float(pixsize_y),
                  center_x=float(cx), center_y=float(cy), do_wgridding=bool(do_wgridding),
                  nshift=0.5 * (t_lo + t_hi) if do_wgridding else 0.0, tilt_x=float(tilt[0]), tilt_y=float(tilt[1]))
    return fields, max(0.5 * (t_hi - t_lo), 1e-12)


def flip_signs(flip_u, flip_v, flip_w) -> tuple:
    """+1 or -1 per axis: -1 where the axis is flipped."""
    return -1.0 if flip_u else 1.0, -1.0 if flip_v else 1.0, -1.0 if flip_w else 1.0


def choose_geometry(npix_x: int, npix_y: int, pixsize_x: float, pixsize_y: float, epsilon: float,
                    do_wgridding: bool, w_range: tuple, num_kept: int, flip_u: bool = False, flip_v: bool = False,
                    center_x: float = 0.0, center_y: float = 0.0, sigma_min: float = 1.1, sigma_max: float = 2.6,
                    precision: str = "double", recentre: bool = False) -> ImageGeometry:
    """The padded grid, kernel and w-planes for imaging ``num_kept`` samples whose |w|
    (wavelengths, after the flips: the planes cover |w| only) spans ``w_range`` = (lo, hi),
    with `WGridder`'s keywords: what `WGridder` chooses from its own points, and what
    operators that share one grid and one stack of planes (`clgrid.dask.slabs`) are given.
    The kernel is the cheapest that reaches ``epsilon`` for spreading that many samples
    plus the FFTs of that many planes.  ``recentre``: tilt the w term of an off-centre image
    (`recentre_tilt`: fewer planes; the engine must grid with it)."""
    fields, t_half = image_fields(npix_x, npix_y, pixsize_x, pixsize_y, do_wgridding,
                                   flip_signs(flip_u, flip_v, False), center_x, center_y, recentre)
    w_min, w_max = (float(w_range[0]), float(w_range[1])) if do_wgridding and num_kept else (0.0, 0.0)
    ndim = 3 if do_wgridding else 2
    nvis = max(int(num_kept), 1)

    def sizes(choice):
        nu, nv = _good_size(choice.sigma * fields["npix_x"]), _good_size(choice.sigma * fields["npix_y"])
        if not do_wgridding:
            return nu, nv, 1.0, 1
        dw = 1.0 / (2.0 * choice.sigma * t_half)
        # the first plane of the largest |w| by the planning's own arithmetic
        # (`ImageGeometry.first_planes`), not (w_max - w_min) / dw: the two round apart, and a
        # point whose taps reached one plane past the stack was refused as an internal error
        w_start = w_min - choice.support / 2 * dw
        top = math.ceil((w_max - w_start) / dw - choice.support / 2.0)
        return nu, nv, dw, max(top, int(math.ceil((w_max - w_min) / dw)), 0) + choice.support

    def cost(choice):
        nu, nv, _, planes = sizes(choice)
        return imaging_work(nvis * choice.support ** ndim, planes, nu, nv)

    choice = choose_kernel(epsilon, precision, ndim, cost=cost, sigma_min=sigma_min, sigma_max=sigma_max)
    nu, nv, dw, planes = sizes(choice)
    return ImageGeometry(nu=nu, nv=nv, kernel=choice, w_min=w_min, dw=dw, num_planes=planes, **fields)


def check_geometry(geometry: ImageGeometry, fields: dict, w_range: tuple | None) -> None:
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


def plane_ranges(planes, geometry: ImageGeometry) -> tuple:
    """`WGridder`'s ``planes`` checked: None (every plane), (lo, hi), or one (lo, hi) per
    direction, {"vis2dirty": (lo, hi), "dirty2vis": (lo, hi)} (lo == hi: none; a direction
    left out takes every plane held).

    Returns
    -------
    (held, calls): the range of planes whose samples the operator holds (from the lowest
    to the highest of the directions' planes), and None (each call takes ``held``) or
    {direction: range} (an empty range where a direction takes none)."""
    if not isinstance(planes, dict):
        return _plane_range(planes, geometry), None
    unknown = sorted(set(map(str, planes)) - set(DIRECTIONS))
    if unknown or not planes:
        raise ValueError(f"planes given per direction takes the keys {DIRECTIONS}, got {sorted(map(str, planes))}")
    given = {}
    for direction, pair in planes.items():
        try:
            lo, hi = pair
            ok = int(lo) == lo and int(hi) == hi and 0 <= lo <= hi <= geometry.num_planes
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"planes[{direction!r}] must be (lo, hi) with 0 <= lo <= hi <= {geometry.num_planes} "
                             f"(the geometry's w-planes), got {pair!r}")
        given[direction] = (int(lo), int(hi))
    taken = [(lo, hi) for lo, hi in given.values() if lo < hi]
    if not taken:
        raise ValueError(f"planes given per direction must give some direction a plane, got {planes!r}")
    held = range(min(lo for lo, _ in taken), max(hi for _, hi in taken))
    calls = {d: range(*given[d]) if d in given and given[d][0] < given[d][1] else
             (range(held.start, held.start) if d in given else held) for d in DIRECTIONS}
    return held, calls


def _plane_range(planes, geometry: ImageGeometry) -> range:
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


