"""The imaging operator's work on one OpenCL device (`ImagingEngine`): its points planned once
there, and per call the values gathered into plan order, every w-plane spread (or
interpolated), transformed and accumulated into the image (or made from it).

Where the work runs is the tuning table's ``[wgridding]`` choice (clgrid/platforms/*.toml,
or ``tuning=``): ``spread = "bins"`` (a work-group per bin of cells and piece of its
points, accumulating in local memory: GPUs), ``"atomic"`` (a work-item per visibility,
float atomic adds) or ``"rows"`` (a work-item per grid row, no atomics, kernel values
computed once per operator: CPUs); ``fft = "host"`` (scipy.fft or ducc0.fft in place on
the grid mapped to the host, the crop as views, per-pixel work on the host threads),
``"mapped"`` (the same FFT, with crop, w phase and correction by device kernels,
clgrid/cl_kernels/wgrid_planes.cl) or ``"vkfft"`` (pyvkfft on the device with those kernels:
nothing per plane crosses to the host; with fp64 the correction and w phases are computed
per pixel there as well).  Kernel values come from per-tap polynomials
(clgrid.sources.accuracy.horner_coefficients).

`ImagingEngine` holds the set-up, the points' parts and their values, and the calls; two
mixins hold the rest: the w-plane loops on either FFT path (`clgrid.imaging.plane_passes`)
and the streaming of points that do not fit the device (`clgrid.imaging.stream`).
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pyopencl as cl

from ..device.codegen import build_program, kernel as codegen_kernel, render
from ..device.host_threads import count_not_finite, in_slices, parallel_copy, pick
from ..device.runtime import device_facts, fill_zeros, get_queue
from ..errors import DeviceCapabilityError, EmptyInputWarning
from ..operators.checks import check_finite_result
from ..device.transfer import download, host_empty, shared_staging, upload
from ..device.tuning import resolve_tuning, schema
from ..planning.fused import plan_arranged
from ..planning.plan import as_host, plan_stacked
from .memory import HOST_PART_SAMPLES, engine_device_bytes, return_freed_memory
from ..sources.analytic import StackedKernel
from ..strategies import IMAGING
from ..strategies.base import check_precision
from ..call_warnings import warn
from .fft import DeviceFFT, HostFFT, MappedHostFFT
from .devices import add_at
from .geometry import GRID_CELL_LIMIT, ImageGeometry
from .pixels import PixelModel
from .plane_passes import PlanePasses
from .prefetch import PrefetchedValues
from .regions import plane_regions
from . import stream
from .stream import KEY_LIMIT, StreamedPoints, max_slab_planes, row_parts, slab_geometry

__all__ = ["ImagingEngine", "SPREADS", "NOT_FINITE_VIS", "check_grid", "check_samples"]

SPREADS = IMAGING     # [wgridding] spread -> the spreading and interpolating strategies
# samples of one part of rows: a part's plan counts its samples in 32 bits (plan_positions.cl,
# values_stacked.cl); more samples go through in more parts (docs/design/streaming.md)
SAMPLE_LIMIT = 2 ** 31 - 1


def _route_tuning(tuning, facts) -> tuple:
    """``tuning=`` split between the [wgridding] section and the sections of the spread and
    interpolation it chooses (a key such as ``atomic`` may go to both): ``(wgridding
    parameters, spread overrides, interpolation overrides)``.  A key of another strategy's
    section is refused by name; one of no section is left to [wgridding], which refuses it."""
    tuning = dict(tuning or {})
    known = schema()
    sections = {cls.name for pair in SPREADS.values() for cls in pair}
    theirs = {k: v for k, v in tuning.items()
              if any(k in known[name] for name in sections) and k not in known["wgridding"]}
    wparams = resolve_tuning("wgridding", {k: v for k, v in tuning.items() if k not in theirs}, facts)
    chosen = SPREADS.get(wparams["spread"])
    if chosen is None:
        return wparams, {}, {}
    spread = {k: v for k, v in theirs.items() if k in known[chosen[0].name]}
    interp = {k: v for k, v in theirs.items() if k in known[chosen[1].name]}
    unused = sorted(set(theirs) - set(spread) - set(interp))
    if unused:
        raise ValueError(f"tuning {unused} belong to strategies that spread {wparams['spread']!r} does not use "
                         f"([{chosen[0].name}] and [{chosen[1].name}] do)")
    return wparams, spread, interp


# how a call's refusal of non-finite visibilities begins (its count follows): callers
# that hold the values in parts look for them there (`clgrid.dask.tasks.image_slab`)
NOT_FINITE_VIS = "vis has NaN or infinite entries where not masked"
# the generic tuning table's [wgridding] sparse_share (a part whose kept samples are fewer
# than this share of its rows' samples gets its values picked by the host), for the host's
# own choices of the same kind (`clgrid.dask.slabs.takes_whole`)
SPARSE_SHARE = 0.5


def check_grid(geometry: ImageGeometry, complex_dtype, facts) -> None:
    """Refuse, naming the sizes, a padded grid beyond one buffer of the device (``facts``:
    `clgrid.device.runtime.device_facts`) or with more cells than the kernels' 32-bit cell
    indices count (`GRID_CELL_LIMIT`)."""
    g, itemsize = geometry, np.dtype(complex_dtype).itemsize
    if g.nu * g.nv > GRID_CELL_LIMIT:
        raise DeviceCapabilityError(
            f"the padded grid of {g.nu}x{g.nv} has {g.nu * g.nv} cells; the kernels index at most "
            f"{GRID_CELL_LIMIT} (32-bit): image in facets")
    if g.nu * g.nv * itemsize > facts.max_allocation:
        raise DeviceCapabilityError(
            f"the padded grid of {g.nu}x{g.nv} {np.dtype(complex_dtype).name} needs "
            f"{g.nu * g.nv * itemsize / 2**30:.2f} GiB in one buffer; {facts.name} allows "
            f"{facts.max_allocation / 2**30:.2f} GiB: image in facets or in single precision")


def check_samples(nchan: int) -> None:
    """Refuse, naming it, a row of more channels than one part of rows may hold
    (`SAMPLE_LIMIT`): rows are the parts' unit, a row is not split."""
    if nchan > SAMPLE_LIMIT:
        raise ValueError(f"nchan = {nchan} channels: one row's samples are counted in 32 bits, at most "
                         f"{SAMPLE_LIMIT} channels per row (call the operator on fewer channels at a time)")


class ImagingEngine(StreamedPoints, PlanePasses, PrefetchedValues):
    """The imaging operator's work on one device, for one set of points: their plan, the
    device program, grid and FFT, kept between calls.  Calls are serialised by a lock
    (they share the device buffers).

    Parameters
    ----------
    uvw : (nrow, 3) float64 metres, on the host or a `pyopencl.array.Array` on the device's
        context (planned there, `clgrid.planning.device_points`).
    scale : (nchan,) float64, frequency / c.
    keep : (nrow, nchan) bool, or None: the samples to image.
    signs : the flips, +1 or -1 per axis.
    geometry : the `ImageGeometry` every part of the operator shares.
    planes : the w-planes this engine holds the samples of (a range): those with a tap on
        them, spread, transformed and interpolated there.
    direction_planes : None (every call's planes are ``planes``), or {"vis2dirty": range,
        "dirty2vis": range}: the planes each direction's calls spread or interpolate, each
        within ``planes`` (a device list whose directions balance at other slabs holds the
        union on each device and leaves the rest of it to the others in each call).
    precision, divide_by_n, device, tuning, workers, deterministic : as `WGridder`'s.
    epsilon : the accuracy asked for (None: not known): where it allows, the "rows" spread
        keeps its kernel values in float (`clgrid.sources.accuracy.float_taps_allowed`).
    prefetch : None, or {"vis": ..., "wgt": ... or None}, the first `vis2dirty` call's
        values, sent up while the points are planned (`clgrid.imaging.prefetch`).
    prefetch_whole : False where the engine is expected to pick its values (a device
        list's sparse share): ``prefetch`` is then picked and sent at the set-up's end.
    """

    def __init__(self, uvw, scale, keep, signs, geometry: ImageGeometry, planes: range, precision: str,
                 divide_by_n: bool, device=None, tuning: dict | None = None, workers: int = 1,
                 deterministic: bool = False, epsilon: float | None = None, prefetch=None,
                 direction_planes: dict | None = None, prefetch_whole: bool = True):
        self.geometry = geometry
        self.epsilon = epsilon
        self.planes = planes
        self.direction_planes = _direction_planes(direction_planes, planes)
        self._call_planes = planes            # the planes of the call under way (`_active`)
        self.nrow, self.nchan = uvw.shape[0], scale.size
        check_samples(self.nchan)
        self.shape = (self.nrow, self.nchan)
        self.precision = precision
        self.divide_by_n = divide_by_n
        self.real = np.float64 if precision == "double" else np.float32
        self.complex = np.complex128 if precision == "double" else np.complex64
        self._lock = threading.Lock()
        self._workers = workers
        self.pixels = PixelModel(geometry, planes, divide_by_n, workers)
        self._setup_device(device, tuning, uvw, scale, keep, signs, deterministic, prefetch, prefetch_whole)

    # -- set-up -------------------------------------------------------------------------
    def _setup_device(self, device, tuning, uvw, scale, keep, signs, deterministic, prefetch=None,
                      prefetch_whole: bool = True):
        self.queue = get_queue(device)
        facts = self.facts = device_facts(self.queue.device)
        check_precision(self.precision, facts, atomics=True)
        self.staging = shared_staging(self.queue)
        g = self.geometry
        wparams, spread_tuning, interp_tuning = _route_tuning(tuning, facts)
        self.spread_mode = wparams["spread"]
        if deterministic and self.spread_mode != "rows":
            if (tuning or {}).get("spread") not in (None, "rows"):
                raise ValueError(f"deterministic=True needs spread 'rows' (no atomics), not tuning [wgridding] "
                                 f"spread={tuning['spread']!r}")
            self.spread_mode = "rows"
        if self.spread_mode not in SPREADS:
            former = {"atomic": "points"}.get(self.spread_mode)
            hint = f" ({self.spread_mode!r} is now {former!r})" if former else ""
            raise ValueError(f"tuning [wgridding] spread must be one of {tuple(SPREADS)}, got "
                             f"{self.spread_mode!r}{hint}")
        # a device list's image, pinned for another device's context, copied straight across
        self.pinned_portable = bool(wparams["pinned_across_contexts"])
        # below this share of its rows' samples kept, a part's values are picked by the host
        self.sparse_share = float(wparams["sparse_share"])
        self.fft = HostFFT(self._workers, wparams["host_fft"])
        self.fft_mode = wparams["fft"]
        if self.fft_mode not in ("host", "mapped", "vkfft"):
            raise ValueError(f"tuning [wgridding] fft must be 'host', 'mapped' or 'vkfft', got {self.fft_mode!r}")
        # the work distributions (clgrid.strategies): the spread, and its twin interpolation
        source = StackedKernel.of(g)
        spread_cls, interp_cls = SPREADS[self.spread_mode]
        self.spreader = spread_cls(self.queue, (g.nu, g.nv), source, self.precision, spread_tuning or None)
        self._spread_args = (spread_cls, source, spread_tuning or None)
        self.interpolator = interp_cls(self.queue, (g.nu, g.nv), source, self.precision, interp_tuning or None)
        # the rows spread keeps every point's kernel values: in double precision, in float
        # where epsilon allows (in single they are float already)
        float_taps = spread_cls.keeps_float_taps(g.kernel, self.precision, 3 if g.do_wgridding else 2, self.epsilon)
        for strategy in (self.spreader, self.interpolator):
            strategy.stable = deterministic
            if float_taps:
                strategy.tap_single = True
        # with them, each point's value and phase in plan order (value_types.cl)
        self._float_values = float_taps
        self._value_bytes = 8 if float_taps else np.dtype(self.complex).itemsize
        self.plane_order = self.spreader.plane_order()
        # where each w-plane holds taps: the host FFT's passes run there only (regions.py)
        self.regions = None
        if g.do_wgridding and self.fft_mode in ("host", "mapped"):     # (device uvw: read back for it)
            self.regions = plane_regions(as_host(uvw), scale, keep, signs, g, self._workers)
        ctx, mf = self.queue.context, cl.mem_flags
        self._wg = 64
        self._grid_bytes = g.nu * g.nv * np.dtype(self.complex).itemsize
        self._part_samples = min(wparams["part_samples"] or self._samples_per_part(), SAMPLE_LIMIT)
        self._check_fits()
        self._max_planes = max_slab_planes(g, self.plane_order.keys_per_plane, KEY_LIMIT) if g.do_wgridding else None
        self.streamed, self._stream = None, None
        limit = facts.global_memory * stream.DEVICE_SHARE
        if self.device_bytes() > limit:
            # smaller parts first (a smaller set-up beside the points kept), else streamed
            every, self._part_samples = self.device_bytes(), self._stream_part_samples()
            if self.device_bytes() > limit:
                self._setup_stream(uvw, scale, keep, signs, deterministic, every)
        self._grid = cl.Buffer(ctx, mf.READ_WRITE, self._grid_bytes)
        if self._stream is None:      # (a stack of more sort keys than 32 bits count: arranged in slabs)
            slabs = [self.planes] if self._max_planes is None else \
                [range(lo, min(lo + self._max_planes, self.planes.stop))
                 for lo in range(self.planes.start, self.planes.stop, self._max_planes)]
            self._prefetch_start(prefetch, prefetch_whole)     # (the values up while the points are planned)
            self._parts = [self._make_part(rows, uvw, scale, keep, signs, deterministic, planes)
                           for planes in slabs for rows in row_parts(self.nrow, self.nchan, self._part_samples)]
            held = max(part.held for part in self._parts)
            early = self._prefetch_settle(held)
        else:
            self._parts, held, early, self._prefetched = [], max(1, self._part_samples // max(self.nchan, 1)) * \
                self.nchan, None, None
        # the caller's values and weights go through one part at a time (gather_vis, scatter_vis)
        if early is not None:
            self._vis_held, self._wgt_held = early
        else:
            self._vis_held = cl.Buffer(ctx, mf.READ_WRITE, max(held, 1) * np.dtype(self.complex).itemsize)
            self._wgt_held = cl.Buffer(ctx, mf.READ_ONLY, max(held, 1) * np.dtype(self.real).itemsize)
        self._setup_data(build_program(ctx, render("values_stacked.cl", double=self.precision == "double",
                                                   value_single=self._float_values)))
        self._prefetch_picks()
        self.device_fft = None
        if self.fft_mode == "mapped":
            self.device_fft = MappedHostFFT(self.queue, g.nu, g.nv, self.complex, g.npix_x, self.fft, g.npix_y)
        if self.fft_mode == "vkfft":
            try:
                self.device_fft = DeviceFFT(self.queue, g.nu, g.nv, self.complex)
            except ImportError as exc:
                warn(f"clgrid: {exc}; using the host FFT", stacklevel=None)
                self.fft_mode = "host"
        if self.device_fft is not None:
            self._setup_planes(facts)

    # -- the points, in parts of rows that each fit the device's buffers -------------------
    def _samples_per_part(self) -> int:
        """(row, channel) samples a part may hold: within the largest buffer (a part's
        largest array takes 4 reals or 16 bytes a sample, the "rows" spread's kernel values
        2 W values a point) and, on a CPU device (its buffers
        are host memory), at most `HOST_PART_SAMPLES`, so that planning and arranging a
        part (the plan in the caller's order beside its arrangement) stays small beside
        the points the engine keeps."""
        largest = max(16, 4 * np.dtype(self.real).itemsize)
        if self.spread_mode == "rows":          # its kernel values: 2 W a point (rows_stacked.settle)
            tap = 4 if self._float_values or self.precision == "single" else 8
            largest = max(largest, 2 * self.geometry.kernel.support * tap)
        samples = max(1, min(self.facts.max_allocation // largest, SAMPLE_LIMIT))
        if "CPU" in self.facts.type:
            samples = min(samples, HOST_PART_SAMPLES)
        return samples

    def device_bytes(self, num_samples: int | None = None) -> int:
        """This engine's peak device memory by `clgrid.imaging.memory.engine_device_bytes`
        (its spread, parts and kernel values' precision), for ``num_samples`` samples (None:
        its own)."""
        if num_samples is None and getattr(self, "streamed", None) is not None:
            return self.streamed.device_bytes
        samples = self.nrow * self.nchan if num_samples is None else num_samples
        rows = self.spread_mode == "rows"
        return engine_device_bytes(self.geometry, self.precision, samples, self.spread_mode, self._part_samples,
                                   bool(self.spreader.tap_single) if rows else False)

    def _check_fits(self) -> None:
        """Refuse, naming the sizes, a grid the device cannot hold in one buffer."""
        check_grid(self.geometry, self.complex, self.facts)


    def _make_part(self, rows: slice, uvw, scale, keep, signs, deterministic, planes=None,
                   on=None) -> SimpleNamespace:
        """The points of ``rows`` with a tap on ``planes`` (None: the engine's): planned,
        arranged for the spread, with their buffers.  Where the stack's sort keys pass 32
        bits (``_max_planes``), in the slab's own geometry
        (`clgrid.imaging.stream.slab_geometry`): the part's planes count from its ``base``.
        ``on``: the `_preparer` whose queue and strategy do the work (None: the engine's)."""
        ctx, mf = self.queue.context, cl.mem_flags
        queue, spreader, staging = (self.queue, self.spreader, self.staging) if on is None else \
            (on.queue, on.spreader, on.staging)
        planes = self.planes if planes is None else planes
        # a slab's own geometry only where the stack's keys need it: otherwise the whole
        # stack's, whose plane positions are the schedule's to the bit (split.first_planes)
        g, base = slab_geometry(self.geometry, planes) if self._max_planes is not None else (self.geometry, 0)
        nsample = (rows.stop - rows.start) * self.nchan
        if spreader.arranges_by_layout and not (deterministic or spreader.stable) and self.facts.fp64:
            # planned straight into the spread's order (clgrid.planning.fused); few of the
            # rows' samples kept: the values go by position, picked by the host (index)
            plan, points, index = plan_arranged(
                queue, g, uvw[rows], scale, None if keep is None else keep[rows], signs, fold=g.do_wgridding,
                double=self.precision == "double", layout=self.plane_order, staging=staging,
                planes=range(planes.start - base, planes.stop - base), sparse_share=self.sparse_share)
            points = spreader.add_tables(points, g).wait_ready()     # the set-up's one wait
            plan.keep_arranged(spreader.arrangement_key(), points)
        else:
            plan = plan_stacked(queue, g, uvw[rows], scale, None if keep is None else keep[rows], signs,
                                fold=g.do_wgridding, double=self.precision == "double", staging=staging,
                                on_host=deterministic, planes=range(planes.start - base, planes.stop - base))
            # few of the rows' samples kept (a device's slab of w-planes, a sparse mask): the host
            # picks theirs, in plan order, instead of sending every sample each call
            index = None
            if plan.num_kept < self.sparse_share * nsample:
                plan.values_by_position = True
                index = plan.sample.get()[:plan.num_kept].astype(np.intp)     # (picks convert others every call)
            points = plan.arranged(spreader.arrangement_key(), spreader.arrange)
            plan.release_points()      # the arrangement holds what the spreads read: the caller's order goes
        points = spreader.settle(points)     # then the strategy's own per-point data
        if "CPU" in self.facts.type:               # the part's freed scratch back to the system
            queue.finish()
            return_freed_memory()
        values = cl.Buffer(ctx, mf.READ_WRITE, max(points.num_vis, 1) * self._value_bytes)
        held = nsample if index is None else index.size
        return SimpleNamespace(rows=rows, nsample=nsample, plan=plan, points=points, index=index, held=held,
                               values=spreader.with_values(points, values), planes=planes, base=base)

    @property
    def plans(self) -> list:
        """The plans of the operator's parts (one, unless the points exceed one buffer)."""
        return [part.plan for part in self._parts]

    @property
    def num_kept(self) -> int:
        if self._stream is not None:
            return self._stream_kept
        return sum(part.points.num_vis for part in self._parts)

    @property
    def planned_on(self) -> str:
        if self._stream is not None:
            return "host" if self._sources[4] or not self.facts.fp64 else "device"
        return self._parts[0].plan.planned_on

    def _active(self, plane: int) -> bool:
        """Whether ``plane`` is among the call's planes (``direction_planes``) and any point
        has a tap on it."""
        if plane not in self._call_planes:
            return False
        if self._stream is not None:
            return bool(self._touch[plane])
        return any(self.spreader.active(part.points, plane - part.base)[1] for part in self._parts
                   if plane in part.planes)


    # The engine's own kernels, one object per calling thread (codegen.kernel), kept across
    # operators: a new pyopencl Kernel per set-up reads its invoker from pyopencl's on-disk cache.
    _gather = property(lambda self: codegen_kernel(self._values_program, "gather_vis"))
    _scatter = property(lambda self: codegen_kernel(self._values_program, "scatter_vis"))
    _accumulate = property(lambda self: codegen_kernel(self._planes_program, "accumulate"))
    _finish = property(lambda self: codegen_kernel(self._planes_program, "finish"))
    _load_plane = property(lambda self: codegen_kernel(self._planes_program, "load_plane"))

    def _setup_data(self, program):
        """The kernels that pick the kept values in plan order (weighted, conjugated where the
        point moved, phase-shifted) and put them back, and their tally."""
        ctx, mf = self.queue.context, cl.mem_flags
        self._tally = cl.Buffer(ctx, mf.READ_WRITE, 4 * 3)
        # what gather_vis and scatter_vis count: apart from the image's tally where a
        # streaming engine gathers while the planes go through
        self._values_tally = self._tally if self._stream is None else cl.Buffer(ctx, mf.READ_WRITE, 4 * 3)
        self._no_phase = cl.Buffer(ctx, mf.READ_ONLY, np.dtype(self.complex).itemsize)
        self._values_program = program        # its kernels: _gather, _scatter

    def _held_values(self, part, given, dtype) -> np.ndarray:
        """The caller's ``given`` (nrow, nchan) of ``part``'s samples, as the device holds them:
        its rows, or only its kept samples (in plan order) where it picks them (on the
        engine's host threads, by bytes: `clgrid.device.host_threads.pick`)."""
        mine = given[part.rows]
        if part.index is not None:
            mine = pick(mine, part.index, parts=self._workers)
        return np.asarray(mine, dtype)

    def _upload_held(self, part, vis, wgt, on=None) -> None:
        """``part``'s share of ``vis`` and ``wgt`` (either may be None) to the held buffers, after
        the last part's kernels (the queue is in order; ``on``: a `_preparer`'s queue)."""
        queue, staging = (self.queue, self.staging) if on is None else (on.queue, on.staging)
        for given, dtype, buffer in ((wgt, self.real, self._wgt_held), (vis, self.complex, self._vis_held)):
            if given is not None:
                upload(queue, self._held_values(part, given, dtype), buffer, staging)

    def _part_launch(self, kernel, part, use_wgt, on=None) -> None:
        """Gather ``part``'s values from the held buffers into plan order, or scatter them back
        (on the engine's queue, or ``on``'s)."""
        p = part.points
        if not p.num_vis:
            return
        size = -(-p.num_vis // self._wg) * self._wg
        source = self._vis_held if kernel is self._gather else part.values.vis
        target = part.values.vis if kernel is self._gather else self._vis_held
        phase = p.phase if p.phase is not None else self._no_phase
        queue = self.queue if on is None else on.queue
        kernel(queue, (size,), (self._wg,), source, self._wgt_held, p.src, phase, target,
               np.int32(p.num_vis), np.int32(use_wgt), np.int32(p.phase is not None), self._values_tally)

    def _tally_counts(self) -> np.ndarray:
        """(non-finite values, non-finite weights, non-zero weighted values) of the last launches."""
        tally = np.empty(3, np.int32)
        cl.enqueue_copy(self.queue, tally, self._values_tally)
        return tally

    def _gather_values(self, vis, wgt) -> np.ndarray:
        """The caller's ``vis`` (and ``wgt``, or None: every weight 1) into each part's values in
        plan order, one part at a time through the held buffers; the tally."""
        fill_zeros(self.queue, self._values_tally, 12, np.int32)
        self._gather_parts(vis, wgt)
        return self._tally_counts()

    def _gather_parts(self, vis, wgt, parts=None, on=None) -> None:
        """`_gather_values` without the tally zeroed or read (of ``parts``, None: the engine's,
        on ``on``'s queue, None: the engine's)."""
        for part in self._parts if parts is None else parts:
            if part.points.num_vis:
                if on is not None or not self._prefetch_taken(vis=vis, wgt=wgt):
                    self._upload_held(part, vis, wgt, on)
                self._part_launch(self._gather, part, wgt is not None, on)

    def _checked_wgt(self, wgt):
        """``wgt`` as an array of the data's shape, or None: checked when called, also where
        nothing is kept (its values are checked on the device, among the kept samples)."""
        if wgt is None:
            return None
        wgt = np.asarray(wgt)
        self._check_values("wgt", wgt, self.shape)
        return wgt

    def _launch_spread(self, plane: int, wait_for=None):
        """Spread this call's values onto ``plane`` of the grid, part by part; the last event
        (the queue is in order), or None."""
        return self._on_plane(plane, lambda part, p: self.spreader.grid(part.values, 1, self._grid, wait_for, plane=p))

    def _on_plane(self, plane: int, launch):
        """``launch(part, plane in the part's stack)`` (its events) for each part with taps on
        ``plane``, each group of a streaming engine entered first; the last event, or None."""
        events = []
        for at in ([None] if self._stream is None else self._stream_groups(plane)):
            if at is not None:
                self._stream_enter(*at)
            for part in self._parts:
                if plane in part.planes:
                    events += launch(part, plane - part.base)
        return events[-1] if events else None

    def stage_seconds(self, direction: str) -> float:
        """Device seconds of spreading (``direction="grid"``) or interpolating ("degrid") every
        plane of that direction's calls (``direction_planes``) once, with the values of the
        last call (for tuning and benchmarks)."""
        events = []
        with self._lock:
            for plane in self.direction_planes["vis2dirty" if direction == "grid" else "dirty2vis"]:
                for part in self._parts:
                    if plane not in part.planes:
                        continue
                    if direction == "grid":
                        events += self.spreader.grid(part.values, 1, self._grid, None, plane=plane - part.base)
                    else:
                        events += self.interpolator.degrid(part.values, 1, self._grid, None, plane=plane - part.base)
            cl.wait_for_events(events)
        return sum((e.profile.end - e.profile.start) * 1e-9 for e in events)

    def _launch_interp(self, plane: int, wait_for=None):
        """Add ``plane``'s share to the values, part by part; the last event, or None."""
        return self._on_plane(plane, lambda part, p: self.interpolator.degrid(part.values, 1, self._grid, wait_for,
                                                                               plane=p))

    def _check_values(self, name, a, shape, complex_ok: bool = False):
        """Refuse ``a`` unless it has ``shape`` and numbers the operator can take: integers
        or floats, or complex where ``complex_ok`` (vis); an image and weights are real."""
        if a.dtype.kind not in ("iufc" if complex_ok else "iuf"):
            wanted = "a numeric (complex, float or integer)" if complex_ok else "a real (float or integer)"
            raise TypeError(f"{name} must be {wanted} array, got dtype {a.dtype}")
        if a.shape != shape:
            raise ValueError(f"{name} must have shape {shape}, got {a.shape}")

    def _check_image(self, not_finite: int) -> None:
        """The image's overflow check, on either path (`clgrid.operators.checks.check_finite_result`)."""
        check_finite_result(not_finite, f"the {np.dtype(self.real).name} image", self.precision,
                            double="complex128 visibilities")

    def _zero_data_warning(self, what, kept: bool = False):
        """`EmptyInputWarning`: nothing kept (every sample masked, of zero weight or off the
        image's planes), or, ``kept``, every kept sample's weighted value zero (through
        `clgrid.call_warnings.warn`: a device list gathers it)."""
        reason = ("every unmasked visibility times its weight is zero" if kept
                  else "no visibility is unmasked with non-zero weight")
        warn(f"clgrid: {reason}; {what} is zero", EmptyInputWarning, stacklevel=None)

    # -- the operator ---------------------------------------------------------------------
    def vis2dirty(self, vis, wgt=None, progress=None, out=None, after=None) -> np.ndarray:
        """The dirty image (npix_x, npix_y) of ``vis`` (nrow, nchan), in ducc0's normalisation.
        ``progress(n)``, if given, is called after each w-plane with n = 1 (a progress bar's
        ``update``); there are ``len(planes)`` of them.

        ``out``: a C-contiguous (npix_x, npix_y) array of the image's dtype to write the
        image into (None: a new one), returned.  ``after``: None, or a function that
        returns once another device's image is in ``out``; then this engine's image is
        added to it (after ``after()`` returned: with a device FFT the image in ``out`` is
        sent up and added on the device, and the sum comes down; else added on the host)
        instead of written: how a device list sums its devices' images in a fixed order."""
        vis = np.asarray(vis)
        self._check_values("vis", vis, self.shape, complex_ok=True)
        wgt = self._checked_wgt(wgt)
        with self._lock:
            self._call_planes = self.direction_planes["vis2dirty"]
            if out is None:
                return self._vis2dirty(vis, wgt, progress)
            # written straight into ``out``: a device FFT's image comes down there (added
            # there with ``after``), the host FFT's correction writes there (without ``after``)
            direct = self._stream is None and (self.device_fft is not None or after is None)
            image = self._vis2dirty(vis, wgt, progress, (out, after) if direct else None)
            if image is out:
                return out
            if after is None:                  # the host's or the stream's image, or nothing kept
                parallel_copy(out, image, self._workers)
                return out
            after()
            self._check_image(add_at(out.reshape(-1), image.reshape(-1), None, self._workers))
            return out

    def _vis2dirty(self, vis, wgt, progress, into=None):
        g = self.geometry
        if self.num_kept == 0:
            self._zero_data_warning("the image")
            self._planes_skipped(progress)
            return np.zeros((g.npix_x, g.npix_y), self.real)
        if self._stream is not None:
            return self._vis2dirty_streamed(vis, wgt, progress)
        # the caller's array goes up as it is; the device picks, weights, conjugates and
        # phase-shifts the kept visibilities (gather_vis), and counts what is wrong
        bad_vis, bad_wgt, nonzero = self._gather_values(vis, wgt)
        self._check_gathered(bad_vis, bad_wgt)
        if nonzero == 0:
            self._zero_data_warning("the image", kept=True)
            self._planes_skipped(progress)
            return np.zeros((g.npix_x, g.npix_y), self.real)
        if self.device_fft is not None:
            return self._vis2dirty_device(progress, into)
        return self._vis2dirty_host(progress, None if into is None else into[0])

    def _planes_skipped(self, progress) -> None:
        """``progress`` told of the call's planes where the call images nothing (a device
        list's other devices count theirs: the count must reach every plane)."""
        if progress is not None:
            for _ in self._call_planes:
                progress(1)

    def _check_gathered(self, bad_vis, bad_wgt) -> None:
        if bad_vis:
            raise ValueError(f"{NOT_FINITE_VIS} ({bad_vis})")
        if bad_wgt:
            raise ValueError(f"wgt has NaN or infinite entries where not masked ({bad_wgt})")


    def _scatter_parts(self, out, wgt, add: bool, parts=None, on=None, before=None) -> int:
        """Each part's values scattered to its samples of ``out`` through the held buffers,
        then down (``add``: added to what ``out`` holds); the tally counts what overflowed.
        ``parts`` (None: the engine's), ``on``: as `_gather_parts`'.  ``before``: None, or
        a function called once, before ``out`` is first written (another device's share
        must be in it first).  Returns how many entries the additions made non-finite."""
        itemsize = np.dtype(self.complex).itemsize
        queue, staging = (self.queue, self.staging) if on is None else (on.queue, on.staging)
        waited, not_finite = [before is None], 0

        def wait():
            if not waited[0]:
                before()
                waited[0] = True

        for part in self._parts if parts is None else parts:
            self._upload_held(part, None, wgt, on)
            fill_zeros(queue, self._vis_held, part.held * itemsize, self.real)
            self._part_launch(self._scatter, part, wgt is not None, on)
            if part.index is None and not add:
                wait()
                download(queue, self._vis_held, out[part.rows], staging)
                continue
            got = host_empty((part.held,), self.complex, staging)
            download(queue, self._vis_held, got, staging)
            rows = out[part.rows].reshape(-1)
            wait()
            if not add:                  # a share of the rows' samples: the rest are zero
                in_slices(self._workers, rows.size, lambda r, rows=rows: rows[r].fill(0))
            not_finite += add_at(rows, got, part.index, self._workers, add=add)
        wait()
        return not_finite

    def dirty2vis(self, dirty, wgt=None, out=None, after=None) -> np.ndarray:
        """Visibilities (nrow, nchan) of the image ``dirty`` (npix_x, npix_y): the adjoint.

        ``out``: a C-contiguous (nrow, nchan) array of the visibilities' dtype to write them
        into (None: a new one), returned.  ``after``: None, or a function that returns once
        another device's share of the visibilities is in ``out``; then this engine's share
        is added to it (after ``after()`` returned) instead of written: how a device list
        sums its devices' shares in a fixed order without an array per device."""
        dirty = np.asarray(dirty)
        g = self.geometry
        self._check_values("dirty", dirty, (g.npix_x, g.npix_y))
        if self.device_fft is None and not np.all(np.isfinite(dirty)):     # the device counts its own
            raise ValueError("dirty has NaN or infinite entries")
        wgt = self._checked_wgt(wgt)
        with self._lock:
            self._call_planes = self.direction_planes["dirty2vis"]
            return self._dirty2vis(dirty, wgt, out, after)

    def _dirty2vis(self, dirty, wgt, given=None, after=None):
        self._prefetch_end()        # (values sent up for a vis2dirty that did not come: done first)
        add = after is not None
        # a streaming engine adds to its output as the planes leave: with ``after``, into one of its own
        own = given is None or (add and self._stream is not None)
        out = host_empty(self.shape, self.complex, self.staging) if own else given
        if self.num_kept == 0:
            if add:
                after()
                return given
            self._zero_data_warning("every visibility")
            out[...] = 0
            return out
        overflowed = 0
        # added into ``out`` (after another device, or slab by slab, streamed or not): the
        # count is of its non-finite sums, not of the shares that made them (the tally)
        adding = add or self._stream is not None or self._max_planes is not None
        if self._stream is None:
            for part in self._parts:
                fill_zeros(self.queue, part.values.vis, part.points.num_vis * self._value_bytes, self.real)
        else:        # each slab's values added to the output as the planes leave it
            out[...] = 0
            self._stream_begin("degrid", None, wgt, out)
        try:
            if self.device_fft is not None:
                self._dirty2vis_device(dirty)
            else:
                self._dirty2vis_host(dirty)
            if self._stream is None:      # (slabs of a large key space: a sample's share in each, added)
                fill_zeros(self.queue, self._values_tally, 12, np.int32)
                if self._max_planes is not None and not add:
                    out[...] = 0
                overflowed = self._scatter_parts(out, wgt, add=adding, before=after)
            else:
                self._stream_leave()
                overflowed = self._call.overflowed          # (the slabs' sums, across slabs too)
                if add:
                    after()
                    overflowed = add_at(given.reshape(-1), out.reshape(-1), None, self._workers)
                    out = given
        except BaseException:
            if self._stream is not None:
                self._stream_leave(quiet=True)
            raise
        finally:
            self._call = None
        not_finite, bad_wgt, _ = self._tally_counts()
        if bad_wgt:
            raise ValueError(f"wgt has NaN or infinite entries where not masked ({bad_wgt})")
        if adding:        # (a sample's sum counted once however many of its shares overflowed)
            not_finite = count_not_finite(out, self._workers) if overflowed else 0
        check_finite_result(int(not_finite), f"the {np.dtype(self.complex).name} visibilities",
                            self.precision, double="a float64 image", inputs="the image or the weights")
        return out


def _direction_planes(given, planes: range) -> dict:
    """``ImagingEngine``'s ``direction_planes`` checked: each direction's planes a range
    within ``planes`` (None: ``planes`` for both)."""
    out = {"vis2dirty": planes, "dirty2vis": planes}
    for direction, within in (given or {}).items():
        if direction not in out:
            raise ValueError(f"direction_planes: unknown direction {direction!r}; known: {sorted(out)}")
        if not isinstance(within, range) or within.step != 1 or (
                len(within) and (within.start < planes.start or within.stop > planes.stop)):
            raise ValueError(f"direction_planes[{direction!r}] must be a range within the engine's planes "
                             f"{planes}, got {within!r}")
        out[direction] = within
    return out
