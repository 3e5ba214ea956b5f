"""`Gridder`: the public entry point for gridding on an OpenCL device.

A call plans positions (or takes a `Plan` made before: `Gridder.plan`), gathers its
visibilities into the strategy's order on the device, weighted and with flagged ones
zero (`clgrid.planning.values`), zeroes the grid (unless accumulating), lets the strategy
enqueue its kernels and copies the grid back (or leaves it in a device array).  The
report of the last call (counts of what was gridded and dropped, ``norm``, timings)
is kept in ``last_report``.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, wait

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .checks import check_apart, check_gridded, check_output, writes_directly
from .deterministic import FixedPointGrid
from ..planning.plan import Plan
from ..device.host_threads import in_background
from .operation import GridOperation, PreparedVisibilities, kernel_seconds, rows_of, with_values
from ..device.codegen import launch
from ..device.runtime import fill_zeros
from ..strategies import GRIDDING_METHODS, SPELLINGS
from ..device.transfer import device_layout, download, host_empty, to_device_array
from ..planning.values import ValueKernels, check_vis, check_weights, to_device

__all__ = ["Gridder", "PreparedVisibilities", "kernel_seconds"]


def _settle(staged) -> None:
    """Wait for a staged chunk's upload still running on its thread (its error is the
    caller's no longer: the call already failed)."""
    if staged is not None and isinstance(staged[1], Future):
        wait([staged[1]])


class Gridder(GridOperation):
    """Grid visibilities onto a uv-grid with W-projection kernels on an OpenCL device.

    Parameters
    ----------
    grid_size : int
        Even number of cells N along u and v; the centre is at N // 2.
    cell_size : float
        Image-plane pixel size in radians; the uv cell is 1 / (N * cell_size).
    kernels : KernelStack
        The stack of kernels to convolve with.
    method : str
        Work distribution, one of ``Gridder.methods``: "auto" (the default: the
        tuning table's choice for the device, e.g. "tiled" on Hopper GPUs, "atomic"
        elsewhere), "atomic", "tiled", "moving_window" (baseline-ordered tracks),
        "fpga" (a single work-item pipeline) or "rows" (bands of grid rows, each
        owned by one work-item: no atomics, for CPU devices).
    interpolation : str
        "nearest" (the nearest oversampled kernel sample, seed 003) or "linear"
        (trilinear in u, v and w, the texture path of seed 004 §4.1: with "atomic" or
        "moving_window"; `clgrid.sources.interpolation`).
    device : None, str, or pyopencl Device, Context or CommandQueue
        None (``$CLGRID_DEVICE``, else a GPU, else PoCL), a name such as "pocl" or
        "nvidia", or a pyopencl Device, Context or (in-order) CommandQueue, with or
        without profiling (without it, ``kernel_seconds`` in the report is None).
    precision : str
        "single" (complex64 grid) or "double" (complex128; needs fp64).
    tuning : dict or None
        Overrides of the tuning table's parameters for this strategy.
    on_dropped : str
        "warn", "raise" or "ignore" for visibilities off the grid or beyond the kernel
        stack (they are counted in ``last_report`` in every case).
    binary : str, path or None
        A precompiled program (from ``clgrid emit`` and an offline compiler such as
        ``aoc``, or `Strategy.save_binary`) to load instead of building the source; its
        ``.json`` description must sit beside it and match this call.
    deterministic : bool
        Bit-identical grids from run to run (same device and parameters): accumulate
        in 64-bit fixed point instead of float atomics
        (`clgrid.operators.deterministic` states its precision; it needs 64-bit
        integer atomics).

    Notes
    -----
    One Gridder may be shared by threads (its calls are serialised).
    """

    strategies = GRIDDING_METHODS
    methods = ("auto",) + tuple(sorted({method for method, _ in SPELLINGS["grid"].values()}))
    kind = "grid"
    done = "gridded"

    def __init__(self, *args, deterministic: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fixed_point = FixedPointGrid(self) if deterministic and self.strategy.atomics else None

    def prepare(self, plan, vis, weights=None, flags=None, freqs=None) -> PreparedVisibilities:
        """Plan (unless ``plan`` is a `Plan`) and put one call's values on the device, in the
        strategy's order, ready for `execute` (any number of times)."""
        plan, _ = self._plan_for(plan, freqs, flags)
        with self._lock:
            return self._prepare_values(plan, vis, weights)

    def _prepare_values(self, plan, vis, weights, wait_for=None) -> PreparedVisibilities:
        npol = check_vis(vis, plan.sample_shape)
        plan.check_npol(npol)
        self._check_grid_fits(npol)
        weights, mode = check_weights(weights, plan.sample_shape, npol)
        if not plan.num_kept:
            return PreparedVisibilities(plan, None, npol, np.zeros(npol))
        arranged = self.arranged(plan, npol)
        queue = self.queue
        vis_d = to_device(queue, vis, "vis", self.staging)
        weights_d = None if weights is None else to_device(queue, weights, "weights", self.staging)
        flags_d = plan.device_pol_flags()
        kernels = ValueKernels.of(queue.context, self.precision == "double", npol, vis_d.dtype, mode,
                                  np.float32 if weights_d is None else weights_d.dtype, flags_d is not None,
                                  plan.weight_sum.dtype)
        itemsize = np.dtype(self.strategy.complex_dtype).itemsize
        values = self.scratch("values", arranged.num_vis * npol * itemsize)
        bad = cla.to_device(queue, np.zeros(2, np.int32))
        n = arranged.num_vis
        launch(kernels.gather, queue, n, vis_d.data, None if weights_d is None else weights_d.data,
               None if flags_d is None else flags_d.data, arranged.source, np.int32(n), values,
               bad.data, wait_for=wait_for)
        norm = np.array([kernels.norm(queue, plan.num_kept, plan.weight_sum.data, plan.sample.data,
                                      None if weights_d is None else weights_d.data,
                                      None if flags_d is None else flags_d.data, np.int32(p)).get()
                         for p in range(npol)], np.float64)
        not_finite, bad_weights = (int(c) for c in bad.get())
        if bad_weights:
            raise ValueError(f"weights must be finite and >= 0 where not flagged ({bad_weights} are not)")
        if not_finite:
            raise ValueError(f"vis contains NaN or inf in unflagged data ({not_finite} values)")
        exponent = self.fixed_point.scale(values, n * npol) if self.fixed_point else 0

        def magnitude():
            return sum(kernels.magnitude(queue, plan.num_kept, vis_d.data, plan.sample.data,
                                         None if weights_d is None else weights_d.data,
                                         None if flags_d is None else flags_d.data, np.int32(p)).get()
                       for p in range(npol))

        return PreparedVisibilities(plan, with_values(arranged, values), npol, norm, exponent, magnitude,
                                    self.strategy_for(npol))

    def execute(self, prepared: PreparedVisibilities, grid_buffer=None, accumulate: bool = False,
                wait_for=None) -> list:
        """Enqueue zeroing (unless ``accumulate``) and gridding into the device grid (or
        ``grid_buffer``); returns the OpenCL events, the strategy's after the zeroing."""
        npol = prepared.npol
        grid_buffer = self.grid_buffer(npol) if grid_buffer is None else grid_buffer
        if self.fixed_point:
            return self.fixed_point.execute(prepared, grid_buffer, accumulate, wait_for)
        if accumulate:
            start = cl.enqueue_marker(self.queue, wait_for=wait_for)
        else:
            start = fill_zeros(self.queue, grid_buffer, self._grid_bytes(npol), self.strategy.real_dtype,
                               wait_for)
        if prepared.device_plan is None:
            return [start]
        strategy = prepared.strategy or self.strategy
        return [start, *strategy.grid(prepared.device_plan, npol, grid_buffer, wait_for=[start])]

    def grid(self, plan, vis, weights=None, flags=None, freqs=None, *, out=None, accumulate: bool = False,
             wait_for=None, return_report: bool = False):
        """Grid visibilities; returns the ``(npol, N, N)`` complex grid, indexed ``[pol, v, u]``.

        ``plan`` is a `Plan` from `plan` (values only: pass no ``flags``/``freqs``), or
        ``uvw`` (..., 3) to plan first: wavelengths, or metres when ``freqs`` (Hz) is
        given.  ``vis`` (..., npol) or with freqs (..., nchan, npol), npol 1, 2 or 4,
        complex64 or complex128.  ``weights``: one per sample (shaped like ``vis``
        without its polarisation axis, as ducc0's ``wgt``) or one per visibility,
        broadcasting.  ``vis`` and ``weights`` may be `pyopencl.array.Array` on this
        operator's context.  ``out``: a numpy array or device array of the grid's shape
        and dtype to write into (a device ``out`` stays on the device: no copy back; a
        numpy one that shares memory with an input, or a device one that overlaps a device
        input's bytes, is refused, as every output is, `clgrid.operators.checks.check_apart`);
        ``accumulate=True`` adds to what ``out`` holds.  With ``return_report=True``
        returns ``(grid, report)``; the report is also kept in ``last_report``.  Host
        data larger than the device (`samples_per_chunk`) streams through it in chunks
        of rows (`grid_chunks`), each upload overlapping the last chunk's kernels.
        """
        check_apart(out, "out", {"plan": plan, "vis": vis, "weights": weights, "flags": flags, "freqs": freqs})
        if not isinstance(plan, Plan) and not isinstance(vis, cla.Array):
            shape = tuple(getattr(plan, "shape", np.shape(plan)))
            rows = self.row_chunks(shape, None if freqs is None else np.size(freqs), np.shape(vis)[-1])
            if rows:
                vis_shape = np.shape(vis)
                return self.grid_chunks(((plan[r], vis[r], rows_of(weights, vis_shape, r),
                                          rows_of(flags, vis_shape, r)) for r in rows),
                                        freqs=freqs, out=out, accumulate=accumulate,
                                        return_report=return_report)
        return self.grid_chunks([(plan, vis, weights, flags)], freqs=freqs, out=out, accumulate=accumulate,
                                wait_for=wait_for, return_report=return_report)

    def grid_chunks(self, chunks, freqs=None, *, out=None, accumulate: bool = False, wait_for=None,
                    return_report: bool = False):
        """Grid a stream of ``(uvw, vis, weights, flags)`` chunks into one grid (as `grid`
        does with a whole data set larger than the device: each chunk is planned, gridded
        and added, and the next chunk's upload overlaps this one's kernels).  The first
        element of a chunk may be a `Plan` (then flags must be None).  Returns the grid,
        and the summed report with ``return_report=True``."""
        started = time.perf_counter()
        chunks = iter(chunks)
        with self._lock:
            staged = self._stage(next(chunks, None))
            if staged is None:
                raise ValueError("grid_chunks needs at least one chunk")
            try:
                first, totals, plan_seconds, kernel_events = True, None, 0.0, []
                while staged is not None:
                    positions, vis, weights, flags = staged
                    plan, seconds = self._plan_for(positions, freqs, flags)
                    plan_seconds += seconds
                    vis = vis.result() if isinstance(vis, Future) else vis
                    prepared = self._prepare_values(plan, vis, weights, wait_for if first else None)
                    if first:
                        npol, grid_buffer = prepared.npol, self._output_grid(out, prepared.npol, accumulate)
                    elif prepared.npol != npol:
                        raise ValueError(f"chunks of {npol} and {prepared.npol} polarisations")
                    events = self.execute(prepared, grid_buffer,
                                          accumulate=accumulate and out is not None or not first)
                    kernel_events += events[1:]
                    counts = dict(plan.counts_report(self.done), grid_point_additions=prepared.grid_point_additions,
                                  norm=prepared.norm)
                    totals = counts if totals is None else {k: totals[k] + counts[k] for k in totals}
                    first = False
                    staged = self._stage(next(chunks, None))   # uploads while this chunk's kernels run
                self.last_events = events
                result = self._deliver(out, grid_buffer, npol, events)
                report = self._keep_report(totals, started, plan_seconds, kernel_events)
                check_gridded(self, grid_buffer, npol, report,                      # overflow, empty input
                              bound=lambda: self.value_bound(prepared))
            except BaseException:
                _settle(staged)        # no upload of this call outlives it (another thread's queue)
                raise
        return (result, report) if return_report else result

    def value_bound(self, prepared) -> float:
        """What one cell can sum to at most, for the last chunk: sum |Re v| + |Im v| of its
        weighted visibilities times the largest kernel value (read for error messages)."""
        if prepared.magnitude is None:
            return 0.0
        kmax = self.kernels.peak
        return float(prepared.magnitude()) * kmax

    def _stage(self, chunk):
        """A chunk with its uvw and visibilities uploaded through the transfer queue (host
        arrays; device arrays and plans pass through)."""
        if chunk is None:
            return None
        positions, vis, weights, flags = (tuple(chunk) + (None, None))[:4]
        if isinstance(positions, Plan) or isinstance(vis, cla.Array):
            return positions, vis, weights, flags
        vis = np.asarray(vis)
        if vis.dtype.newbyteorder("=") not in (np.complex64, np.complex128):
            return positions, vis, weights, flags            # refused by name when prepared
        queue = self.transfer_queue
        uvw = to_device_array(queue, np.asarray(positions, np.float64), self.staging)
        # the values go up while the device plans the positions (a Future until then)
        return uvw, in_background(to_device_array, queue, vis, self.staging), weights, flags

    def _output_grid(self, out, npol: int, accumulate: bool):
        """The device buffer a call grids into: ``out``'s own when it is a device array,
        else the operator's grid, holding a host ``out`` when accumulating."""
        shape = (npol, self.grid_size, self.grid_size)
        if out is not None:
            check_output(out, "out", shape, self.strategy.complex_dtype, self.context)
        if isinstance(out, cla.Array):
            return out.data
        grid_buffer = self.grid_buffer(npol)
        if accumulate and out is not None:
            cl.enqueue_copy(self.queue, grid_buffer, device_layout(out))
        return grid_buffer

    def _deliver(self, out, grid_buffer, npol: int, events):
        """The grid for the caller: ``out`` itself, or a new host array copied back."""
        if isinstance(out, cla.Array):
            self.queue.finish()
            return out
        shape = (npol, self.grid_size, self.grid_size)
        result = (host_empty(shape, self.strategy.complex_dtype, self.staging) if out is None
                  else out if writes_directly(out) else np.empty(shape, self.strategy.complex_dtype))
        download(self.queue, grid_buffer, result, self.staging, wait_for=events[-1:])
        if out is not None and result is not out:
            out[...] = result
            result = out
        return result
