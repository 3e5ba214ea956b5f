"""Images whose padded grid does not fit one device: the image cut into facets, each imaged
by its own operator (`FacetedImager`).

A facet is a rectangle of the image's pixels imaged as an image of its own: the same
pixel size, its own ``npix`` and a centre offset (``center_x``, ``center_y``) that puts
its pixels exactly where the whole image has them.  Its operator chooses its geometry
for itself (`choose_geometry`): a padded grid of its own size, the range of ``n - 1``
over its own pixels (so an off-centre facet needs fewer w-planes than the whole field),
and the kernel that is cheapest for that many planes.  Every visibility reaches every
facet.  ``vis2dirty`` images each facet and places it in the whole image;
``dirty2vis`` (the adjoint) sums the visibilities of the facets of the image.

Each facet's result is within ``epsilon`` of the exact sum over its own pixels
(ducc0's measure: relative L2), so the assembled image is within ``epsilon`` of the
whole image's; the visibilities are a sum over facets whose errors add, so each facet
is imaged at ``epsilon / sqrt(number of facets)`` (a bound on the sum of errors that
are independent across facets; tests/test_facets.py measures both against ducc0).

`plan_facets` decides: facets when asked (``facets=(fx, fy)``); else where the whole padded
grid does not fit the device (`grid_fits`: its largest buffer, as
`clgrid.device.runtime.device_facts` reads it, NVIDIA's 8 GiB cap included, and half its
memory), the fewest facets whose grids each fit; and where the w term is recentred (each
facet's tilted to its centre, `clgrid.imaging.geometry.recentre_tilt`, so that a facet
needs about its own field's planes), more facets where the work model says they cost at
most half as much.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyopencl as cl

from ..call_warnings import said_once
from ..errors import HostMemoryError
from ..operators.checks import check_finite_result
from ..sources.accuracy import min_epsilon
from .geometry import GRID_CELL_LIMIT, MIN_NPIX, ImageGeometry, choose_geometry, imaging_work
from .memory import check_host_memory, engine_device_bytes

__all__ = ["Facet", "FacetedImager", "faceted_operator", "DeviceLimits", "device_limits", "facet_layout", "grid_fits", "plan_facets",
           "facet_epsilon"]


@dataclass(frozen=True)
class Facet:
    """One facet: its pixels in the whole image (``rows`` along x, the first axis; ``cols``
    along y) and the centre keywords that make an image of exactly those pixels (in the
    caller's convention, before the flips)."""

    rows: slice
    cols: slice
    center_x: float
    center_y: float

    @property
    def npix_x(self) -> int:
        return self.rows.stop - self.rows.start

    @property
    def npix_y(self) -> int:
        return self.cols.stop - self.cols.start


def _bounds(npix: int, parts: int) -> list:
    """``npix`` pixels cut into ``parts`` runs of even length, as equal as can be."""
    edges = [2 * round(k * npix / (2 * parts)) for k in range(parts + 1)]
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]


def check_parts(facets, npix_x: int, npix_y: int) -> tuple | None:
    """``facets`` (the keyword) as (fx, fy), or None for the automatic choice; refused by
    name where it is not a pair of positive integers or cuts a facet below
    ``MIN_NPIX`` pixels or to an odd size."""
    if facets is None or (isinstance(facets, str) and facets == "auto"):
        return None
    try:
        fx, fy = facets
        ok = int(fx) == fx and int(fy) == fy and fx >= 1 and fy >= 1
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"facets must be None, 'auto' or (fx, fy), positive integers, got {facets!r}")
    fx, fy = int(fx), int(fy)
    for name, n, parts in (("npix_x", npix_x, fx), ("npix_y", npix_y, fy)):
        if min(s.stop - s.start for s in _bounds(n, parts)) < MIN_NPIX:
            raise ValueError(f"facets={facets!r}: {name}={n} cut {parts} ways leaves facets under {MIN_NPIX} "
                             f"pixels; use fewer facets")
    return fx, fy


def facet_layout(npix_x: int, npix_y: int, pixsize_x: float, pixsize_y: float, parts: tuple,
                 center_x: float = 0.0, center_y: float = 0.0, flip_u: bool = False,
                 flip_v: bool = False) -> list:
    """The ``parts`` = (fx, fy) facets of an image, row-major.

    Pixel ``ix`` of the whole image lies at ``(ix - npix_x // 2) * pixsize_x + s_u *
    center_x`` (``s_u = -1`` with ``flip_u``); a facet of ``n`` pixels starting at ``a`` puts
    its pixel ``ix - a`` there with ``center_x + s_u * (a + n // 2 - npix_x // 2) * pixsize_x``.
    """
    s_u, s_v = (-1.0 if flip_u else 1.0), (-1.0 if flip_v else 1.0)
    out = []
    for rows in _bounds(npix_x, parts[0]):
        for cols in _bounds(npix_y, parts[1]):
            cx = center_x + s_u * (rows.start + (rows.stop - rows.start) // 2 - npix_x // 2) * pixsize_x
            cy = center_y + s_v * (cols.start + (cols.stop - cols.start) // 2 - npix_y // 2) * pixsize_y
            out.append(Facet(rows, cols, float(cx), float(cy)))
    return out


def facet_epsilon(epsilon: float, count: int, precision: str) -> float:
    """The accuracy each of ``count`` facets is imaged at (see the module docstring), no
    finer than the precision allows."""
    return max(epsilon / math.sqrt(count), min(epsilon, min_epsilon(precision)))


@dataclass(frozen=True)
class DeviceLimits:
    """The device memory an operator's grid may take: ``max_allocation`` (one buffer) and
    ``global_memory`` (bytes), the smallest over the operator's devices."""

    max_allocation: int
    global_memory: int
    name: str = ""
    shares_host_memory: bool = False     # a CPU device: its buffers are host memory


def device_limits(device) -> DeviceLimits:
    """`DeviceLimits` of ``device`` (anything ``device=`` takes, or a list of them)."""
    from ..device.runtime import device_facts

    found = [q.device for q in _queues(device)]
    facts = [device_facts(d) for d in found]
    least = min(facts, key=lambda f: f.max_allocation)
    shared = any(d.type & cl.device_type.CPU or d.host_unified_memory for d in found)
    return DeviceLimits(min(f.max_allocation for f in facts), min(f.global_memory for f in facts), least.name,
                        bool(shared))


def _queues(device) -> list:
    """The command queues ``device`` names (one, or a list: `clgrid.imaging.devices`)."""
    from ..device.runtime import get_queue
    from .devices import device_list, queues_for

    devices = device_list(device)
    return [get_queue(device)] if devices is None else queues_for(devices)


def grid_bytes(geometry: ImageGeometry, precision: str) -> int:
    """The padded grid's bytes (one complex value a cell)."""
    return geometry.nu * geometry.nv * (16 if precision == "double" else 8)


def grid_fits(geometry: ImageGeometry, precision: str, limits: DeviceLimits) -> bool:
    """Whether one operator's grid fits the device: in one buffer, and with the image-side
    buffers of a device FFT (accumulator, output and per-pixel tables: at most 5 images'
    worth) in half of its memory, the other half left to the points; and its cells within
    the kernels' 32-bit indices (`GRID_CELL_LIMIT`)."""
    real = 8 if precision == "double" else 4
    grid = grid_bytes(geometry, precision)
    return geometry.nu * geometry.nv <= GRID_CELL_LIMIT and grid <= limits.max_allocation and grid + 5 * geometry.npix_x * geometry.npix_y * real \
        <= limits.global_memory // 2


# Facets are chosen over one grid that fits only where the work model says they cost at most
# half as much (the model is rough: spreading and FFT work in one unit, weighed alike on
# every device); at most MAX_SIDE x MAX_SIDE of them unless the grid needs more, each at
# least MIN_FACET pixels a side where chosen for speed.
FACET_GAIN = 2.0
MAX_SIDE = 8
MIN_FACET = 512


def _candidates(npix_x: int, npix_y: int, start: int = 1):
    """(fx, fy) to try, fewest facets first from about ``start`` a side, the facets about
    square in pixels."""
    seen = set()
    for k in range(max(1, start), max(npix_x, npix_y) // MIN_NPIX + 1):
        big = max(npix_x, npix_y)
        fx = max(1, min(npix_x // MIN_NPIX, round(k * npix_x / big)))
        fy = max(1, min(npix_y // MIN_NPIX, round(k * npix_y / big)))
        if (fx, fy) not in seen:
            seen.add((fx, fy))
            yield fx, fy


def _facet_geometries(parts: tuple, keywords: dict, w_range, num_kept: int, which=None) -> tuple:
    """The facets of ``parts`` and their geometries (only those of the facet indices
    ``which``, if given)."""
    k = keywords
    layout = facet_layout(k["npix_x"], k["npix_y"], k["pixsize_x"], k["pixsize_y"], parts, k["center_x"],
                          k["center_y"], k["flip_u"], k["flip_v"])
    eps = facet_epsilon(k["epsilon"], len(layout), k["precision"])
    chosen = layout if which is None else [layout[i] for i in which]
    geometries = [choose_geometry(f.npix_x, f.npix_y, k["pixsize_x"], k["pixsize_y"], eps, k["do_wgridding"],
                                  w_range, num_kept, k["flip_u"], k["flip_v"], f.center_x, f.center_y,
                                  k["sigma_min"], k["sigma_max"], k["precision"], k.get("recentre", False))
                  for f in chosen]
    return layout, geometries


def work(geometry: ImageGeometry, num_kept: int) -> float:
    """`imaging_work` of one operator: spreading ``num_kept`` points, transforming its planes."""
    ndim = 3 if geometry.do_wgridding else 2
    return imaging_work(max(num_kept, 1) * geometry.kernel.support ** ndim, geometry.num_planes, geometry.nu,
                        geometry.nv)


def plan_facets(facets, whole: ImageGeometry, keywords: dict, w_range, num_kept: int, device,
                limits: DeviceLimits | None = None, num_samples: int | None = None) -> tuple | None:
    """The facets of an operator, with each facet's geometry: ``([Facet], [ImageGeometry])``,
    or None for one grid (the whole image's ``whole``).

    ``facets``: the keyword.  (1, 1): one grid; (fx, fy): those facets.  None or "auto":
    by the work model (`work`: spreading plus the FFTs of the planes) over F x F facets,
    F up to `MAX_SIDE`, each estimated by its corner facet (the most planes): one grid
    where it fits the device (`grid_fits`), else the fewest facets whose grids fit,
    unless more facets cost at most 1 / `FACET_GAIN` of that, and all their operators
    fit half the device's memory at once (`engine_device_bytes`: a major cycle keeps
    them).  The search
    runs only where facets could win (a recentred w term, at least `MIN_FACET` pixels a
    facet and 3 W planes) or must (the grid does not fit).

    ``keywords``: the image keywords of `choose_geometry` (npix_x, npix_y, pixsize_x,
    pixsize_y, epsilon, do_wgridding, flip_u, flip_v, center_x, center_y, sigma_min,
    sigma_max, precision, and recentre: whether to tilt the w term); ``w_range``,
    ``num_kept``: the points' |w| range and count; ``num_samples``: nrow * nchan (the
    operators' memory; default ``num_kept``)."""
    k = keywords
    parts = check_parts(facets, k["npix_x"], k["npix_y"])
    if parts == (1, 1):
        return None
    if parts is not None:
        return _facet_geometries(parts, k, w_range, num_kept)
    limits = limits or device_limits(device)
    num_samples = num_kept if num_samples is None else num_samples
    precision, big = k["precision"], max(k["npix_x"], k["npix_y"])
    fits = grid_fits(whole, precision, limits)
    could_win = k.get("recentre", False) and whole.do_wgridding and \
        whole.num_planes >= 3 * whole.kernel.support and big >= 2 * MIN_FACET
    if fits and not could_win:
        return None
    # a facet's grid scales with its pixels: start near the count that could fit
    over = grid_bytes(whole, precision) / max(limits.max_allocation, 1)
    first = 2 if fits else max(2, int(math.sqrt(over)))
    best, fewest = None, None              # (cost, parts): the cheapest keepable, the fewest that fit
    for fx, fy in _candidates(k["npix_x"], k["npix_y"], first):
        side = max(fx, fy)
        if side > max(MAX_SIDE, first) or (fits and big // side < MIN_FACET):
            break
        layout, (corner,) = _facet_geometries((fx, fy), k, w_range, num_kept, which=[0])
        if not grid_fits(corner, precision, limits):
            continue
        cost = len(layout) * work(corner, num_kept)
        fewest = fewest or (cost, (fx, fy))
        if len(layout) * engine_device_bytes(corner, precision, num_samples) > limits.global_memory // 2:
            continue
        if best is None or cost < best[0]:
            best = (cost, (fx, fy))
    # the baseline: one grid where it fits, else the fewest facets that do; more facets
    # only for half the work
    baseline = (work(whole, num_kept), None) if fits else fewest
    if best is not None and (baseline is None or baseline[0] >= FACET_GAIN * best[0]):
        chosen = best[1]
    elif baseline is not None:
        chosen = baseline[1]
    else:                           # the fewest that fit, past MAX_SIDE
        return _fewest_that_fit(k, w_range, num_kept, limits, (first, first))
    if chosen is None:
        return None
    layout, geometries = _facet_geometries(chosen, k, w_range, num_kept)
    if not all(grid_fits(g, precision, limits) for g in geometries):      # a facet of other size than the corner's
        return _fewest_that_fit(k, w_range, num_kept, limits, chosen)
    return layout, geometries


def _fewest_that_fit(k, w_range, num_kept, limits, start):
    for parts in _candidates(k["npix_x"], k["npix_y"], max(start)):
        layout, geometries = _facet_geometries(parts, k, w_range, num_kept)
        if all(grid_fits(g, k["precision"], limits) for g in geometries):
            return layout, geometries
    raise AssertionError("unreachable: facets of MIN_NPIX pixels always fit")     # pragma: no cover


def faceted_operator(facets, whole: ImageGeometry, keywords: dict, w_range, num_kept: int, num_samples: int,
                     device, make, given: bool = False, verbosity: int = 0):
    """What `clgrid.WGridder` runs: a `FacetedImager` over facet operators, or None for one
    grid; in either case the host's memory checked first (`check_host_memory`).

    ``facets``, ``whole``, ``keywords``, ``w_range``, ``num_kept``: as `plan_facets`'s;
    ``num_samples``: nrow * nchan; ``make(facet, geometry, epsilon)``: facet's operator;
    ``given``: the caller gave the geometry or a plane range (one grid shared with other
    operators: facets are not chosen, and asking for them is refused)."""
    k = keywords
    limits = device_limits(device)
    # what any way of imaging needs (the image, the visibilities) first: no facets are
    # searched for an image the host cannot hold
    check_host_memory(k["npix_x"], k["npix_y"], k["precision"], num_samples, [], False, False)
    if given:
        if check_parts(facets, k["npix_x"], k["npix_y"]) not in (None, (1, 1)):
            raise ValueError(f"facets={facets!r} cannot be combined with geometry= or planes= (those share one "
                             f"grid with other operators)")
        layout = None
    else:
        layout = plan_facets(facets, whole, k, w_range, num_kept, device, limits, num_samples)
    geometries = [whole] if layout is None else layout[1]
    each_epsilon = k["epsilon"] if layout is None else facet_epsilon(k["epsilon"], len(layout[0]), k["precision"])
    check_host_memory(k["npix_x"], k["npix_y"], k["precision"], num_samples, geometries,
                      limits.shares_host_memory, layout is not None, epsilon=each_epsilon,
                      device_memory=limits.global_memory)
    if layout is None:
        return None
    facet_list, geometries = layout
    eps = facet_epsilon(k["epsilon"], len(facet_list), k["precision"])
    # kept between calls where all the facets' operators fit the device at once (and the
    # host, where the device's memory is the host's)
    keep = sum(engine_device_bytes(g, k["precision"], num_samples) for g in geometries) <= limits.global_memory // 2
    if keep and limits.shares_host_memory:
        try:
            check_host_memory(k["npix_x"], k["npix_y"], k["precision"], num_samples, geometries, True, True,
                              together=True, epsilon=eps)
        except HostMemoryError:
            keep = False
    if verbosity:
        fx, fy = len({f.rows.start for f in facet_list}), len({f.cols.start for f in facet_list})
        if check_parts(facets, k["npix_x"], k["npix_y"]):
            why = "asked for"
        elif grid_fits(whole, k["precision"], limits):
            why = (f"the work model: {sum(work(g, num_kept) for g in geometries):.3g} against one grid's "
                   f"{work(whole, num_kept):.3g}")
        else:
            why = (f"the whole grid {whole.nu}x{whole.nv}, {grid_bytes(whole, k['precision']) / 2**30:.2f} GiB, does "
                   f"not fit {limits.name}: {limits.max_allocation / 2**30:.2f} GiB a buffer, "
                   f"{limits.global_memory / 2**30:.2f} GiB")
        planes = [g.num_planes for g in geometries]
        print(f"clgrid.WGridder: {fx} x {fy} facets ({why}); grids up to {max(g.nu for g in geometries)}x"
              f"{max(g.nv for g in geometries)}, {min(planes)} to {max(planes)} w-planes (the whole: "
              f"{whole.num_planes}), epsilon {eps:.3g} each"
              + ("" if keep else "; their operators do not all fit the device: each call plans them again"))
    real = np.float64 if k["precision"] == "double" else np.float32
    return FacetedImager(facet_list, lambda i: make(facet_list[i], geometries[i], eps), k["npix_x"], k["npix_y"],
                         real, keep, device)


class FacetedImager:
    """vis2dirty / dirty2vis of an image as the sum of its facets' (see the module
    docstring): ``make(i)`` builds facet i's operator (a `clgrid.WGridder` of that facet's
    pixels, geometry and epsilon).  With ``keep`` the operators are built once and kept
    (a major cycle reuses their plans); without, each call builds them one at a time
    and drops each after its facet (the points are planned again every call), so that
    one facet's device memory is in use at a time.

    A call's warnings (its facets' operators', said through `clgrid.call_warnings.warn`:
    "the image is zero", ...) are gathered on the calling thread and said once each when
    it ends, from the `clgrid.WGridder` call's caller: calls at once from several threads
    each say their own."""

    def __init__(self, facets: list, make, npix_x: int, npix_y: int, real_dtype, keep: bool, device=None):
        self.facets = list(facets)
        self.device = device
        self._make = make
        self.shape = (int(npix_x), int(npix_y))
        self.real = np.dtype(real_dtype)
        self.keep = bool(keep)
        with said_once(stacklevel=None):      # the kept operators' set-up warnings once, from the caller's line
            self._operators = [make(i) for i in range(len(self.facets))] if self.keep else None

    @property
    def queue(self):
        """The command queue of the facets' (first) device."""
        return _queues(self.device)[0]

    @property
    def devices(self) -> list:
        """The facets' OpenCL devices."""
        return [q.device for q in _queues(self.device)]

    @property
    def plans(self) -> list:
        """The kept facet operators' plans (none where they are built per call)."""
        return [plan for op in (self._operators or []) for plan in op.plans]

    def operators(self):
        """(facet, operator) pairs, built as they are reached unless kept."""
        for i, facet in enumerate(self.facets):
            op = self._operators[i] if self.keep else self._make(i)
            yield facet, op
            del op

    def vis2dirty(self, vis, wgt=None, progress=None) -> np.ndarray:
        image = np.empty(self.shape, self.real)
        with said_once(stacklevel=None):      # each facet's warnings once, from the caller's line
            for facet, op in self.operators():
                image[facet.rows, facet.cols] = op.vis2dirty(vis, wgt, progress)
        return image

    def dirty2vis(self, dirty, wgt=None) -> np.ndarray:
        dirty = np.asarray(dirty)
        if dirty.shape != self.shape:
            raise ValueError(f"dirty must have shape {self.shape}, got {dirty.shape}")
        total = None
        with said_once(stacklevel=None):      # each facet's warnings once, from the caller's line
            for facet, op in self.operators():
                part = op.dirty2vis(np.ascontiguousarray(dirty[facet.rows, facet.cols]), wgt)
                if total is None:
                    total = np.array(part)           # a copy: the operator may recycle its array
                else:
                    with np.errstate(over="ignore", invalid="ignore"):     # counted below
                        total += part
                del part
        check_finite_result(np.count_nonzero(~np.isfinite(total)), f"the {total.dtype} visibilities (the facets' "
                            f"parts summed)", "double" if total.dtype == np.complex128 else "single",
                            double="a float64 image", inputs="the image")
        return total
