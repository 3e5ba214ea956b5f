"""What every clgrid call over Dask shares: visibilities cut into chunks of rows and
channels, each input split into one piece per chunk, objects sent to the workers once,
the fixed-order sum of partial results, and errors that name the chunk they came from.

`clgrid.dask` (gridding, degridding) and `clgrid.dask.wgridding` (vis2dirty, dirty2vis)
are built on it; nothing here knows about gridders or images.

A chunk is one task: rows ``rows[0]:rows[1]`` of the leading axis (rows, or baselines of
``(nbaseline, ntime, 3)`` tracks) and, where the data have channels, channels
``channels[0]:channels[1]``.  Chunks are numbered row block by row block, channel blocks
inside each (row-major), and that number alone fixes the order of the sum (`tree_sum`).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from dataclasses import dataclass

import numpy as np

try:
    import dask
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer
except ImportError as error:     # pragma: no cover - exercised only without the extra
    raise ImportError("clgrid's Dask support needs dask and distributed: pip install 'clgrid[dask]'") from error

__all__ = ["Chunk", "ChunkLayout", "chunk_sizes", "client", "started", "send_now", "shared", "forget_shared", "task_of", "tree_sum",
           "naming", "worker_identities", "workers_to_prefer", "prefer_worker", "prefer_address", "holders", "check_device"]

KEPT_SCATTERED = 8          # scattered objects kept for later calls (kernel stacks)
_scattered: dict = {}       # on the client: (client id, name) -> Future
_lock = threading.Lock()


@dataclass(frozen=True)
class Chunk:
    """One task's share of the data: its number in the sum, its rows, its channels (None:
    the data have no channel axis, or it is not split) and, for `clgrid.dask`'s
    ``keep_plans``, the key its plan is kept under on the worker."""

    index: int
    rows: tuple
    channels: tuple | None = None
    plan_key: tuple | None = None

    def describe(self) -> str:
        """``clgrid.dask: chunk 2, rows 680:1020[, channels 0:2]``: the note a failing task's
        error carries to the caller."""
        text = f"clgrid.dask: chunk {self.index}, rows {self.rows[0]}:{self.rows[1]}"
        if self.channels is not None:
            text += f", channels {self.channels[0]}:{self.channels[1]}"
        return text


def chunk_sizes(name: str, chunks, length: int) -> tuple:
    """``chunks`` (an int, or a tuple of sizes adding up to ``length``, as dask takes them)
    as a tuple of sizes; refused naming ``name`` otherwise."""
    try:
        sizes = da.core.normalize_chunks(chunks, (length,))[0]
    except (ValueError, TypeError) as error:
        raise ValueError(f"{name}={chunks!r} does not split {length}: give an int or sizes adding up to "
                         f"{length}") from error
    if any(isinstance(s, float) and np.isnan(s) for s in sizes):
        raise ValueError(f"{name} has chunks of unknown size: call compute_chunk_sizes() on the array first")
    return tuple(int(s) for s in sizes)


@dataclass(frozen=True)
class ChunkLayout:
    """The chunks of a call: ``rows`` (sizes of the row blocks, adding up to ``nrow``) by
    ``channels`` (sizes of the channel blocks, adding up to ``nchan``; None where the data
    have no channel axis).  ``leading`` is the number of leading (row) axes of the data:
    1 for ``(nrow, ...)``, 2 for ``(nbaseline, ntime, ...)``; the channel axis, where
    there is one, follows them."""

    rows: tuple
    channels: tuple | None
    nrow: int
    nchan: int | None
    leading: int = 1

    def __post_init__(self):
        if sum(self.rows) != self.nrow:
            raise ValueError(f"row chunks {self.rows} do not add up to {self.nrow} rows")
        if self.channels is not None and sum(self.channels) != self.nchan:
            raise ValueError(f"channel chunks {self.channels} do not add up to {self.nchan} channels")

    @property
    def row_bounds(self) -> list:
        edges = np.concatenate([[0], np.cumsum(self.rows)]).astype(int)
        return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]

    @property
    def channel_bounds(self) -> list:
        if self.channels is None:
            return [None]
        edges = np.concatenate([[0], np.cumsum(self.channels)]).astype(int)
        return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]

    @property
    def shape(self) -> tuple:
        """(row blocks, channel blocks)."""
        return len(self.rows), len(self.channels) if self.channels is not None else 1

    def chunks(self) -> list:
        """Every `Chunk`, numbered row-major: row block i, channel block j is ``i * ncb + j``."""
        ncb = self.shape[1]
        return [Chunk(i * ncb + j, rows, channels)
                for i, rows in enumerate(self.row_bounds) for j, channels in enumerate(self.channel_bounds)]

    def pieces(self, a, channels: bool = True, broadcast_channel_axis: int | None = None) -> list:
        """``a`` cut into one piece per chunk (in `chunks` order): a dask or numpy array with
        ``nrow`` rows is split along its rows, and (with ``channels``: it has a channel axis,
        the one after the leading axes; uvw has not) along that axis where it has ``nchan``
        entries; pieces of a dask array are `dask.delayed` objects, so each task receives
        only its own block.  Anything else (None, or a small array that broadcasts against
        the data, such as weights per channel) goes whole to every task, cut along
        ``broadcast_channel_axis`` (counted from the end; None: not cut) where that axis has
        ``nchan`` entries and the channels are split."""
        count = self.shape[0] * self.shape[1]
        if a is None:
            return [None] * count
        shape = a.shape if isinstance(a, da.Array) else np.shape(a)
        if len(shape) >= self.leading and shape[0] == self.nrow:
            return self._split(a, shape, channels)
        if isinstance(a, da.Array):
            a = a.compute()
        a = np.asarray(a)
        axis = broadcast_channel_axis
        if (not channels or axis is None or self.channels is None or a.ndim < -axis or a.shape[axis] != self.nchan
                or self.nchan == 1):
            return [a] * count
        cut = [a[(Ellipsis, slice(*c)) + (slice(None),) * (-axis - 1)] for c in self.channel_bounds]
        return cut * self.shape[0]

    def _split(self, a, shape, channels: bool) -> list:
        channel_axis = self.leading
        split_channels = (channels and self.channels is not None and len(shape) > channel_axis
                          and shape[channel_axis] == self.nchan and self.nchan > 1)
        chunks = [self.rows] + [-1] * (len(shape) - 1)
        if split_channels:
            chunks[channel_axis] = self.channels
        if isinstance(a, da.Array):
            a = a.rechunk(tuple(chunks))
        else:
            a = da.from_array(np.asarray(a), chunks=tuple(chunks))
        blocks = a.to_delayed()
        nrb, ncb = self.shape
        out = []
        for i in range(nrb):
            for j in range(ncb):
                index = [i] + [0] * (len(shape) - 1)
                if split_channels:
                    index[channel_axis] = j
                out.append(blocks[tuple(index)])
        return out

    def block_key(self, name: str, chunk: Chunk) -> tuple:
        """The key of ``chunk``'s block in the Dask array ``name`` of `array_of` (data of
        shape (rows, channels), or (rows,) without a channel axis)."""
        i, j = divmod(chunk.index, self.shape[1])
        return (name, i, j) if self.channels is not None else (name, i)

    def array_of(self, name: str, tasks: list, dtype):
        """Per-chunk `dask.delayed` tasks (in `chunks` order, each made with
        ``dask_key_name=self.block_key(name, chunk)``, none under a worker annotation) as
        one Dask array ``name`` of shape (rows, channels) whose blocks are those tasks'
        results themselves.  `assemble` over `dask.array.from_delayed` pieces ends each
        block in an alias task (a scheduler hop per block after its task, computed or
        persisted); here the tasks' layers are made the array's own layer."""
        if self.leading != 1:
            raise ValueError("array_of: data of (rows[, channels]) only")
        merged = HighLevelGraph.merge(*[t.__dask_graph__() for t in tasks])
        layers, dependencies = dict(merged.layers), dict(merged.dependencies)
        own, needs = {}, set()
        for task in tasks:
            for layer in task.__dask_layers__():
                own.update(layers.pop(layer))
                needs |= dependencies.pop(layer)
        layers[name], dependencies[name] = MaterializedLayer(own), needs
        chunks = (self.rows,) if self.channels is None else (self.rows, self.channels)
        return da.Array(HighLevelGraph(layers, dependencies), name, chunks, dtype=dtype)

    def assemble(self, pieces: list, channel_axis: int | None = None):
        """Per-chunk dask arrays (in `chunks` order) joined into one: channel blocks along
        ``channel_axis``, then row blocks along axis 0."""
        nrb, ncb = self.shape
        rows = []
        for i in range(nrb):
            row = pieces[i * ncb:(i + 1) * ncb]
            rows.append(row[0] if ncb == 1 else da.concatenate(row, axis=channel_axis))
        return rows[0] if nrb == 1 else da.concatenate(rows, axis=0)


def tree_sum(parts: list, add):
    """Pairwise sums by index, level by level ([0+1, 2+3, ...], an odd last one carried up):
    a tree fixed by the number of parts, whatever order they finish in."""
    if not parts:
        raise ValueError("nothing to sum")
    while len(parts) > 1:
        parts = [add(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    return parts[0]


@contextlib.contextmanager
def naming(chunk: Chunk):
    """In a task: an exception leaving the block carries a note naming the chunk (the
    caller sees it on the exception Dask raises there)."""
    try:
        yield
    except Exception as error:
        if hasattr(error, "add_note"):
            error.add_note(chunk.describe())
        raise


# -- on the client ---------------------------------------------------------------------

def client():
    """The distributed Client in use, or None (then dask's local scheduler runs the tasks):
    None too where ``dask.config.set(scheduler=...)`` chose a local scheduler, as Dask's
    own ``compute`` then runs there (so nothing is scattered or submitted to a cluster
    that the call's graph will not run on)."""
    if dask.config.get("scheduler", None) not in (None, "dask.distributed", "distributed"):
        return None
    try:
        from distributed import get_client
        return get_client()
    except (ImportError, ValueError):
        return None


def started(tasks: list) -> list:
    """``tasks`` (Dask delayed objects) submitted now on a distributed cluster, their
    worker preferences (`prefer_worker`) with them; as they are (lazy) without one.

    For tasks a dask array is built on: Dask's array optimization merges the graph's
    layers into one and drops their annotations, and a task without its preference is
    placed by where its inputs are, or, once its task group outgrows the cluster (a
    major cycle's calls each add theirs), wherever a thread is free, so a slab's task
    ran on another worker than its kept operator's, which built the operator again
    (seconds: docs/benchmarks/dask.md).  Submitted as delayed objects, unoptimised, they
    keep it."""
    current = client()
    if current is None or not tasks:
        return list(tasks)
    futures = list(current.persist(list(tasks), optimize_graph=False))
    send_now(current)
    return futures


def send_now(current) -> None:
    """What the client ``current`` has just submitted (a graph) sent to the scheduler now.

    A distributed client batches its messages to the scheduler (``BatchedSend``: one
    batch every 10 ms at most), so a graph submitted within 10 ms of another message
    waits for the rest of that interval: in a major cycle, a call right after another
    (whose futures were released as it returned) lost up to 10 ms before its first task
    started (docs/benchmarks/dask.md).  Here, on the client's event loop after the
    submission's own callback, a batch held back for its interval goes at once.  This
    reads the batching's attributes (``buffer``, ``next_deadline``, ``waker``); a client
    without them is left as it is."""
    comm, loop = getattr(current, "scheduler_comm", None), getattr(current, "loop", None)
    if comm is None or loop is None or not all(hasattr(comm, a) for a in ("buffer", "next_deadline", "waker")):
        return

    def now() -> None:
        if comm.buffer and comm.next_deadline is not None:
            comm.next_deadline = None         # (the batching's wait for its interval ends)
            comm.waker.set()

    loop.add_callback(now)


def shared(name: str, value, keep: bool = False):
    """``value`` as one dependency of every task: scattered to every worker once on a
    distributed cluster, else one node of the graph (not copied into each task).  With
    ``keep`` the scattered future is kept for later calls with the same ``name`` (the
    kernel stack of every major cycle); otherwise each call scatters under a key of its
    own (re-scattering a key that an earlier call is releasing loses it)."""
    current = client()
    if current is None:
        return dask.delayed(value, name=name, traverse=False)
    key = (current.id, name)
    with _lock:
        future = _scattered.get(key) if keep else None
    if future is None or future.status != "finished":
        unique = f"{name}-{uuid.uuid4().hex[:12]}"     # a dict: a tuple would scatter element by element
        future = current.scatter({unique: value}, broadcast=True, hash=False)[unique]
        if keep:
            with _lock:
                _scattered[key] = future
                while len(_scattered) > KEPT_SCATTERED:
                    _scattered.pop(next(iter(_scattered)))
    return future


def forget_shared() -> None:
    """Release the kept scattered objects (the workers may then drop them)."""
    with _lock:
        _scattered.clear()


def task_of(function):
    """``function`` as a maker of Dask tasks that run on every compute: each call's node
    has a key of its own (``pure=False``), never merged with another call's."""
    return dask.delayed(function, pure=False)


def worker_identities(current) -> dict:
    """``{address: identity}`` (host, status, memory_limit, metrics, ...) of every worker
    of the distributed Client ``current``'s cluster, asked of the scheduler now.  Not
    ``Client.scheduler_info``, which returns the client's cached identity: the client's
    own periodic refresh of it, which leaves the workers out, may land between that
    call's fetch and its return, and the call then sees no workers
    (docs/design/architecture.md, "Asking for the workers")."""
    return current.sync(current.scheduler.identity)["workers"]


def workers_to_prefer(enabled: bool) -> list | None:
    """The worker addresses, sorted, for `prefer_worker` (asked once per call, not per
    chunk: each question is a round trip to the scheduler); None when not ``enabled`` or
    without a distributed cluster."""
    current = client() if enabled else None
    if current is None:
        return None
    return sorted(worker_identities(current)) or None


def prefer_worker(index: int, workers: list | None):
    """With ``workers`` (from `workers_to_prefer`), task ``index`` (a chunk's, a slab's)
    prefers worker index mod n, so that later calls tend to find what an earlier one left
    there, and the tasks spread over the workers.  A preference, not a restriction: Dask
    may still move it (a worker gone), and a task pinned to a lost worker would wait for
    ever."""
    if not workers:
        return contextlib.nullcontext()
    return dask.annotate(workers=[workers[index % len(workers)]], allow_other_workers=True)


def prefer_address(address: str | None):
    """A task prefers the worker ``address`` (None: no preference): as `prefer_worker`, a
    preference, not a restriction."""
    if address is None:
        return contextlib.nullcontext()
    return dask.annotate(workers=[address], allow_other_workers=True)


def holders(layout: "ChunkLayout", a) -> list:
    """For each chunk of ``layout`` (in `ChunkLayout.chunks` order), the address of a
    worker that holds the block of ``a`` the chunk lies in, where ``a`` is a persisted dask
    array (its blocks in the workers' memory), else None; all None for anything else or
    without a distributed client.  A round trip to the scheduler only where ``a``'s own
    blocks are persisted."""
    chunks = layout.chunks()
    current = client()
    if current is None or not isinstance(a, da.Array) or a.ndim < 2:
        return [None] * len(chunks)
    from distributed import futures_of

    keys = a.__dask_keys__()
    futures = {f.key: f for f in futures_of(a)}
    if not any(isinstance(k, tuple) and k in futures for k in dask.core.flatten(keys)):
        return [None] * len(chunks)            # (lazy: its blocks are made by the call's graph)
    held = current.who_has(list(futures.values()))
    edges = [np.cumsum((0,) + tuple(c)) for c in a.chunks[:2]]

    def block(lo, hi, axis):
        i = int(np.searchsorted(edges[axis], lo, side="right")) - 1
        return i if 0 <= i < len(edges[axis]) - 1 and hi <= edges[axis][i + 1] else None

    out = []
    for chunk in chunks:
        i, j = block(*chunk.rows, 0), block(*(chunk.channels or (0, a.shape[1])), 1)
        key = None if i is None or j is None or any(len(c) > 1 for c in a.chunks[2:]) else keys[i][j]
        while isinstance(key, list):          # (axes after the channels: one block each)
            key = key[0]
        out.append(next(iter(held.get(key) or ()), None) if key is not None else None)
    return out


def check_device(device):
    """``device`` as each worker receives it: None, a name it resolves itself, or a tuple
    of names (a list: the imaging operators' several devices on each worker)."""
    if isinstance(device, (list, tuple)) and device and all(isinstance(d, str) for d in device):
        return tuple(device)
    if device is not None and not isinstance(device, str):
        raise TypeError(f"device must be None, a device name (str) that each worker resolves or a list of "
                        f"them, got {type(device).__name__}{' (empty)' if device == [] else ''}: pyopencl "
                        f"objects belong to one process")
    return device
