"""Gridding and degridding over Dask: visibilities chunked along rows, one OpenCL device
per worker (the ``dask`` extra: dask[array] and distributed).

`grid` grids each row chunk in a task on the worker that holds it (planned there, with
a `Gridder` the worker process keeps between tasks and calls: its programs are built
once per process, not once per chunk) and sums the partial grids pairwise by chunk
index, a tree fixed by the chunking alone, so the result does not depend on which
worker finished first.  `degrid` predicts a Dask array of visibilities chunked like
``uvw`` from a model grid sent to each worker once.

The kernel stack travels as its arrays under a key of their content (a scattered
object on a distributed cluster, one graph node otherwise) and is rebuilt once per
worker process: the key lets every task on a worker find the same stack, and so the
same operator and programs, whichever copy of the stack it was sent.

Devices: each worker resolves ``device`` itself (a name such as "pocl" or "gpu"); with
``device=None`` that is the worker's ``$CLGRID_DEVICE``, else its first GPU, else PoCL.
Setting ``CLGRID_DEVICE`` in each worker's environment therefore assigns the devices
(README, "Beyond one machine: Dask").

Determinism: with ``deterministic=True`` each chunk's grid is bit-identical from run to
run (fixed-point accumulation on the device, `clgrid.deterministic`) and so is the
fixed-order sum: the same chunking on the same kind of device gives the same bits.  It
is not bit-identical to a single-process call, which accumulates all visibilities in
one fixed-point pass with one scale: the chunked sum adds float grids, so the two agree
to the rounding of the grid's precision (tested to 1e-5 relative in single).  Without
``deterministic`` the float atomics of each chunk still vary in the last bits.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import uuid
import warnings
from collections import OrderedDict

import numpy as np

try:
    import dask
    import dask.array as da
    from dask.delayed import Delayed
except ImportError as error:     # pragma: no cover - exercised only without the extra
    raise ImportError("clgrid.dask needs dask and distributed: pip install 'clgrid[dask]'") from error

from .degridder import Degridder
from .errors import DeviceCapabilityError, EmptyInputWarning
from .gridder import Gridder
from .kernels import KernelStack
from .operation import BYTES_PER_SAMPLE
from .runtime import devices, matching_devices

__all__ = ["grid", "degrid", "assign_devices", "clear_cache", "cached_operators", "cached_plans", "kernel_token",
           "tree_sum"]

CACHED_OPERATORS = 8        # per worker process: each holds a device grid and its programs
_operators: OrderedDict = OrderedDict()
_kernel_stacks: dict = {}
_plans: OrderedDict = OrderedDict()   # keep_plans: (chunk key, geometry, context) -> Plan
_plan_counts = {"made": 0, "reused": 0}
_scattered: dict = {}       # on the client: (client id, name) -> Future of a kernel stack
_lock = threading.Lock()

# summed over chunks in the report; the other entries are the same for every chunk or joined
SUMMED = ("samples", "gridded", "degridded", "flagged", "off_grid", "beyond_kernel_stack",
          "grid_point_additions", "grid_point_reads", "norm", "plan_seconds", "kernel_seconds", "total_seconds")


# -- on the workers -------------------------------------------------------------------

def kernel_token(kernels: KernelStack) -> str:
    """A key of the stack's content (planes, supports, oversample, w_scale): equal stacks
    share one rebuilt copy and one operator per worker."""
    digest = hashlib.sha256()
    digest.update(np.asarray(kernels.supports, np.int32).tobytes())
    digest.update(repr((kernels.oversample, kernels.w_scale, kernels.taper)).encode())
    for plane in kernels.planes:
        digest.update(np.ascontiguousarray(plane).tobytes())
    return digest.hexdigest()[:32]


def _kernel_fields(kernels: KernelStack) -> tuple:
    return (kernels.planes, kernels.supports, kernels.oversample, kernels.w_scale, kernels.taper)


def _stack(token: str, fields: tuple) -> KernelStack:
    """The worker's one `KernelStack` for ``token`` (built from its arrays the first time)."""
    with _lock:
        if token not in _kernel_stacks:
            _kernel_stacks[token] = KernelStack(*fields)
        return _kernel_stacks[token]


def _operator(cls, token: str, fields: tuple, options: dict):
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
    """Drop this process's operators, kept plans and kernel stacks (on every worker:
    ``client.run(clgrid.dask.clear_cache)``); returns how many operators were dropped."""
    with _lock:
        count = len(_operators)
        _operators.clear()
        _kernel_stacks.clear()
        _scattered.clear()
        _plans.clear()
        _plan_counts.update(made=0, reused=0)
    return count


def cached_operators() -> list:
    """Descriptions of this process's cached operators: (class, method, precision, device name)."""
    with _lock:
        return [(type(op).__name__, op.method, op.precision, op.device.name.strip()) for op in _operators.values()]


def cached_plans() -> dict:
    """This process's chunk plans (``keep_plans=True``): how many it keeps, and how many
    it has made and reused since the last `clear_cache`."""
    with _lock:
        return dict(_plan_counts, kept=len(_plans))


def _take_device(device: str, rank: int) -> tuple:
    """On a worker: make the ``rank % count``-th device matching ``device`` on this host the
    worker's ``$CLGRID_DEVICE`` (dropping operators on another); ``(spec, device name, count)``."""
    matches = matching_devices(device)
    if not matches:
        raise DeviceCapabilityError(f"no OpenCL device matches {device!r} on this worker; devices here: "
                                    + "; ".join(f"{d.platform.name}: {d.name}" for d in devices()))
    spec = f"{device} #{rank % len(matches)}"
    os.environ["CLGRID_DEVICE"] = spec
    clear_cache()
    return spec, matches[rank % len(matches)].name.strip(), len(matches)


def assign_devices(client, device: str = "gpu") -> dict:
    """Give each worker of ``client`` a device of its own among those matching ``device`` on
    its host ("gpu": one GPU per worker), by setting its ``$CLGRID_DEVICE`` to
    ``"<device> #k"``, k its rank among the workers of that host; returns ``{worker address:
    (spec, device name)}``.  Warns where a host has more workers than devices (they share).
    A restarted worker starts from its environment again: call it again after restarts, or
    set ``CLGRID_DEVICE`` in each worker's environment instead (README)."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    hosts: dict = {}
    for address in sorted(workers):
        hosts.setdefault(workers[address]["host"], []).append(address)
    assigned = {}
    for host, addresses in hosts.items():
        for rank, address in enumerate(addresses):
            spec, name, count = client.run(_take_device, device, rank, workers=[address])[address]
            assigned[address] = (spec, name)
        if len(addresses) > count:
            warnings.warn(f"{host}: {len(addresses)} workers share {count} device(s) matching {device!r}",
                          stacklevel=2)
    return assigned


def _where(chunk: tuple) -> str:
    index, rows = chunk[:2]
    return f"clgrid.dask: chunk {index}, rows {rows[0]}:{rows[1]}"


def _positions(operator, chunk: tuple, uvw, flags, freqs) -> tuple:
    """``(positions, flags, freqs)`` for the operator's call: the chunk's kept `Plan` where
    ``keep_plans`` gave it a key (made on first use; gridders and degridders of the same
    geometry on the worker share it), else uvw with its flags and freqs to plan in the call."""
    plan_key = chunk[2]
    if plan_key is None:
        return uvw, flags, freqs
    geometry = operator.geometry
    key = (plan_key, id(geometry.kernels), geometry.grid_size, geometry.cell_size, geometry.interpolation,
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


def _grid_chunk(uvw, vis, weights, flags, kernels, chunk, token, options, freqs):
    """One task: grid one chunk; returns ``(grid, report)``."""
    gridder = _operator(Gridder, token, kernels, options)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EmptyInputWarning)   # the caller warns for the whole set
            positions, flags, freqs = _positions(gridder, chunk, uvw, flags, freqs)
            return gridder.grid(positions, vis, weights, flags, freqs, return_report=True)
    except Exception as error:
        if hasattr(error, "add_note"):
            error.add_note(_where(chunk))
        raise


def _degrid_chunk(model, uvw, flags, kernels, chunk, token, options, freqs):
    """One task: degrid one chunk's visibilities from the model grid."""
    degridder = _operator(Degridder, token, kernels, options)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EmptyInputWarning)
            positions, flags, freqs = _positions(degridder, chunk, uvw, flags, freqs)
            return degridder.degrid(model, positions, flags, freqs)
    except Exception as error:
        if hasattr(error, "add_note"):
            error.add_note(_where(chunk))
        raise


def _chunks(rows: tuple, uvw_blocks: list, flag_blocks: list, freqs, keep_plans: bool) -> list:
    """``(index, (first row, end row), plan key or None)`` per chunk.  The plan key names the
    chunk's positions by the Dask keys of its uvw and flags blocks (content-derived for
    `dask.array.from_array` and readers alike) and the frequencies."""
    starts = np.concatenate([[0], np.cumsum(rows)]).astype(int)
    out = []
    for i, (u, f) in enumerate(zip(uvw_blocks, flag_blocks)):
        key = None
        if keep_plans:
            flag_key = f.key if isinstance(f, Delayed) else dask.base.tokenize(f)
            key = (str(u.key), str(flag_key), dask.base.tokenize(freqs))
        out.append((i, (int(starts[i]), int(starts[i + 1])), key))
    return out


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


def tree_sum(parts: list, add):
    """Pairwise sums by index, level by level ([0+1, 2+3, ...], an odd last one carried up):
    a tree fixed by the number of parts, whatever order they finish in."""
    if not parts:
        raise ValueError("nothing to sum")
    while len(parts) > 1:
        parts = [add(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    return parts[0]


# -- on the client ---------------------------------------------------------------------

def _client():
    """The distributed Client in use, or None (then dask's local scheduler runs the tasks)."""
    try:
        from distributed import get_client
        return get_client()
    except (ImportError, ValueError):
        return None


def _shared(name: str, value, keep: bool = False):
    """``value`` as one dependency of every task: scattered to every worker once on a
    distributed cluster, else one node of the graph (not copied into each task).  With
    ``keep`` the scattered future is kept for later calls with the same ``name`` (the
    kernel stack of every major cycle); otherwise each call scatters under a key of its
    own (re-scattering a key that an earlier call is releasing loses it)."""
    client = _client()
    if client is None:
        return dask.delayed(value, name=name, traverse=False)
    key = (client.id, name)
    with _lock:
        future = _scattered.get(key) if keep else None
    if future is None or future.status != "finished":
        unique = f"{name}-{uuid.uuid4().hex[:12]}"     # a dict: a tuple would scatter element by element
        future = client.scatter({unique: value}, broadcast=True, hash=False)[unique]
        if keep:
            with _lock:
                _scattered[key] = future
                while len(_scattered) > CACHED_OPERATORS:
                    _scattered.pop(next(iter(_scattered)))
    return future


def _placed(chunk: tuple, keep_plans: bool):
    """With ``keep_plans`` on a distributed cluster, chunk i prefers worker i mod n (by
    address), so that later calls tend to find its plan there.  A preference, not a
    restriction: Dask may still move it (work stealing, a worker gone), and a task pinned
    to a lost worker would wait for ever."""
    client = _client() if keep_plans else None
    if client is None:
        return contextlib.nullcontext()
    workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
    if not workers:
        return contextlib.nullcontext()
    return dask.annotate(workers=[workers[chunk[0] % len(workers)]], allow_other_workers=True)


def _check_device(device):
    if device is not None and not isinstance(device, str):
        raise TypeError(f"device must be None or a device name (str) that each worker resolves, got "
                        f"{type(device).__name__}: pyopencl objects belong to one process")
    return device


def _options(grid_size, cell_size, method, precision, device, tuning, on_dropped, interpolation, **more) -> dict:
    if on_dropped not in ("warn", "raise", "ignore"):
        raise ValueError(f"on_dropped must be 'warn', 'raise' or 'ignore', got {on_dropped!r}")
    return dict(grid_size=int(grid_size), cell_size=float(cell_size), method=method, precision=precision,
                device=_check_device(device), interpolation=interpolation,
                tuning=None if tuning is None else tuple(sorted(tuning.items())),
                on_dropped="raise" if on_dropped == "raise" else "ignore", **more)   # the caller warns


def _row_chunks(uvw):
    if not isinstance(uvw, da.Array):
        raise TypeError(f"uvw must be a dask array chunked along rows (its first axis), e.g. "
                        f"dask.array.from_array(uvw, chunks=(rows, 3)); got {type(uvw).__name__}")
    if uvw.ndim < 2 or uvw.shape[-1] != 3:
        raise ValueError(f"uvw must have shape (..., 3), got {uvw.shape}")
    rows = uvw.chunks[0]
    if any(np.isnan(r) for r in rows):
        raise ValueError("uvw has chunks of unknown size: call uvw.compute_chunk_sizes() first")
    return rows


def _blocks(a, rows: tuple, nrow: int, leading: int) -> list:
    """One piece of ``a`` per row chunk: a dask or numpy array with ``nrow`` rows and at
    least ``leading`` axes is split as ``uvw`` is; anything else (None, or a small array
    that broadcasts, such as weights per channel) goes whole to every task."""
    if a is None:
        return [None] * len(rows)
    shape = a.shape if isinstance(a, da.Array) else np.shape(a)
    if len(shape) < leading or shape[0] != nrow:
        if isinstance(a, da.Array):
            a = a.compute()
        return [a] * len(rows)
    if not isinstance(a, da.Array):
        a = da.from_array(np.asarray(a), chunks=(rows,) + tuple(-1 for _ in shape[1:]))
    a = a.rechunk((rows,) + tuple(-1 for _ in shape[1:]))
    return list(a.to_delayed().reshape(len(rows)))


def grid(uvw, vis, weights=None, flags=None, freqs=None, *, grid_size: int, cell_size: float,
         kernels: KernelStack, method: str = "auto", precision: str = "single", deterministic: bool = False,
         device: str | None = None, tuning: dict | None = None, on_dropped: str = "warn",
         interpolation: str = "nearest", keep_plans: bool = False, return_report: bool = False,
         compute: bool = True):
    """Grid visibilities chunked along rows over Dask; returns the summed ``(npol, N, N)`` grid.

    Arguments as for `clgrid.Gridder` and `Gridder.grid`.  ``uvw`` is a dask array whose
    chunks along its first axis (rows, or baselines of ``(nbaseline, ntime, 3)`` tracks)
    make the tasks; ``vis``, and ``weights``/``flags`` with as many rows, are split the
    same way (dask or numpy arrays); channels and polarisations stay whole.  ``device``
    is a name each worker resolves (None: the worker's ``$CLGRID_DEVICE``).  Partial grids
    are summed pairwise by chunk index (`tree_sum`); with ``deterministic=True`` the
    result is bit-identical from run to run for the same chunking (module docstring).
    With ``return_report=True`` returns ``(grid, report)``, the counts and ``norm`` summed
    over chunks.  ``compute=False`` returns a `dask.delayed` of ``(grid, report)`` instead.
    ``keep_plans=True`` keeps each chunk's `Plan` on its worker, named by the Dask keys of
    its uvw and flags blocks, for later calls on the same chunks (major cycles: `degrid`
    with ``keep_plans=True`` uses the same plans): a chunk is planned at most once per
    worker; on a distributed cluster chunk i prefers worker i mod n (sorted by address)
    so later calls tend to find its plan.  Kept plans take at most a quarter of the
    device's memory per worker, least recently used dropped.
    """
    rows = _row_chunks(uvw)
    nrow, leading = uvw.shape[0], uvw.ndim - 1
    uvw = uvw.rechunk((rows,) + (-1,) * (uvw.ndim - 1))
    token = kernel_token(kernels)
    stack = _shared(f"clgrid-kernels-{token}", _kernel_fields(kernels), keep=True)
    options = _options(grid_size, cell_size, method, precision, device, tuning, on_dropped, interpolation,
                       deterministic=bool(deterministic))
    vis_shape = vis.shape if isinstance(vis, da.Array) else np.shape(vis)
    if vis_shape[:leading] != uvw.shape[:-1]:
        raise ValueError(f"vis of shape {vis_shape} does not match uvw of shape {uvw.shape}: its leading "
                         f"axes must be uvw's {uvw.shape[:-1]}")
    freqs = None if freqs is None else np.asarray(freqs, np.float64)
    uvw_blocks, flag_blocks = _blocks(uvw, rows, nrow, leading), _blocks(flags, rows, nrow, leading)
    parts = []
    for u, v, w, f, chunk in zip(uvw_blocks, _blocks(vis, rows, nrow, leading), _blocks(weights, rows, nrow, leading),
                                 flag_blocks, _chunks(rows, uvw_blocks, flag_blocks, freqs, keep_plans)):
        with _placed(chunk, keep_plans):
            parts.append(dask.delayed(_grid_chunk, pure=False)(u, v, w, f, stack, chunk, token, options, freqs))
    total = tree_sum(parts, dask.delayed(_add, pure=False))
    if not compute:
        return total
    result, report = dask.compute(total)[0]
    _warn_left_out(report, on_dropped, "gridded")
    return (result, report) if return_report else result


def _warn_left_out(report: dict, on_dropped: str, done: str) -> None:
    """The warnings the workers were told to keep quiet, once for the whole set."""
    dropped = report["off_grid"] + report["beyond_kernel_stack"]
    if dropped and on_dropped == "warn":
        warnings.warn(f"{dropped} of {report['samples']} visibilities not {done}: {report['off_grid']} off "
                      f"the grid, {report['beyond_kernel_stack']} beyond the last w-plane", stacklevel=3)
    if report[done] == 0:
        warnings.warn(f"no visibility was {done} ({report['samples']} samples: {report['flagged']} flagged, "
                      f"{dropped} dropped): the result is zero", EmptyInputWarning, stacklevel=3)
    elif done == "gridded" and np.any(np.asarray(report["norm"]) == 0):
        warnings.warn("the weights of some polarisation are all zero (or flagged): that grid is zero and its "
                      "norm 0", EmptyInputWarning, stacklevel=3)


def degrid(grid, uvw, flags=None, freqs=None, *, grid_size: int, cell_size: float, kernels: KernelStack,
           method: str = "auto", precision: str = "single", device: str | None = None,
           tuning: dict | None = None, on_dropped: str = "warn", interpolation: str = "nearest",
           keep_plans: bool = False):
    """Degrid ``grid`` (npol, N, N) at ``uvw`` over Dask; returns a lazy dask array of
    visibilities ``uvw.shape[:-1] (+ (nchan,)) + (npol,)`` chunked along rows as ``uvw``.

    Arguments as for `clgrid.Degridder` and `Degridder.degrid`.  ``grid`` (numpy, or a
    dask array computed to one block) is sent to every worker once: scattered on a
    distributed cluster, else one node of the graph.  Each task plans and degrids its
    chunk with the worker's kept `Degridder`; degridding is deterministic, so the result
    equals the single-process call's.  Dropped samples come back as 0 (on_dropped="raise"
    makes them an error in the task that meets them).  ``keep_plans`` as for `grid`.
    """
    rows = _row_chunks(uvw)
    nrow, leading = uvw.shape[0], uvw.ndim - 1
    uvw = uvw.rechunk((rows,) + (-1,) * (uvw.ndim - 1))
    if isinstance(grid, da.Array):
        grid = grid.compute()
    grid = np.asarray(grid)
    if grid.ndim != 3 or grid.shape[1:] != (grid_size, grid_size) or not np.iscomplexobj(grid):
        raise ValueError(f"grid must be a complex array of shape (npol, {grid_size}, {grid_size}), got "
                         f"{grid.dtype} {grid.shape}")
    token = kernel_token(kernels)
    stack = _shared(f"clgrid-kernels-{token}", _kernel_fields(kernels), keep=True)
    model = _shared(f"clgrid-model-{dask.base.tokenize(grid)}", grid)
    options = _options(grid_size, cell_size, method, precision, device, tuning, on_dropped, interpolation)
    freqs = None if freqs is None else np.asarray(freqs, np.float64)
    tail = ((freqs.size,) if freqs is not None else ()) + (grid.shape[0],)
    dtype = np.complex128 if precision == "double" else np.complex64
    pieces = []
    uvw_blocks, flag_blocks = _blocks(uvw, rows, nrow, leading), _blocks(flags, rows, nrow, leading)
    for u, f, chunk in zip(uvw_blocks, flag_blocks, _chunks(rows, uvw_blocks, flag_blocks, freqs, keep_plans)):
        with _placed(chunk, keep_plans):
            task = dask.delayed(_degrid_chunk, pure=False)(model, u, f, stack, chunk, token, options, freqs)
        first, end = chunk[1]
        pieces.append(da.from_delayed(task, shape=(end - first,) + uvw.shape[1:-1] + tail, dtype=dtype))
    return da.concatenate(pieces, axis=0)

