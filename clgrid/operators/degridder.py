"""`Degridder`: the public entry point for degridding on an OpenCL device.

Degridding is the adjoint of gridding (`reference.degrid` defines it): visibilities
are predicted from a grid.  A call plans positions (or takes a `Plan`, shared with
gridders of the same geometry), uploads the grid (unless it is a device array
already), lets the strategy degrid in its order of the plan, and scatters the
results back to the caller's order and shape on the device, with flagged and
dropped samples zero.
"""

from __future__ import annotations

import time
from concurrent.futures import wait

import numpy as np
import pyopencl as cl
import pyopencl.array as cla

from .checks import check_apart, check_degridded, check_output, count_nonfinite, writes_directly
from ..errors import NonFiniteResultError
from ..planning.plan import Plan
from .operation import GridOperation, PreparedVisibilities, rows_of, with_values
from ..strategies import DEGRIDDING_METHODS, SPELLINGS
from ..device.codegen import launch
from ..device.host_threads import in_background
from ..device.transfer import download, host_empty, to_device_array, upload
from ..planning.values import ValueKernels

__all__ = ["Degridder"]

COMPLEX_DTYPES = (np.dtype(np.complex64), np.dtype(np.complex128))   # what ``out`` may be
COUNTS = ("samples", "degridded", "flagged", "off_grid", "beyond_kernel_stack", "grid_point_reads",
          "plan_seconds", "kernel_seconds")


class Degridder(GridOperation):
    """Predict visibilities from a uv-grid with W-projection kernels on an OpenCL device.

    Parameters as for `clgrid.Gridder`; ``method`` is one of ``Degridder.methods``:
    "auto" (the default: the tuning table's choice, "gather"), "gather" (any visibility
    order), "moving_window" (uvw ordered by baseline, shape (nbaseline, ntime, 3): each
    baseline's time track reuses grid values) or "fpga"; ``interpolation="linear"``
    works with "gather".  One Degridder may be shared by threads (its calls are serialised).
    """

    strategies = DEGRIDDING_METHODS
    methods = ("auto",) + tuple(sorted({method for method, _ in SPELLINGS["degrid"].values()}))
    kind = "degrid"
    done = "degridded"

    def prepare(self, plan, npol: int, flags=None, freqs=None) -> PreparedVisibilities:
        """Plan (unless ``plan`` is a `Plan`) and arrange the positions of ``npol``-polarisation
        visibilities, with room for them on the device."""
        if npol not in (1, 2, 4):
            raise ValueError(f"npol must be 1, 2 or 4, got {npol!r}")
        plan, _ = self._plan_for(plan, freqs, flags)
        with self._lock:
            return self._prepare_output(plan, npol)

    def _prepare_output(self, plan, npol: int) -> PreparedVisibilities:
        plan.check_npol(npol)
        self._check_grid_fits(npol)
        if not plan.num_kept:
            return PreparedVisibilities(plan, None, npol)
        arranged = self.arranged(plan, npol)
        values = self.scratch("values", arranged.num_vis * npol * np.dtype(self.strategy.complex_dtype).itemsize)
        return PreparedVisibilities(plan, with_values(arranged, values), npol, strategy=self.strategy_for(npol))

    def load_grid(self, grid, wait_for=None) -> tuple:
        """``(grid buffer, npol, event)``: a host grid (npol, N, N) copied to the device grid,
        or a device array used in place; refused if it holds NaN or inf (counted on the
        device; a finite grid that overflows the operator's precision is named as such)."""
        if isinstance(grid, cla.Array):
            npol = self.check_device_grid(grid, "grid")
            buffer, event = grid.data, cl.enqueue_marker(self.queue, wait_for=wait_for)
        else:
            grid = np.asarray(grid)
            if not np.iscomplexobj(grid):
                raise TypeError(f"grid must be complex (complex64 or complex128), got dtype {grid.dtype}")
            if grid.ndim != 3 or grid.shape[1:] != (self.grid_size,) * 2:
                raise ValueError(f"grid must have shape (npol, {self.grid_size}, {self.grid_size}), got {grid.shape}")
            if grid.shape[0] not in (1, 2, 4):
                raise ValueError(f"grid must have 1, 2 or 4 polarisations on its first axis, got {grid.shape[0]}")
            npol = grid.shape[0]
            self._check_grid_fits(npol)
            buffer = self.grid_buffer(npol)
            event = upload(self.queue, np.asarray(grid, self.strategy.complex_dtype), buffer, self.staging, wait_for)
        not_finite = count_nonfinite(self.queue, buffer, 2 * npol * self.grid_size ** 2, self.strategy.real_dtype,
                                     wait_for=[event])
        if not_finite and not isinstance(grid, cla.Array) and np.all(np.isfinite(grid)):
            raise NonFiniteResultError(f"the grid's values overflow {self.precision} precision ({not_finite} "
                                       f"become inf): use precision='double', or scale the grid down")
        if not_finite:
            raise ValueError(f"grid contains NaN or inf ({not_finite} values)")
        return buffer, npol, event

    def execute(self, prepared: PreparedVisibilities, grid_buffer=None, wait_for=None) -> list:
        """Enqueue degridding from the loaded grid into the prepared visibilities; returns the events."""
        if prepared.device_plan is None:
            return []
        npol = prepared.npol
        grid_buffer = self.grid_buffer(npol) if grid_buffer is None else grid_buffer
        strategy = prepared.strategy or self.strategy
        return strategy.degrid(prepared.device_plan, npol, grid_buffer, wait_for=wait_for)

    def fetch(self, prepared: PreparedVisibilities, wait_for=None, out=None):
        """The degridded visibilities in the caller's order and shape (zero where not
        degridded): scattered on the device, then copied into a numpy array (or left in
        ``out`` when it is a device array)."""
        plan, npol = prepared.plan, prepared.npol
        shape = plan.sample_shape + (npol,)
        dtype = np.dtype(self.strategy.complex_dtype)
        if out is not None:           # complex64 or complex128 in either precision: the scatter converts
            dtype = check_output(out, "out", shape, COMPLEX_DTYPES, self.context)
        target = out if isinstance(out, cla.Array) else cla.empty(self.queue, shape, dtype)
        target.fill(0, wait_for=wait_for)   # the queue is in order: the scatter comes after
        if prepared.device_plan is not None:
            flags = plan.device_pol_flags()
            kernels = ValueKernels.of(self.queue.context, self.precision == "double", npol, target.dtype,
                                      "none", np.float32, flags is not None, plan.weight_sum.dtype)
            n = prepared.device_plan.num_vis
            launch(kernels.scatter, self.queue, n, prepared.device_plan.vis,
                   None if flags is None else flags.data, prepared.device_plan.source, np.int32(n),
                   target.data)
        if isinstance(out, cla.Array):
            return out
        result = (host_empty(shape, dtype, self.staging) if out is None
                  else out if writes_directly(out) else np.empty(shape, dtype))
        self.queue.finish()
        download(self.queue, target.data, result, self.staging)
        if out is not None and result is not out:
            out[...] = result
            return out
        return result

    def degrid(self, grid, plan, flags=None, freqs=None, *, out=None, wait_for=None,
               return_report: bool = False):
        """Degrid ``grid`` (npol, N, N), indexed [pol, v, u], at the plan's positions.

        ``plan`` is a `Plan` from `plan` (pass no ``flags``/``freqs`` then) or ``uvw``
        (..., 3) to plan first: wavelengths, or metres when ``freqs`` (Hz) is given.
        ``grid`` may be a numpy array or a device array on this operator's context.
        Returns complex visibilities of shape (..., npol), or (..., nchan, npol) with
        freqs, in the grid's precision; ``flags`` broadcast to that shape.  ``out``: a
        numpy or device array of that shape to write into (refused where it shares memory
        with an input, a device one where it overlaps a device input's bytes: streamed,
        its rows are written while later rows' positions and flags are still to be read).  With ``return_report=True``
        returns ``(vis, report)``; the report is also kept in ``last_report``.
        """
        started = time.perf_counter()
        self._check_out(out, grid, plan, freqs)        # before any device work: the device writes into it
        check_apart(out, "out", {"grid": grid, "plan": plan, "flags": flags, "freqs": freqs})   # (rows in turn)
        with self._lock:
            if self._overlapped(grid, plan, freqs):
                plan, seconds, grid_buffer, npol, loaded = self._load_while_planning(grid, plan, freqs, flags,
                                                                                     wait_for)
                return self._degrid_plan(plan, npol, grid_buffer, loaded, out, started, seconds, return_report)
            grid_buffer, npol, loaded = self.load_grid(grid, wait_for)
            if isinstance(plan, Plan):
                return self._degrid_plan(plan, npol, grid_buffer, loaded, out, started, 0.0, return_report)
            shape = tuple(getattr(plan, "shape", np.shape(plan)))
            nchan = None if freqs is None else np.size(freqs)
            rows = self.row_chunks(shape, nchan, npol)
            if not rows:
                plan, seconds = self._plan_for(plan, freqs, flags)
                return self._degrid_plan(plan, npol, grid_buffer, loaded, out, started, seconds, return_report)
            # streamed: the data do not fit the device at once; each chunk of rows in turn
            sample_shape = shape[:-1] + ((nchan,) if nchan is not None else ())
            vis = np.zeros(sample_shape + (npol,), self.strategy.complex_dtype) if out is None else out
            totals = None
            for r in rows:
                part, report = self._degrid_plan(*self._plan_for(plan[r], freqs, rows_of(flags, vis.shape, r))[:1],
                                                 npol, grid_buffer, loaded, vis[r], started, 0.0, True)
                totals = report if totals is None else {
                    k: totals[k] + report[k] if k in COUNTS and report[k] is not None else report[k] for k in report}
            totals["total_seconds"] = time.perf_counter() - started
            self.last_report = totals
        return (vis, totals) if return_report else vis

    def _check_out(self, out, grid, positions, freqs) -> None:
        """Refuse an ``out`` that the visibilities of ``grid`` at ``positions`` (a `Plan`, or
        uvw with ``freqs``) would not fit exactly (`clgrid.checks.check_output`)."""
        grid_shape = tuple(getattr(grid, "shape", np.shape(grid)))
        if out is None or len(grid_shape) != 3:
            return                                       # a grid of the wrong shape is refused by name
        if isinstance(positions, Plan):
            sample_shape = positions.sample_shape
        else:
            uvw_shape = tuple(getattr(positions, "shape", np.shape(positions)))
            sample_shape = uvw_shape[:-1] + (() if freqs is None else (int(np.size(freqs)),))
        check_output(out, "out", sample_shape + (grid_shape[0],), COMPLEX_DTYPES, self.context)

    def _overlapped(self, grid, uvw, freqs) -> bool:
        """Whether a call loads a host grid while the device plans host uvw (`_load_while_planning`):
        with staging (discrete GPUs), and not when the data stream through in chunks."""
        if self.staging is None or isinstance(uvw, (Plan, cla.Array)) or isinstance(grid, cla.Array):
            return False
        if np.ndim(grid) != 3 or np.shape(uvw)[-1:] != (3,):
            return False                                  # refused by name on the plain path
        return not self.row_chunks(np.shape(uvw), None if freqs is None else np.size(freqs), np.shape(grid)[0])

    def _load_while_planning(self, grid, uvw, freqs, flags, wait_for) -> tuple:
        """(plan, planning seconds, grid buffer, npol, load event): uvw up first, then the grid
        goes up on a background thread while the device plans (both go through one staging
        in turn; the planning kernels overlap the grid's copies)."""
        uvw = to_device_array(self.transfer_queue, np.asarray(uvw, np.float64), self.staging)
        loading = in_background(self.load_grid, grid, wait_for)
        try:
            plan, seconds = self._plan_for(uvw, freqs, flags)
        except BaseException:
            wait([loading])
            raise
        return (plan, seconds) + loading.result()

    def _degrid_plan(self, plan, npol, grid_buffer, loaded, out, started, plan_seconds, return_report):
        """Degrid the loaded grid at ``plan``'s positions into ``out`` (or a new host array)."""
        prepared = self._prepare_output(plan, npol)
        events = self.execute(prepared, grid_buffer, wait_for=[loaded])
        self.last_events = events
        vis = self.fetch(prepared, events[-1:] or [loaded], out)
        report = self._keep_report(dict(plan.counts_report(self.done), grid_point_reads=prepared.grid_point_additions),
                                   started, plan_seconds, events)
        check_degridded(self, prepared.device_plan and prepared.device_plan.vis,       # overflow, empty input
                        plan.num_kept * npol, report)
        return (vis, report) if return_report else vis
