"""How an imaging engine whose points do not fit its device at once takes them through it
(`stream_schedule`): the w-planes cut into slabs, in order, each slab's points planned
when the plane loop reaches it and released after it; a plane whose own points do not
fit is taken in groups of rows, one after the other onto the same grid before its FFT.
And the slabs a stack of w-planes is arranged in where its sort keys pass 32 bits
(`max_slab_planes`, `slab_geometry`).  Why this order (and not parts of rows, each with
every plane's FFT), and the 32-bit indices: docs/design/streaming.md.

The engine's side of it is `StreamedPoints`, a mixin of
`clgrid.imaging.engine.ImagingEngine`: the schedule set up (`DEVICE_SHARE`), each group of
points planned on a second queue while the one before is spread (`STREAM_OVERLAP`), and
handed back after it.  Also the parts of rows every engine cuts its points in (`row_parts`).
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from types import SimpleNamespace

import numpy as np
import pyopencl as cl

from ..call_warnings import warn
from ..device.runtime import fill_zeros
from ..device.transfer import shared_staging
from ..errors import DeviceCapabilityError, NonFiniteResultError, StreamedWarning
from ..planning.plan import as_host
from .geometry import ImageGeometry
from .memory import engine_stream_bytes, stream_sample_bytes
from .split import first_planes, plane_counts

__all__ = ["StreamSlab", "stream_schedule", "plane_touch_counts", "KEY_LIMIT", "max_slab_planes", "slab_geometry",
           "row_parts", "StreamedPoints", "DEVICE_SHARE", "STREAM_OVERLAP"]

# The sort keys of one arrangement (plane x keys per plane + place in the plane) and the
# entries of its table of where each key's run starts are 32-bit (clgrid/planning/stacking.py,
# clgrid/device/counting_sort.py): at most this many keys in one arrangement.  A stack of
# planes with more is arranged in slabs (`max_slab_planes`, `slab_geometry`).
KEY_LIMIT = 2 ** 31 - 1
# the share of a device's global memory an engine's buffers may take; beyond it, its points
# are streamed (`StreamedPoints._setup_stream`, `ImagingEngine.streamed`)
DEVICE_SHARE = 0.9
# a streaming engine plans its next group on its own thread and queue while the current one
# is spread (False: in turn, on the calling thread: the benchmarks' A/B)
STREAM_OVERLAP = True


@dataclass(frozen=True)
class StreamSlab:
    """Planes ``planes`` (a range) and the groups of rows (slices) whose points with a tap
    on them are on the device together: one group (every row), or, for a slab of one
    plane whose points do not fit at once, several, taken in turn onto that plane."""

    planes: range
    groups: tuple
    points: int          # kept samples with a tap on the slab's planes


def max_slab_planes(geometry: ImageGeometry, keys_per_plane: int, key_limit: int = KEY_LIMIT) -> int | None:
    """The most planes a slab may have so that its arrangement's keys stay below
    ``key_limit`` (its geometry, `slab_geometry`, holds W - 1 planes more on either side), or
    None where the whole stack's keys do.  Refused, naming the sizes, where not one plane can."""
    if geometry.num_planes * keys_per_plane < key_limit:
        return None
    planes = (key_limit - 1) // keys_per_plane - 2 * (_support(geometry) - 1)
    if planes < 1:
        raise ValueError(f"a w-plane of {keys_per_plane} sort keys (support {_support(geometry)}) leaves no slab "
                         f"of planes below {key_limit} keys: image in facets (smaller grids)")
    return planes


def slab_geometry(geometry: ImageGeometry, planes: range) -> tuple:
    """``(geometry, base)``: the stack that the points with a tap on ``planes`` need, planes
    ``base`` .. of ``geometry`` (from W - 1 before ``planes`` to W - 1 after), as a geometry of
    its own (planned and arranged in it, its keys count from plane ``base``)."""
    support = _support(geometry)
    base = max(planes.start - support + 1, 0)
    top = min(planes.stop + support - 1, geometry.num_planes)
    if base == 0 and top == geometry.num_planes:
        return geometry, 0
    return replace(geometry, w_min=geometry.w_min + base * geometry.dw, num_planes=top - base), base


def _support(geometry: ImageGeometry) -> int:
    return geometry.kernel.support if geometry.do_wgridding else 1


def _first(uvw, scale, keep, geometry: ImageGeometry, workers: int) -> np.ndarray:
    """Each sample's first plane (nrow, nchan), -1 where not kept (without w: plane 0)."""
    if geometry.do_wgridding:
        return first_planes(uvw, scale, keep, geometry, workers)
    first = np.zeros((uvw.shape[0], scale.size), np.int8)
    if keep is not None:
        first[~keep] = -1
    return first


def plane_touch_counts(counts: np.ndarray, support: int) -> np.ndarray:
    """Kept samples with a tap on each plane, from the counts of first planes."""
    return np.convolve(np.asarray(counts, np.int64), np.ones(support, np.int64))[:counts.size]


def stream_schedule(uvw, scale, keep, geometry: ImageGeometry, planes: range, capacity: int,
                    workers: int = 1, max_planes: int | None = None) -> tuple:
    """``(slabs, touch, kept)``: the `StreamSlab` s that cover ``planes`` in order, each of as
    many planes as hold at most ``capacity`` points (kept samples with a tap on the slab);
    ``touch`` (num_planes,), the kept samples with a tap on each plane (where it is 0, the
    plane has nothing to spread); ``kept``, the kept samples with a tap on ``planes``.  A
    plane whose points do not fit is a slab of its own, its rows cut into groups of at most
    ``capacity`` points (a group holds one row at least).
    ``max_planes``: the most planes a slab may have (None: any; `max_slab_planes`).
    ``uvw``/``scale``/``keep``: as the planning's (the first planes are its arithmetic,
    `clgrid.imaging.split.first_planes`)."""
    g, support = geometry, _support(geometry)
    first = _first(uvw, scale, keep, g, workers)
    counts = plane_counts(first, g, workers) if g.do_wgridding else \
        np.array([int(np.count_nonzero(first >= 0))], np.int64)
    cumulative = np.concatenate([[0], np.cumsum(counts)])

    def points(lo, hi):          # first plane in lo - W + 1 .. hi - 1
        return int(cumulative[hi] - cumulative[max(lo - support + 1, 0)])

    slabs, lo, nrow = [], planes.start, uvw.shape[0]
    while lo < planes.stop:
        hi = lo + 1
        while hi < planes.stop and points(lo, hi + 1) <= capacity and \
                (max_planes is None or hi - lo < max_planes):
            hi += 1
        n = points(lo, hi)
        groups = (slice(0, nrow),) if n <= capacity else _row_groups(first, lo, support, capacity)
        slabs.append(StreamSlab(range(lo, hi), groups, n))
        lo = hi
    return slabs, plane_touch_counts(counts, support), points(planes.start, planes.stop)


def _row_groups(first: np.ndarray, plane: int, support: int, capacity: int) -> tuple:
    """Consecutive rows, each group with at most ``capacity`` points that have a tap on
    ``plane`` (or one row)."""
    touching = (first >= max(plane - support + 1, 0)) & (first <= plane)
    ends = np.cumsum(np.count_nonzero(touching, axis=1), dtype=np.int64)
    groups, start, before = [], 0, 0
    while start < first.shape[0]:
        stop = max(int(np.searchsorted(ends, before + capacity, side="right")), start + 1)
        groups.append(slice(start, stop))
        before, start = int(ends[stop - 1]), stop
    return tuple(groups)


def row_parts(nrow: int, nchan: int, samples: int) -> list:
    """Slices of rows, each of at most ``samples`` (row, channel) samples (at least one row)."""
    rows = max(1, samples // max(nchan, 1))
    return [slice(a, min(a + rows, nrow)) for a in range(0, max(nrow, 1), rows)]


def _size(nbytes: int) -> str:
    """Bytes in GiB, or MiB below a tenth of one."""
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2 ** 30 / 10 else f"{nbytes / 2**20:.1f} MiB"


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


class StreamedPoints:
    """The streaming of an imaging engine's points through its device, slab by slab of
    w-planes: a mixin of `clgrid.imaging.engine.ImagingEngine`, whose set-up calls
    `_setup_stream` where its points take more than `DEVICE_SHARE` of the device, and whose
    calls then go through `_stream_begin`, `_stream_enter` (from the plane loop, per group of
    `_stream_groups`) and `_stream_leave`.

    It reads the engine's attributes (``geometry``, ``facts``, ``queue``, ``planes``,
    ``precision``, ``spread_mode``, ``_part_samples``, ...) and calls its methods
    (``_make_part``, ``_gather_parts``, ``_scatter_parts``, the plane loops); it holds no
    state of its own beyond what `_setup_stream` sets on the engine (``streamed``,
    ``_stream``, ``_prep``, ``_call``, ...).  docs/design/streaming.md says why and how.
    """

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
        warn(
            f"clgrid: {self.nrow * self.nchan} samples' points need about {_size(every)} on the "
            f"device; {facts.name} has {_size(facts.global_memory)}: they are streamed through it in "
            f"{len(slabs)} slab(s) of w-planes ({groups} group(s) of rows), planned again every call",
            StreamedWarning, stacklevel=None)     # the caller's line

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
    # a streaming engine's call: which slab's group of points is on the device, and the next
    # one planned beside it on the preparer's queue (docs/design/streaming.md)
    def _stream_begin(self, direction: str, vis, wgt, out) -> None:
        """Start a call of a streaming engine: the groups (slab, group) it will reach, in
        order, and the first one's planning started on the preparer; ``direction`` "grid"
        (``vis``, ``wgt``: the caller's) or "degrid" (``out``: the visibilities, zeroed, that
        each group's values are added to; ``overflowed`` counts the sums those additions
        made non-finite, what a sample's shares of several slabs may overflow to though
        each is finite)."""
        order = [(i, k) for i, slab in enumerate(self._stream) if any(self._active(p) for p in slab.planes)
                 for k in range(len(slab.groups))]
        worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clgrid-stream") if STREAM_OVERLAP \
            else _InTurn()
        self._call = SimpleNamespace(direction=direction, vis=vis, wgt=wgt, out=out, at=None, order=order,
                                     next=0, worker=worker, pending=None, overflowed=0)
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
            call.overflowed += self._scatter_parts(call.out, call.wgt, add=True, parts=old, on=prep)
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
                 for r in row_parts(rows.stop - rows.start, self.nchan, self._part_samples)]
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
