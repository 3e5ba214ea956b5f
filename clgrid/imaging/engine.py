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
"""

from __future__ import annotations

import threading
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pyopencl as cl

from ..device.codegen import build_program, kernel as codegen_kernel, launch, render
from ..device.host_threads import in_slices
from ..device.runtime import device_facts, fill_zeros, get_queue
from ..errors import DeviceCapabilityError, EmptyInputWarning, NonFiniteResultError, StreamedWarning
from ..operators.checks import check_finite_result
from ..device.transfer import download, host_empty, shared_staging, upload
from ..device.tuning import resolve_tuning, schema
from ..planning.fused import plan_arranged
from ..planning.plan import as_host, plan_stacked
from ..sources.accuracy import float_taps_allowed
from .memory import (HOST_PART_SAMPLES, engine_device_bytes, engine_stream_bytes, return_freed_memory,
                     stream_sample_bytes)
from ..sources.analytic import StackedKernel
from ..strategies import IMAGING
from ..strategies.base import check_precision, read_only_buffer
from .fft import DeviceFFT, HostFFT, MappedHostFFT, clear_outside
from .geometry import GRID_CELL_LIMIT, ImageGeometry
from .pixels import PixelModel, pixel_blocks
from .regions import plane_regions
from .stream import KEY_LIMIT, max_slab_planes, slab_geometry, stream_schedule

__all__ = ["ImagingEngine", "SPREADS", "check_grid", "check_samples"]

SPREADS = IMAGING     # [wgridding] spread -> the spreading and interpolating strategies
# the share of a device's global memory an engine's buffers may take; beyond it, its points
# are streamed (`ImagingEngine.streamed`)
DEVICE_SHARE = 0.9
# samples of one part of rows: a part's plan counts its samples in 32 bits (plan_positions.cl,
# values_stacked.cl); more samples go through in more parts (docs/design/streaming.md)
SAMPLE_LIMIT = 2 ** 31 - 1
# a streaming engine plans its next group on its own thread and queue while the current one
# is spread (False: in turn, on the calling thread: the benchmarks' A/B)
STREAM_OVERLAP = True


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


# a part whose kept samples are fewer than this share of its rows' samples gets its values
# picked by the host (in plan order) rather than all its rows' samples each call
SPARSE_SHARE = 0.5


def _size(nbytes: int) -> str:
    """Bytes in GiB, or MiB below a tenth of one."""
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2 ** 30 / 10 else f"{nbytes / 2**20:.1f} MiB"


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


def _row_parts(nrow: int, nchan: int, samples: int) -> list:
    """Slices of rows, each of at most ``samples`` (row, channel) samples (at least one row)."""
    rows = max(1, samples // max(nchan, 1))
    return [slice(a, min(a + rows, nrow)) for a in range(0, max(nrow, 1), rows)]


class _InTurn:
    """A stand-in for a one-thread executor that runs each job at once on the caller's thread
    (`STREAM_OVERLAP` off)."""

    def submit(self, fn, *args) -> Future:
        done = Future()
        try:
            done.set_result(fn(*args))
        except BaseException as exc:       # raised where the result is taken, as the executor's
            done.set_exception(exc)
        return done

    def shutdown(self, wait: bool = True) -> None:
        pass


class ImagingEngine:
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
    planes : the w-planes this engine spreads, transforms and interpolates (a range).
    precision, divide_by_n, device, tuning, workers, deterministic : as `WGridder`'s.
    epsilon : the accuracy asked for (None: not known): where it allows, the "rows" spread
        keeps its kernel values in float (`clgrid.sources.accuracy.float_taps_allowed`).
    """

    def __init__(self, uvw, scale, keep, signs, geometry: ImageGeometry, planes: range, precision: str,
                 divide_by_n: bool, device=None, tuning: dict | None = None, workers: int = 1,
                 deterministic: bool = False, epsilon: float | None = None):
        self.geometry = geometry
        self.epsilon = epsilon
        self.planes = planes
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
        self._setup_device(device, tuning, uvw, scale, keep, signs, deterministic)

    # -- set-up -------------------------------------------------------------------------
    def _setup_device(self, device, tuning, uvw, scale, keep, signs, deterministic):
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
        float_taps = self.spread_mode == "rows" and self.precision == "double" and \
            float_taps_allowed(g.kernel, self.precision, 3 if g.do_wgridding else 2, self.epsilon)
        for strategy in (self.spreader, self.interpolator):
            strategy.stable = deterministic
            if self.spread_mode == "rows":
                strategy.tap_single = float_taps
        # with them, each point's value and phase in plan order (value_types.cl)
        self._float_values = float_taps
        self._value_bytes = 8 if float_taps else np.dtype(self.complex).itemsize
        self.layout = self.spreader.layout()
        # where each w-plane holds taps: the host FFT's passes run there only (regions.py)
        self.regions = None
        if g.do_wgridding and self.fft_mode in ("host", "mapped"):     # (device uvw: read back for it)
            self.regions = plane_regions(as_host(uvw), scale, keep, signs, g, self._workers)
        ctx, mf = self.queue.context, cl.mem_flags
        self._wg = 64
        self._grid_bytes = g.nu * g.nv * np.dtype(self.complex).itemsize
        self._part_samples = min(wparams["part_samples"] or self._samples_per_part(), SAMPLE_LIMIT)
        self._check_fits()
        self._max_planes = max_slab_planes(g, self.layout.keys_per_plane, KEY_LIMIT) if g.do_wgridding else None
        self.streamed, self._stream = None, None
        limit = facts.global_memory * DEVICE_SHARE
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
            self._parts = [self._make_part(rows, uvw, scale, keep, signs, deterministic, planes)
                           for planes in slabs for rows in _row_parts(self.nrow, self.nchan, self._part_samples)]
            held = max(part.held for part in self._parts)
        else:
            self._parts, held = [], max(1, self._part_samples // max(self.nchan, 1)) * self.nchan
        # the caller's values and weights go through one part at a time (gather_vis, scatter_vis)
        self._vis_held = cl.Buffer(ctx, mf.READ_WRITE, max(held, 1) * np.dtype(self.complex).itemsize)
        self._wgt_held = cl.Buffer(ctx, mf.READ_ONLY, max(held, 1) * np.dtype(self.real).itemsize)
        self._setup_data(build_program(ctx, render("values_stacked.cl", double=self.precision == "double",
                                                   value_single=self._float_values)))
        self.device_fft = None
        if self.fft_mode == "mapped":
            self.device_fft = MappedHostFFT(self.queue, g.nu, g.nv, self.complex, g.npix_x, self.fft, g.npix_y)
        if self.fft_mode == "vkfft":
            try:
                self.device_fft = DeviceFFT(self.queue, g.nu, g.nv, self.complex)
            except ImportError as exc:
                warnings.warn(f"clgrid: {exc}; using the host FFT", stacklevel=3)
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

    # -- points beyond the device: streamed through it, slab by slab of w-planes ---------
    def _stream_part_samples(self) -> int:
        """Samples of a part whose set-up takes at most a quarter of the device's share."""
        per_sample = stream_sample_bytes(self.precision, self.geometry.kernel.support, self.spread_mode,
                                         self._float_values)
        quarter = int(self.facts.global_memory * DEVICE_SHARE) // 4
        return int(min(self._part_samples, max(self.nchan, quarter // per_sample)))

    def _setup_stream(self, uvw, scale, keep, signs, deterministic, every: int) -> None:
        """Points that do not fit the device at once (`device_bytes` beyond `DEVICE_SHARE` of
        it): a schedule of slabs of w-planes (`clgrid.imaging.stream`), each slab's points
        planned when a call reaches it and released after it, re-planned every call, the
        next group planned on a second queue (`_preparer`) while the current one is spread;
        said in ``streamed`` and a `StreamedWarning`.  Refused, naming the sizes, where the grid
        and one part's set-up alone do not fit."""
        facts, g = self.facts, self.geometry
        limit = int(facts.global_memory * DEVICE_SHARE)
        spread, taps = self.spread_mode, self._float_values
        device_fft = self.fft_mode == "vkfft"

        def model(part):
            return engine_stream_bytes(g, self.precision, part, -(-self.nrow * self.nchan // part), spread, taps,
                                       device_fft)

        part = self._part_samples
        fixed, point = model(part)
        # two groups on the device at once: the one being spread and the next being planned
        capacity = (limit - fixed) // (2 * point)
        if capacity < 1:
            raise DeviceCapabilityError(
                f"the {g.nu}x{g.nv} grid and one part of {part} samples' set-up need about {fixed / 2**30:.2f} GiB "
                f"on the device, and a stream room for two groups of points beside them; {facts.name} lends "
                f"{limit / 2**30:.2f} GiB ({DEVICE_SHARE:.0%} of its {facts.global_memory / 2**30:.2f} GiB): "
                f"image in facets or in single precision")
        slabs, touch, kept = stream_schedule(as_host(uvw), scale, keep, g, self.planes, capacity, self._workers,
                                             self._max_planes)
        self._part_samples = part
        self._stream = slabs
        self._sources = (uvw, scale, keep, signs, deterministic)
        self._touch = touch
        self._stream_kept = kept
        self._slab_of = np.zeros(g.num_planes, np.int64)
        for i, slab in enumerate(slabs):
            self._slab_of[slab.planes.start:slab.planes.stop] = i
        self._call = None
        most = max(min(slab.points, capacity) for slab in slabs)
        groups = sum(len(slab.groups) for slab in slabs)
        self.streamed = SimpleNamespace(slabs=len(slabs), groups=groups, replanned=True,
                                        device_bytes=fixed + 2 * most * point, capacity=int(capacity),
                                        every_point=every)
        self._prep = self._preparer(deterministic)
        warnings.warn(
            f"clgrid: {self.nrow * self.nchan} samples' points need about {_size(every)} on the "
            f"device; {facts.name} has {_size(facts.global_memory)}: they are streamed through it in "
            f"{len(slabs)} slab(s) of w-planes ({groups} group(s) of rows), planned again every call",
            StreamedWarning, stacklevel=5)        # the WGridder call

    def _preparer(self, deterministic) -> SimpleNamespace:
        """What a streaming engine plans its next group with while the current one is spread:
        a second in-order queue on the device, a spreading strategy of its own on it (its
        own kernel objects: the arrangement runs beside the spreads), its own staging."""
        spread_cls, source, tuning = self._spread_args
        g = self.geometry
        queue = cl.CommandQueue(self.queue.context, self.queue.device, properties=self.queue.properties)
        spreader = spread_cls(queue, (g.nu, g.nv), source, self.precision, tuning)
        spreader.stable = self.spreader.stable
        if self.spread_mode == "rows":
            spreader.tap_single = self.spreader.tap_single
        return SimpleNamespace(queue=queue, spreader=spreader, staging=shared_staging(queue))

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
                double=self.precision == "double", layout=self.layout, staging=staging,
                planes=range(planes.start - base, planes.stop - base), sparse_share=SPARSE_SHARE)
            points = spreader.add_tables(points, g).wait_ready()     # the set-up's one wait
            plan.keep_arranged(spreader.arrangement_key(), points)
        else:
            plan = plan_stacked(queue, g, uvw[rows], scale, None if keep is None else keep[rows], signs,
                                fold=g.do_wgridding, double=self.precision == "double", staging=staging,
                                on_host=deterministic, planes=range(planes.start - base, planes.stop - base))
            # few of the rows' samples kept (a device's slab of w-planes, a sparse mask): the host
            # picks theirs, in plan order, instead of sending every sample each call
            index = None
            if plan.num_kept < SPARSE_SHARE * nsample:
                plan.values_by_position = True
                index = plan.sample.get()[:plan.num_kept]
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
        """Whether any point has a tap on ``plane``."""
        if self._stream is not None:
            return bool(self._touch[plane])
        return any(self.spreader.active(part.points, plane - part.base)[1] for part in self._parts
                   if plane in part.planes)

    # a streaming engine's call: which slab's group of points is on the device, and the next
    # one planned beside it on the preparer's queue (docs/design/streaming.md)
    def _stream_begin(self, direction: str, vis, wgt, out) -> None:
        """Start a call of a streaming engine: the groups (slab, group) it will reach, in
        order, and the first one's planning started on the preparer; ``direction`` "grid"
        (``vis``, ``wgt``: the caller's) or "degrid" (``out``: the visibilities, zeroed, that
        each group's values are added to)."""
        order = [(i, k) for i, slab in enumerate(self._stream) if any(self._touch[p] for p in slab.planes)
                 for k in range(len(slab.groups))]
        worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clgrid-stream") if STREAM_OVERLAP \
            else _InTurn()
        self._call = SimpleNamespace(direction=direction, vis=vis, wgt=wgt, out=out, at=None, order=order,
                                     next=0, worker=worker, pending=None)
        prep = self._prep
        fill_zeros(prep.queue, self._values_tally, 12, np.int32)
        self._call.pending = worker.submit(self._stream_job, self._call, [], None, order[0] if order else None)

    def _stream_job(self, call, handed, after, group):
        """The preparer's work between two groups (on its thread and queue): once ``after``
        (an event of the engine's queue: the last kernel of the group in the list ``handed``)
        is complete, that group's values added to the output (dirty2vis) and its buffers
        released (taken out of ``handed``: nothing else holds them); then
        ``group`` (slab, group) planned, its values gathered (vis2dirty) or zeroed (``call``:
        the call's state, `_stream_begin`'s).  Returns its parts, every command done."""
        prep = self._prep
        old = handed.pop() if handed else []
        if after is not None:
            after.wait()
        if old and call.direction == "degrid":
            self._scatter_parts(call.out, call.wgt, add=True, parts=old, on=prep)
            prep.queue.finish()
        del old
        if group is None:
            prep.queue.finish()
            return []
        slab, k = group
        planes, rows = self._stream[slab].planes, self._stream[slab].groups[k]
        uvw, scale, keep, signs, deterministic = self._sources
        parts = [self._make_part(slice(rows.start + r.start, rows.start + r.stop), uvw, scale, keep, signs,
                                 deterministic, planes, on=prep)
                 for r in _row_parts(rows.stop - rows.start, self.nchan, self._part_samples)]
        if call.direction == "grid":
            self._gather_parts(call.vis, call.wgt, parts, on=prep)
        else:
            for part in parts:
                fill_zeros(prep.queue, part.values.vis, part.points.num_vis * self._value_bytes, self.real)
        prep.queue.finish()
        return parts

    def _stream_retire(self, group):
        """Hand the group on the device to the preparer (released once the engine's queue is
        past it, its values added to the output first in dirty2vis), which then plans
        ``group`` (None: none)."""
        call = self._call
        after = None
        if call.at is not None:
            after = cl.enqueue_marker(self.queue)
            self.queue.flush()             # the marker must reach the device for the preparer's wait
        handed, self._parts, call.at = [self._parts], [], None
        call.pending = call.worker.submit(self._stream_job, call, handed, after, group)
        del handed

    def _stream_enter(self, slab: int, group: int) -> None:
        """Put group ``group`` of slab ``slab`` on the device: the preparer's planned parts
        taken (waiting for them only where planning is slower than the last group's
        kernels), the last group handed back, the one after planned meanwhile."""
        call = self._call
        if call.at == (slab, group):
            return
        if call.order[call.next] != (slab, group):
            raise AssertionError(f"internal error: stream reached {(slab, group)}, planned "
                                 f"{call.order[call.next]}")
        self.queue.flush()             # the last group's kernels run while this waits
        parts = call.pending.result()
        call.next += 1
        self._stream_retire(call.order[call.next] if call.next < len(call.order) else None)
        self._parts, call.at = parts, (slab, group)

    def _stream_leave(self, quiet: bool = False) -> None:
        """End a streaming call: the group on the device handed back and everything the
        preparer holds done (its errors raised, unless ``quiet``: the call is failing
        already), its thread gone."""
        call = self._call
        if call is None or call.worker is None:
            return
        try:
            if call.at is not None or self._parts:
                self._stream_retire(None)
            call.pending.result()
        except Exception:
            if not quiet:
                raise
        finally:
            call.worker.shutdown(wait=True)
            call.worker = None
            self._parts = []

    def _stream_groups(self, plane: int):
        """The groups (slab, group) whose points have taps on ``plane``, in order."""
        slab = int(self._slab_of[plane])
        return [(slab, group) for group in range(len(self._stream[slab].groups))]

    def _setup_planes(self, facts):
        """The image side on the device (device FFT): per-pixel correction and w phases
        (computed there with fp64, sent by the host without), accumulator."""
        g, ctx, mf = self.geometry, self.queue.context, cl.mem_flags
        phase_double = bool(facts.fp64)
        source = render("wgrid_planes.cl", double=self.precision == "double", use_w=g.do_wgridding,
                        phase_double=phase_double)
        program = build_program(ctx, source)
        self._planes_program = program        # its kernels: _accumulate, _finish, _load_plane

        def copy(a, dtype):
            return read_only_buffer(ctx, np.asarray(a, dtype))

        if phase_double:
            self._pixel_args = self.pixels.device_model(copy)
        else:
            host = self.pixels.host
            t = host.t_small[np.ix_(*host.radial)] if host.t_small is not None else np.zeros((g.npix_x, g.npix_y))
            if host.tilt is not None:
                t = t + host.tilt[0][:, None] + host.tilt[1][None, :]
            self._pixel_args = (copy(np.mod(g.w_start * t, 1.0), np.float32), copy(g.dw * t, np.float32),
                                copy(1.0 / self.pixels.correction_rows(slice(None)), self.real))
        npix_bytes = g.npix_x * g.npix_y * np.dtype(self.real).itemsize
        self._image_acc = cl.Buffer(ctx, mf.READ_WRITE, npix_bytes)
        self._image_out = cl.Buffer(ctx, mf.READ_WRITE, npix_bytes)
        self._npix_bytes = npix_bytes

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
        its rows, or only its kept samples (in plan order) where it picks them."""
        mine = given[part.rows]
        if part.index is not None:
            mine = np.take(mine.reshape(-1), part.index)
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
        events = []
        for at in ([None] if self._stream is None else self._stream_groups(plane)):
            if at is not None:
                self._stream_enter(*at)
            for part in self._parts:
                if plane in part.planes:
                    events += self.spreader.grid(part.values, 1, self._grid, wait_for, plane=plane - part.base)
        return events[-1] if events else None

    def stage_seconds(self, direction: str) -> float:
        """Device seconds of spreading (``direction="grid"``) or interpolating ("degrid") every
        active plane once, with the values of the last call (for tuning and benchmarks)."""
        events = []
        with self._lock:
            for plane in self.planes:
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
        events = []
        for at in ([None] if self._stream is None else self._stream_groups(plane)):
            if at is not None:
                self._stream_enter(*at)
            for part in self._parts:
                if plane in part.planes:
                    events += self.interpolator.degrid(part.values, 1, self._grid, wait_for, plane=plane - part.base)
        return events[-1] if events else None

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
        image's planes), or, ``kept``, every kept sample's weighted value zero."""
        reason = ("every unmasked visibility times its weight is zero" if kept
                  else "no visibility is unmasked with non-zero weight")
        warnings.warn(f"clgrid: {reason}; {what} is zero", EmptyInputWarning, stacklevel=3)

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
        g = self.geometry
        if self.num_kept == 0:
            self._zero_data_warning("the image")
            return np.zeros((g.npix_x, g.npix_y), self.real)
        if self._stream is not None:
            return self._vis2dirty_streamed(vis, wgt, progress)
        # the caller's array goes up as it is; the device picks, weights, conjugates and
        # phase-shifts the kept visibilities (gather_vis), and counts what is wrong
        bad_vis, bad_wgt, nonzero = self._gather_values(vis, wgt)
        self._check_gathered(bad_vis, bad_wgt)
        if nonzero == 0:
            self._zero_data_warning("the image", kept=True)
            return np.zeros((g.npix_x, g.npix_y), self.real)
        if self.device_fft is not None:
            return self._vis2dirty_device(progress)
        return self._vis2dirty_host(progress)

    def _check_gathered(self, bad_vis, bad_wgt) -> None:
        if bad_vis:
            raise ValueError(f"vis has NaN or infinite entries where not masked ({bad_vis})")
        if bad_wgt:
            raise ValueError(f"wgt has NaN or infinite entries where not masked ({bad_wgt})")

    def _vis2dirty_streamed(self, vis, wgt, progress):
        """`_vis2dirty` of a streaming engine: each slab's values gathered as the planes
        reach it; the values' checks (the same errors) once every slab is through."""
        g = self.geometry
        self._stream_begin("grid", vis, wgt, None)
        failed = None
        try:
            try:
                image = self._vis2dirty_device(progress) if self.device_fft is not None else \
                    self._vis2dirty_host(progress)
            except NonFiniteResultError as exc:      # the values' own errors said first, as kept
                failed = exc
        except BaseException:
            self._stream_leave(quiet=True)
            raise
        else:
            self._stream_leave()
        finally:
            self._call = None
        bad_vis, bad_wgt, nonzero = self._tally_counts()
        self._check_gathered(bad_vis, bad_wgt)
        if failed is not None:
            raise failed
        if nonzero == 0:
            self._zero_data_warning("the image", kept=True)
            return np.zeros((g.npix_x, g.npix_y), self.real)
        return image

    def _vis2dirty_host(self, progress):
        """Spread every plane on the device, transform it and accumulate on the host."""
        g = self.geometry
        image = np.zeros((g.npix_x, g.npix_y), np.float64)
        phase, step = self.pixels.plane_phases()
        tilt = self.pixels.tilt_phases()
        for plane in self.planes:
            if self._active(plane):
                zero = fill_zeros(self.queue, self._grid, self._grid_bytes, self.real)
                event = self._launch_spread(plane, [zero])
                grid = self._map_grid([event])
                blocks = self.fft.backward(grid, g.npix_x, g.npix_y, self._region(plane))

                def rows(r, blocks=blocks):
                    scratch = self.pixels.scratch()
                    for (bi, bj), view in blocks:
                        for a, b in pixel_blocks(r, bi, g.npix_y):
                            part = view[a - bi.start:b - bi.start]
                            if phase is not None:
                                np.multiply(part, self.pixels.phases_at(phase, a, b, bj, scratch), out=part)
                            if tilt is not None:
                                part *= tilt[0][a:b, None]
                                part *= tilt[2][None, bj]
                            image[a:b, bj] += part.real

                in_slices(self._workers, g.npix_x, rows)
                del blocks
                grid.base.release(self.queue)
            self.pixels.advance(phase, step)
            self.pixels.advance_tilt(tilt)
            if progress is not None:
                progress(1)
        out = np.empty((g.npix_x, g.npix_y), self.real)
        not_finite = []

        def corrected(r):
            with np.errstate(over="ignore", invalid="ignore"):
                np.divide(image[r], self.pixels.correction_rows(r), out=out[r])
            not_finite.append(np.count_nonzero(~np.isfinite(out[r])))

        in_slices(self._workers, g.npix_x, corrected)
        self._check_image(sum(not_finite))
        return out

    def _plane_args(self, plane):
        g = self.geometry
        return (np.int32(g.nu), np.int32(g.nv), np.int32(g.npix_x), np.int32(g.npix_y), np.int32(plane))

    def _vis2dirty_device(self, progress):
        """Spread, transform and crop every plane on the device; one image comes back."""
        g, q = self.geometry, self.queue
        fill_zeros(q, self._image_acc, self._npix_bytes, self.real)
        fill_zeros(q, self._tally, 12, np.int32)
        for plane in self.planes:
            if self._active(plane):
                zero = fill_zeros(q, self._grid, self._grid_bytes, self.real)
                self._launch_spread(plane, [zero])
                self.device_fft.backward(self._grid, **self._region_of(plane))
                launch(self._accumulate, q, (g.npix_y, g.npix_x), self._grid, self._image_acc, *self._pixel_args,
                       *self._plane_args(plane))
            if progress is not None:
                q.finish()
                progress(1)
        launch(self._finish, q, (g.npix_y, g.npix_x), self._image_acc, self._image_out, *self._pixel_args,
               np.int32(g.npix_x), np.int32(g.npix_y), self._tally)
        image = host_empty((g.npix_x, g.npix_y), self.real, self.staging)
        not_finite = np.empty(3, np.int32)
        cl.enqueue_copy(q, not_finite, self._tally)
        download(self.queue, self._image_out, image, self.staging)
        self._check_image(int(not_finite[0]) + int(not_finite[1]))
        return image

    def _dirty2vis_device(self, dirty):
        """The dirty image up once, checked and divided by the correction there; each plane
        made from it, transformed and interpolated on the device."""
        g, q = self.geometry, self.queue
        upload(self.queue, np.asarray(dirty, self.real), self._image_acc, self.staging)
        fill_zeros(q, self._tally, 12, np.int32)
        launch(self._finish, q, (g.npix_y, g.npix_x), self._image_acc, self._image_out, *self._pixel_args,
               np.int32(g.npix_x), np.int32(g.npix_y), self._tally)
        not_finite = np.empty(3, np.int32)
        cl.enqueue_copy(q, not_finite, self._tally)
        if not_finite[0]:        # NaN or inf in the caller's image, or beyond the precision's range
            if not np.all(np.isfinite(dirty)):
                raise ValueError("dirty has NaN or infinite entries")
            check_finite_result(int(not_finite[0]), f"dirty in {np.dtype(self.real).name}", self.precision,
                                double="a float64 image", inputs="the image")
        check_finite_result(int(not_finite[1]), "dirty divided by the grid correction", self.precision,
                            double="a float64 image", inputs="the image")
        for plane in self.planes:
            if self._active(plane):
                fill_zeros(q, self._grid, self._grid_bytes, self.real)
                launch(self._load_plane, q, (g.npix_y, g.npix_x), self._image_out, *self._pixel_args, self._grid,
                       *self._plane_args(plane))
                self.device_fft.forward(self._grid, **self._region_of(plane))
                self._launch_interp(plane)

    def _dirty2vis_host(self, dirty):
        """Each plane made on the host, transformed there and sent to the device."""
        g = self.geometry
        image = np.empty((g.npix_x, g.npix_y), np.float64)

        def corrected(r):
            np.divide(dirty[r], self.pixels.correction_rows(r), out=image[r])

        in_slices(self._workers, g.npix_x, corrected)
        phase, step = self.pixels.plane_phases()
        tilt = self.pixels.tilt_phases(conjugate=True)
        if phase is not None:                    # the conjugate phases, advanced in place
            np.conjugate(phase, out=phase)
            step = step.conj()
        for plane in self.planes:
            if self._active(plane):
                grid = self._map_grid()
                blocks = self.fft.image_blocks(grid, g.npix_x, g.npix_y)

                def rows(r):
                    clear_outside(grid, g.npix_x, g.npix_y, r)    # the last plane's transform is there
                    scratch = self.pixels.scratch()
                    for (bi, bj), view in blocks:
                        for a, b in pixel_blocks(r, bi, g.npix_y):
                            part = view[a - bi.start:b - bi.start]
                            if phase is None:
                                part[...] = image[a:b, bj]
                                continue
                            np.multiply(self.pixels.phases_at(phase, a, b, bj, scratch), image[a:b, bj], out=part)
                            if tilt is not None:
                                part *= tilt[0][a:b, None]
                                part *= tilt[2][None, bj]

                in_slices(self._workers, g.npix_x, rows)
                self.fft.forward(grid, g.npix_x, g.npix_y, self._region(plane))
                del blocks
                grid.base.release(self.queue)
                self._launch_interp(plane).wait()
            self.pixels.advance(phase, step)
            self.pixels.advance_tilt(tilt)

    def _scatter_parts(self, out, wgt, add: bool, parts=None, on=None) -> None:
        """Each part's values scattered to its samples of ``out`` through the held buffers,
        then down (``add``: added to what ``out`` holds); the tally counts what overflowed.
        ``parts`` (None: the engine's), ``on``: as `_gather_parts`'."""
        itemsize = np.dtype(self.complex).itemsize
        queue, staging = (self.queue, self.staging) if on is None else (on.queue, on.staging)
        for part in self._parts if parts is None else parts:
            self._upload_held(part, None, wgt, on)
            fill_zeros(queue, self._vis_held, part.held * itemsize, self.real)
            self._part_launch(self._scatter, part, wgt is not None, on)
            if part.index is None and not add:
                download(queue, self._vis_held, out[part.rows], staging)
                continue
            got = np.empty(part.held, self.complex)
            download(queue, self._vis_held, got, staging)
            rows = out[part.rows].reshape(-1)
            if part.index is None:
                rows += got
            elif add:
                rows[part.index] += got          # a part's samples are distinct
            else:
                rows[...] = 0
                rows[part.index] = got

    def _region(self, plane: int):
        """Where plane ``plane`` holds taps (a `clgrid.imaging.regions.Region`), or None."""
        return self.regions.at(plane) if self.regions is not None else None

    def _region_of(self, plane: int) -> dict:
        """The device FFT's keywords for plane ``plane``: the region for the mapped host FFT."""
        return {"region": self.regions.at(plane)} if self.regions is not None else {}

    def _map_grid(self, wait_for=None):
        """The device grid as a host array (mapped: on a CPU device no copy is made; on a
        GPU the driver moves it).  Release with ``grid.base.release(queue)``."""
        g = self.geometry
        grid, _ = cl.enqueue_map_buffer(self.queue, self._grid, cl.map_flags.READ | cl.map_flags.WRITE, 0,
                                        (g.nu, g.nv), self.complex, wait_for=wait_for, is_blocking=True)
        return grid

    def dirty2vis(self, dirty, wgt=None) -> np.ndarray:
        """Visibilities (nrow, nchan) of the image ``dirty`` (npix_x, npix_y): the adjoint."""
        dirty = np.asarray(dirty)
        g = self.geometry
        self._check_values("dirty", dirty, (g.npix_x, g.npix_y))
        if self.device_fft is None and not np.all(np.isfinite(dirty)):     # the device counts its own
            raise ValueError("dirty has NaN or infinite entries")
        wgt = self._checked_wgt(wgt)
        with self._lock:
            return self._dirty2vis(dirty, wgt)

    def _dirty2vis(self, dirty, wgt):
        out = host_empty(self.shape, self.complex, self.staging)
        if self.num_kept == 0:
            self._zero_data_warning("every visibility")
            out[...] = 0
            return out
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
                if self._max_planes is not None:
                    out[...] = 0
                self._scatter_parts(out, wgt, add=self._max_planes is not None)
            else:
                self._stream_leave()
        except BaseException:
            if self._stream is not None:
                self._stream_leave(quiet=True)
            raise
        finally:
            self._call = None
        not_finite, bad_wgt, _ = self._tally_counts()
        if bad_wgt:
            raise ValueError(f"wgt has NaN or infinite entries where not masked ({bad_wgt})")
        check_finite_result(int(not_finite), f"the {np.dtype(self.complex).name} visibilities", self.precision,
                            double="a float64 image", inputs="the image or the weights")
        return out


