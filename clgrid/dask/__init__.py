"""Gridding and degridding over Dask: visibilities chunked along rows and channels, one
OpenCL device per worker (the ``dask`` extra: dask[array] and distributed); and, from
`clgrid.dask.wgridding`, `vis2dirty` / `dirty2vis` with ducc0.wgridder's keywords.

`grid` grids each chunk (rows, and channels where there are ``freqs``) in a task on the
worker that holds it (planned there, with a `Gridder` the worker process keeps between
tasks and calls: its programs are built once per process, not once per chunk) and sums
the partial grids pairwise by chunk index, a tree fixed by the chunking alone, so the
result does not depend on which worker finished first.  `degrid` predicts a Dask array
of visibilities chunked like the data from a model grid sent to each worker once.  The
chunking, the sum and what is sent once are `clgrid.dask.chunks`.

The kernel stack travels as its arrays under a key of their content (a scattered
object on a distributed cluster, one graph node otherwise) and is rebuilt once per
worker process: the key lets every task on a worker find the same stack, and so the
same operator and programs, whichever copy of the stack it was sent.

Devices: each worker resolves ``device`` itself (a name such as "pocl" or "gpu"); with
``device=None`` that is the worker's ``$CLGRID_DEVICE``, else its first GPU, else PoCL.
Setting ``CLGRID_DEVICE`` in each worker's environment therefore assigns the devices
(docs/user-guide/dask.md, "One device per worker"); where it names several (comma-separated, as
`assign_devices` does on a host with more devices than workers), `vis2dirty` /
`dirty2vis` drive them all (`clgrid.WGridder` with a device list) and `grid` / `degrid`
the first.

Determinism: with ``deterministic=True`` each chunk's grid is bit-identical from run to
run (fixed-point accumulation on the device, `clgrid.operators.deterministic`) and so is the
fixed-order sum: the same chunking on the same kind of device gives the same bits.  It
is not bit-identical to a single-process call, which accumulates all visibilities in
one fixed-point pass with one scale: the chunked sum adds float grids, so the two agree
to the rounding of the grid's precision (tested to 1e-5 relative in single).  Without
``deterministic`` the float atomics of each chunk still vary in the last bits.
"""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import os
import threading
import warnings
from collections import OrderedDict

import numpy as np

try:
    import dask
    import dask.array as da
    from dask.delayed import Delayed
except ImportError as error:     # pragma: no cover - exercised only without the extra
    raise ImportError("clgrid.dask needs dask and distributed: pip install 'clgrid[dask]'") from error

from .chunks import Chunk, ChunkLayout, check_device, chunk_sizes, forget_shared, naming, prefer_worker, shared, \
    tree_sum, worker_identities, workers_to_prefer
from . import watch
from .watch import compute
from .tasks import cached_wgridders
from .wgridding import clear_wgridders, dirty2vis, vis2dirty
from .weighting import imaging_weights
from ..call_warnings import caller_level, said_once
from ..operators.checks import check_finite_result
from ..operators.degridder import Degridder
from ..errors import DeviceCapabilityError, EmptyInputWarning
from ..operators.gridder import Gridder
from ..sources.base import KernelSource
from ..sources.tables import KernelStack
from ..operators.operation import BYTES_PER_SAMPLE
from ..device.runtime import devices, matching_devices

__all__ = ["grid", "degrid", "vis2dirty", "dirty2vis", "imaging_weights", "compute", "assign_devices", "clear_cache", "cached_operators",
           "cached_plans", "cached_wgridders", "kernel_token", "tree_sum"]

CACHED_OPERATORS = 8        # per worker process: each holds a device grid and its programs
_operators: OrderedDict = OrderedDict()
_kernel_stacks: dict = {}
_plans: OrderedDict = OrderedDict()   # keep_plans: (chunk key, geometry, context) -> Plan
_plan_counts = {"made": 0, "reused": 0}
_lock = threading.Lock()

# summed over chunks in the report; the other entries are the same for every chunk or joined
SUMMED = ("samples", "gridded", "degridded", "flagged", "off_grid", "beyond_kernel_stack",
          "grid_point_additions", "grid_point_reads", "norm", "plan_seconds", "kernel_seconds", "total_seconds")


# -- on the workers -------------------------------------------------------------------

def kernel_token(kernels: KernelSource) -> str:
    """A key of the kernel source's content (its dataclass fields: a table stack's planes,
    supports, oversample, w_scale; an analytic kernel's width, shape and accuracy): equal
    sources share one copy and one operator per worker."""
    fields = [(f.name, getattr(kernels, f.name)) for f in dataclasses.fields(kernels)]
    return hashlib.sha256(pickle.dumps((type(kernels).__name__, fields), protocol=5)).hexdigest()[:32]


def _stack(token: str, kernels: KernelSource) -> KernelSource:
    """The worker's one copy of the kernel source of ``token``."""
    with _lock:
        return _kernel_stacks.setdefault(token, kernels)


def _operator(cls, token: str, fields, options: dict):
    """The worker's operator for this geometry, method, precision and device: built on first
    use, then kept (at most CACHED_OPERATORS, least recently used dropped)."""
    key = (cls.__name__, token, repr(sorted(options.items())), os.environ.get("CLGRID_DEVICE"))
    with _lock:
        operator = _operators.get(key)
        if operator is not None:
            _operators.move_to_end(key)
            return operator
    kernels = _stack(token, fields)
    kwargs = dict(options)
    tuning = kwargs.pop("tuning")
    operator = cls(kernels=kernels, tuning=None if tuning is None else dict(tuning), **kwargs)
    with _lock:
        operator = _operators.setdefault(key, operator)
        _operators.move_to_end(key)
        while len(_operators) > CACHED_OPERATORS:
            _operators.popitem(last=False)
    return operator


def clear_cache() -> int:
    """Drop this process's operators (`vis2dirty`'s too), kept plans and kernel stacks (on
    every worker: ``client.run(clgrid.dask.clear_cache)``); returns how many operators
    were dropped."""
    with _lock:
        count = len(_operators)
        _operators.clear()
        _kernel_stacks.clear()
        _plans.clear()
        _plan_counts.update(made=0, reused=0)
    forget_shared()
    return count + clear_wgridders()


def cached_operators() -> list:
    """Descriptions of this process's cached operators: (class, method, precision, device name)."""
    with _lock:
        return [(type(op).__name__, op.method, op.precision, op.device.name.strip()) for op in _operators.values()]


def cached_plans() -> dict:
    """This process's chunk plans (``keep_plans=True``): how many it keeps, and how many
    it has made and reused since the last `clear_cache`."""
    with _lock:
        return dict(_plan_counts, kept=len(_plans))


def _take_device(device: str, rank: int, share: int) -> tuple:
    """On a worker: make its devices among those matching ``device`` on this host its
    ``$CLGRID_DEVICE`` (dropping operators on others): the ``rank % count``-th where its
    host's ``share`` workers are at least as many as the ``count`` devices, else every
    ``share``-th from the ``rank``-th (comma-separated: the imaging operators take them
    all); ``(spec, device names, count)``."""
    matches = matching_devices(device)
    if not matches:
        raise DeviceCapabilityError(f"no OpenCL device matches {device!r} on this worker; devices here: "
                                    + "; ".join(f"{d.platform.name}: {d.name}" for d in devices()))
    mine = [rank % len(matches)] if share >= len(matches) else list(range(rank, len(matches), share))
    spec = ", ".join(f"{device} #{k}" for k in mine)
    os.environ["CLGRID_DEVICE"] = spec
    clear_cache()
    return spec, ", ".join(matches[k].name.strip() for k in mine), len(matches)


def assign_devices(client, device: str = "gpu") -> dict:
    """Give each worker of ``client`` devices of its own among those matching ``device`` on
    its host ("gpu": one GPU per worker where a host has as many workers as GPUs), by
    setting its ``$CLGRID_DEVICE`` to ``"<device> #k"``, k its rank among the workers of
    that host; where a host has more devices than workers, each worker gets several
    (``"gpu #0, gpu #2"``: `clgrid.dask.vis2dirty` / `dirty2vis` drive them all, the
    gridding calls the first).  Returns ``{worker address: (spec, device names)}``.  Warns
    where a host has more workers than devices (they share).  A restarted worker starts
    from its environment again: call it again after restarts, or set ``CLGRID_DEVICE`` in
    each worker's environment instead (docs/user-guide/dask.md)."""
    workers = worker_identities(client)
    hosts: dict = {}
    for address in sorted(workers):
        hosts.setdefault(workers[address]["host"], []).append(address)
    assigned = {}
    for host, addresses in hosts.items():
        for rank, address in enumerate(addresses):
            spec, name, count = client.run(_take_device, device, rank, len(addresses), workers=[address])[address]
            assigned[address] = (spec, name)
        if len(addresses) > count:
            warnings.warn(f"{host}: {len(addresses)} workers share {count} device(s) matching {device!r}",
                          stacklevel=caller_level())
    return assigned


def _positions(operator, chunk: Chunk, uvw, flags, freqs) -> tuple:
    """``(positions, flags, freqs)`` for the operator's call: the chunk's kept `Plan` where
    ``keep_plans`` gave it a key (made on first use; gridders and degridders of the same
    geometry on the worker share it), else uvw with its flags and freqs to plan in the call."""
    if chunk.plan_key is None:
        return uvw, flags, freqs
    geometry = operator.geometry
    key = (chunk.plan_key, id(geometry.kernels), geometry.grid_size, geometry.cell_size, geometry.interpolation,
           geometry.time_block, operator.context.int_ptr)
    with _lock:
        plan = _plans.get(key)
        if plan is not None:
            _plans.move_to_end(key)
            _plan_counts["reused"] += 1
            return plan, None, None
    plan = operator.plan(uvw, freqs, flags)
    budget = operator.facts.global_memory // 4          # plans may take a quarter of the device
    with _lock:
        _plans[key] = plan
        _plan_counts["made"] += 1
        while len(_plans) > 1 and sum(p.num_samples for p in _plans.values()) * BYTES_PER_SAMPLE > budget:
            _plans.popitem(last=False)
    return plan, None, None


def _set_wide(message: str, category) -> bool:
    """A chunk task's warning the caller says for the whole set instead (`_warn_left_out`):
    an empty grid or prediction."""
    return issubclass(category, EmptyInputWarning)


def _grid_chunk(uvw, vis, weights, flags, kernels, chunk, token, options, freqs):
    """One task: grid one chunk; returns ``(grid, report)``.  Its warnings are said once
    each on the worker, but for an empty grid's (the caller warns for the set), gathered
    on the task's thread: tasks at once on a worker's threads keep theirs apart."""
    with naming(chunk):
        gridder = _operator(Gridder, token, kernels, options)
        with said_once(leaving_out=_set_wide):
            positions, flags, freqs = _positions(gridder, chunk, uvw, flags, freqs)
            return gridder.grid(positions, vis, weights, flags, freqs, return_report=True)


def _degrid_chunk(model, uvw, flags, kernels, chunk, token, options, freqs):
    """One task: degrid one chunk's visibilities from the model grid (its warnings as
    `_grid_chunk`'s)."""
    with naming(chunk):
        degridder = _operator(Degridder, token, kernels, options)
        with said_once(leaving_out=_set_wide):
            positions, flags, freqs = _positions(degridder, chunk, uvw, flags, freqs)
            return degridder.degrid(model, positions, flags, freqs)


def _add(a: tuple, b: tuple) -> tuple:
    """Two partial ``(grid, report)`` results summed (a new grid: inputs are left as they are)."""
    grid_a, report_a = a
    grid_b, report_b = b
    if grid_a.shape != grid_b.shape:
        raise ValueError(f"chunks gridded {grid_a.shape[0]} and {grid_b.shape[0]} polarisations")
    return grid_a + grid_b, _merge(report_a, report_b)


def _merge(a: dict, b: dict) -> dict:
    merged = {}
    for key, value in a.items():
        other = b.get(key)
        if key in SUMMED:
            merged[key] = None if value is None or other is None else value + other
        elif value == other:
            merged[key] = value
        else:
            merged[key] = "; ".join(sorted(set(str(value).split("; ")) | set(str(other).split("; "))))
    return merged


# -- on the client ---------------------------------------------------------------------

def _options(grid_size, cell_size, method, precision, device, tuning, on_dropped, interpolation, **more) -> dict:
    if on_dropped not in ("warn", "raise", "ignore"):
        raise ValueError(f"on_dropped must be 'warn', 'raise' or 'ignore', got {on_dropped!r}")
    device = check_device(device)
    if isinstance(device, tuple):
        raise TypeError("device: clgrid.dask.grid and degrid drive one device per worker (a name, or None); "
                        "several devices per worker are for clgrid.dask.vis2dirty / dirty2vis")
    return dict(grid_size=int(grid_size), cell_size=float(cell_size), method=method, precision=precision,
                device=device, interpolation=interpolation,
                tuning=None if tuning is None else tuple(sorted(tuning.items())),
                on_dropped="raise" if on_dropped == "raise" else "ignore", **more)   # the caller warns


def _layout(uvw, freqs, channel_chunks, per_channel: tuple) -> ChunkLayout:
    """Row chunks from ``uvw`` (a dask array: its first axis); channel chunks, where there are
    ``freqs``, from ``channel_chunks``, else from the first dask array of ``per_channel``
    (vis, weights, flags) whose channel axis (the one after uvw's leading axes) has them all."""
    if not isinstance(uvw, da.Array):
        raise TypeError(f"uvw must be a dask array chunked along rows (its first axis), e.g. "
                        f"dask.array.from_array(uvw, chunks=(rows, 3)); got {type(uvw).__name__}")
    if uvw.ndim < 2 or uvw.shape[-1] != 3:
        raise ValueError(f"uvw must have shape (..., 3), got {uvw.shape}")
    nrow, leading = uvw.shape[0], uvw.ndim - 1
    rows = chunk_sizes("uvw", uvw.chunks[0], nrow)
    if freqs is None:
        if channel_chunks is not None:
            raise ValueError("channel_chunks needs freqs: without them the data have no channel axis")
        return ChunkLayout(rows, None, nrow, None, leading)
    nchan = freqs.size
    if channel_chunks is None:
        channel_chunks = next((a.chunks[leading] for a in per_channel if isinstance(a, da.Array)
                               and a.ndim > leading and a.shape[0] == nrow and a.shape[leading] == nchan), -1)
    return ChunkLayout(rows, chunk_sizes("channel_chunks", channel_chunks, nchan), nrow, nchan, leading)


def _pieces(layout: ChunkLayout, a) -> list:
    """Weights, flags or vis cut per chunk; an array that broadcasts goes whole to each task,
    cut to its channels on the axis where `Gridder` reads them: the second last where it
    has as many axes as the visibilities (one per visibility), else the last (one per
    sample, broadcast to ``uvw.shape[:-1] + (nchan,)``)."""
    ndim = len(a.shape if isinstance(a, da.Array) else np.shape(a)) if a is not None else 0
    return layout.pieces(a, broadcast_channel_axis=-2 if ndim == layout.leading + 2 else -1)


def _plan_keys(chunks: list, uvw_pieces: list, flag_pieces: list, freqs, keep_plans: bool) -> list:
    """The chunks with their plan keys where ``keep_plans``: a chunk's positions named by the
    Dask keys of its uvw and flags blocks (content-derived for `dask.array.from_array` and
    readers alike) and its frequencies."""
    if not keep_plans:
        return chunks
    out = []
    for chunk, u, f in zip(chunks, uvw_pieces, flag_pieces):
        flag_key = f.key if isinstance(f, Delayed) else dask.base.tokenize(f)
        chans = freqs if chunk.channels is None else freqs[slice(*chunk.channels)]
        out.append(Chunk(chunk.index, chunk.rows, chunk.channels,
                         (str(u.key), str(flag_key), dask.base.tokenize(chans))))
    return out


def _channel_freqs(freqs, chunk: Chunk):
    return freqs if freqs is None or chunk.channels is None else freqs[slice(*chunk.channels)]


def grid(uvw, vis, weights=None, flags=None, freqs=None, *, grid_size: int, cell_size: float,
         kernels: KernelStack, method: str = "auto", precision: str = "single", deterministic: bool = False,
         device: str | None = None, tuning: dict | None = None, on_dropped: str = "warn",
         interpolation: str = "nearest", keep_plans: bool = False, channel_chunks=None,
         return_report: bool = False, compute: bool = True, stall_timeout=None):
    """Grid visibilities chunked along rows and channels over Dask; returns the summed
    ``(npol, N, N)`` grid.

    Arguments as for `clgrid.Gridder` and `Gridder.grid`.  ``uvw`` is a dask array whose
    chunks along its first axis (rows, or baselines of ``(nbaseline, ntime, 3)`` tracks)
    make the row blocks; with ``freqs``, ``channel_chunks`` (an int or sizes; default: the
    chunks of ``vis``, else ``weights`` or ``flags``, along their channel axis) make the
    channel blocks, and each task grids one row block's channels of one channel block.
    ``vis``, and ``weights``/``flags`` with as many rows, are split the same way (dask or
    numpy arrays); polarisations stay whole, and a smaller array that broadcasts goes to
    each task whole (cut to its channels where it has them).  ``device`` is a name each
    worker resolves (None: the worker's ``$CLGRID_DEVICE``).  Partial grids are summed
    pairwise by chunk index (`tree_sum`); with ``deterministic=True`` the result is
    bit-identical from run to run for the same chunking (module docstring).  With
    ``return_report=True`` returns ``(grid, report)``, the counts and ``norm`` summed over
    chunks.  ``compute=False`` returns a `dask.delayed` of ``(grid, report)`` instead
    (`clgrid.dask.compute` computes it watched).  A call that can make no progress for
    ``stall_timeout`` seconds (None: 120; workers paused for memory or gone) raises
    `clgrid.errors.ClusterStalledError` (`clgrid.dask.watch`).
    ``keep_plans=True`` keeps each chunk's `Plan` on its worker, named by the Dask keys of
    its uvw and flags blocks and its frequencies, for later calls on the same chunks (major
    cycles: `degrid` with ``keep_plans=True`` uses the same plans): a chunk is planned at
    most once per worker; on a distributed cluster chunk i prefers worker i mod n (sorted
    by address) so later calls tend to find its plan.  Kept plans take at most a quarter
    of the device's memory per worker, least recently used dropped.
    """
    watch.stall_seconds(stall_timeout)
    freqs = None if freqs is None else np.asarray(freqs, np.float64).reshape(-1)
    layout = _layout(uvw, freqs, channel_chunks, (vis, weights, flags))
    vis_shape = vis.shape if isinstance(vis, da.Array) else np.shape(vis)
    if vis_shape[:layout.leading] != uvw.shape[:-1]:
        raise ValueError(f"vis of shape {vis_shape} does not match uvw of shape {uvw.shape}: its leading "
                         f"axes must be uvw's {uvw.shape[:-1]}")
    token = kernel_token(kernels)
    stack = shared(f"clgrid-kernels-{token}", kernels, keep=True)
    options = _options(grid_size, cell_size, method, precision, device, tuning, on_dropped, interpolation,
                       deterministic=bool(deterministic))
    uvw_pieces, flag_pieces = layout.pieces(uvw, channels=False), _pieces(layout, flags)
    chunks = _plan_keys(layout.chunks(), uvw_pieces, flag_pieces, freqs, keep_plans)
    parts, workers = [], workers_to_prefer(keep_plans)
    for u, v, w, f, chunk in zip(uvw_pieces, _pieces(layout, vis), _pieces(layout, weights),
                                 flag_pieces, chunks):
        with prefer_worker(chunk.index, workers):
            parts.append(dask.delayed(_grid_chunk, pure=False)(u, v, w, f, stack, chunk, token, options,
                                                               _channel_freqs(freqs, chunk)))
    total = tree_sum(parts, dask.delayed(_add, pure=False))
    if not compute:
        return total
    result, report = watch.compute(total, stall_timeout=stall_timeout)[0]
    check_finite_result(np.count_nonzero(~np.isfinite(result)), f"the {precision}-precision grid (the sum of "
                        f"the chunks' grids)", precision, quantity="cell sums")     # each chunk's was finite
    _warn_left_out(report, on_dropped, "gridded")
    return (result, report) if return_report else result


def _warn_left_out(report: dict, on_dropped: str, done: str) -> None:
    """The warnings the workers were told to keep quiet, once for the whole set."""
    dropped = report["off_grid"] + report["beyond_kernel_stack"]
    if dropped and on_dropped == "warn":
        warnings.warn(f"{dropped} of {report['samples']} visibilities not {done}: {report['off_grid']} off "
                      f"the grid, {report['beyond_kernel_stack']} beyond the last w-plane", stacklevel=caller_level())
    if report[done] == 0:
        warnings.warn(f"no visibility was {done} ({report['samples']} samples: {report['flagged']} flagged, "
                      f"{dropped} dropped): the result is zero", EmptyInputWarning, stacklevel=caller_level())
    elif done == "gridded" and np.any(np.asarray(report["norm"]) == 0):
        warnings.warn("the weights of some polarisation are all zero (or flagged): that grid is zero and its "
                      "norm 0", EmptyInputWarning, stacklevel=caller_level())


def degrid(grid, uvw, flags=None, freqs=None, *, grid_size: int, cell_size: float, kernels: KernelStack,
           method: str = "auto", precision: str = "single", device: str | None = None,
           tuning: dict | None = None, on_dropped: str = "warn", interpolation: str = "nearest",
           keep_plans: bool = False, channel_chunks=None):
    """Degrid ``grid`` (npol, N, N) at ``uvw`` over Dask; returns a lazy dask array of
    visibilities ``uvw.shape[:-1] (+ (nchan,)) + (npol,)`` chunked along rows as ``uvw``
    and, with ``freqs``, along channels as ``channel_chunks`` (an int or sizes; default:
    the chunks of ``flags`` along its channel axis, else all channels in one).

    Arguments as for `clgrid.Degridder` and `Degridder.degrid`.  ``grid`` (numpy, or a
    dask array computed to one block) is sent to every worker once: scattered on a
    distributed cluster, else one node of the graph.  Each task plans and degrids its
    chunk with the worker's kept `Degridder`; degridding is deterministic, so the result
    equals the single-process call's.  Dropped samples come back as 0 (on_dropped="raise"
    makes them an error in the task that meets them).  ``keep_plans`` as for `grid`.
    """
    freqs = None if freqs is None else np.asarray(freqs, np.float64).reshape(-1)
    layout = _layout(uvw, freqs, channel_chunks, (flags,))
    if isinstance(grid, da.Array):
        grid = grid.compute()
    grid = np.asarray(grid)
    if grid.ndim != 3 or grid.shape[1:] != (grid_size, grid_size) or not np.iscomplexobj(grid):
        raise ValueError(f"grid must be a complex array of shape (npol, {grid_size}, {grid_size}), got "
                         f"{grid.dtype} {grid.shape}")
    token = kernel_token(kernels)
    stack = shared(f"clgrid-kernels-{token}", kernels, keep=True)
    model = shared(f"clgrid-model-{dask.base.tokenize(grid)}", grid)
    options = _options(grid_size, cell_size, method, precision, device, tuning, on_dropped, interpolation)
    dtype = np.complex128 if precision == "double" else np.complex64
    uvw_pieces, flag_pieces = layout.pieces(uvw, channels=False), _pieces(layout, flags)
    pieces, workers = [], workers_to_prefer(keep_plans)
    for u, f, chunk in zip(uvw_pieces, flag_pieces, _plan_keys(layout.chunks(), uvw_pieces, flag_pieces, freqs,
                                                               keep_plans)):
        chans = _channel_freqs(freqs, chunk)
        with prefer_worker(chunk.index, workers):
            task = dask.delayed(_degrid_chunk, pure=False)(model, u, f, stack, chunk, token, options, chans)
        shape = (chunk.rows[1] - chunk.rows[0],) + uvw.shape[1:-1] + (() if chans is None else (chans.size,))
        pieces.append(da.from_delayed(task, shape=shape + (grid.shape[0],), dtype=dtype))
    return layout.assemble(pieces, channel_axis=layout.leading)
