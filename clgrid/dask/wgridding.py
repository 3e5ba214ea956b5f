"""`vis2dirty` / `dirty2vis` over Dask: ducc0.wgridder's keywords (those of
`clgrid.vis2dirty` / `clgrid.dirty2vis`) with ``uvw``, ``vis``, ``wgt`` and ``mask`` as
Dask arrays chunked along rows and channels, one OpenCL device per worker (or several:
``device`` a list, or a worker's ``$CLGRID_DEVICE`` naming several, comma-separated).
Reached as `clgrid.dask.vis2dirty` and `clgrid.dask.dirty2vis`.

Imaging is linear in the visibilities, and over the w-planes: the dirty image of all of
them is a sum of partial images.  ``dirty2vis`` is the adjoint: the image goes to every
worker once.  Two ways to cut the work (``split``):

- ``"planes"`` (with w-gridding; `clgrid.imaging.split` and `clgrid.dask.slabs` say why
  and how): one geometry for all the data (the |w| range and number of samples reduced
  over the chunks first), the w-planes cut into ``slabs`` slabs of about equal work
  (default: one per worker), and each slab's task images the samples with a tap on its
  planes, taken from every chunk, with a `WGridder` over those planes only.  The FFTs
  and per-pixel work are the planes', once per slab (or group, below): n workers share
  them.  Samples crowd at small |w|, so a low slab may take most of the data: an
  imaging task takes at most ``slab_samples`` (default: as many as the largest chunk
  holds).  Where a slab's samples from all chunks are more, its chunks are cut into
  contiguous groups within that (`clgrid.dask.slabs.chunk_groups`, counted exactly from
  each chunk's histogram of first planes), one task per slab and group; a chunk's
  samples are never cut.  Each group repeats its slab's FFTs and per-pixel work: raise
  ``slab_samples`` where the workers' memory allows (GPU workers: above the data's size).
- ``"rows"``: each task images one chunk (rows ``a:b``, channels ``c:d``) with an operator
  of its own, on a grid and w-planes of its own; with w, each chunk pays every plane's FFT,
  so this is for 2-D imaging (one plane), and for data one task holds whole.

``"auto"`` takes ``"planes"`` with ``do_wgridding`` unless there is one chunk and one
slab (the same single operator either way), ``"rows"`` otherwise.  With either, the sum
is accurate to ``epsilon`` (relative L2) and agrees with a single-process call to about
``epsilon`` (with ``"planes"`` the geometry is that call's, so they agree to rounding).
``deterministic=True`` gives the same bits from run to run (`WGridder`'s
``deterministic``), and whatever the cluster: what each slab task images and the order
of every sum are fixed by the chunks, the slabs and ``slab_samples`` alone, and without
``slabs`` the slabs (where the sum is cut) are not one per worker but `_data_slabs`: one
per chunk of the data, none thinner than the kernel's W planes; ``"auto"`` then chooses
the split from the chunks alone.

A call that can make no progress (workers paused for memory, restarted or gone) ends
with `clgrid.errors.ClusterStalledError` after ``stall_timeout`` seconds
(`clgrid.dask.watch`).

What is kept, and where (issue 28: a call that moved the points and tokenised them
every time was many times slower on two GPU workers than one process on one GPU:
docs/benchmarks/dask.md):

- On the client, per set of points (a token of the uvw and mask blocks' Dask keys,
  ``freq``, the keywords and the chunks): the first pass of the planes split (geometry,
  slabs, groups), and, unless ``keep_operators=0``, two sets of results persisted on the
  workers: each chunk's selection for the slabs (the flat indices of its samples with a
  tap on each slab, 8 bytes a sample, on the chunk's worker) and each slab task's
  points (its samples' rows, row and channel numbers, about 5 bytes a sample, on the
  worker that images the slab: task t prefers worker t mod n).  A later call with the
  same points moves only values: each chunk's task picks its samples' weighted values
  for each slab with its kept selection (where its vis block is), and each slab's task
  finds its `WGridder` kept on its worker (or builds it again there from its kept
  points), so nothing is planned, selected or tokenised again.  `clear_cache` drops them.
- On the workers: the ``keep_operators`` `WGridder` s used last, keyed by their points
  (the slab's kept points, or a chunk's blocks with the call's token); `vis2dirty` and
  `dirty2vis` on the same data share them.  A slab that holds most of a chunk whose
  samples are all kept takes it whole (`clgrid.dask.slabs.takes_whole`): its selection
  is kept as None, its values are the chunk's vis block itself (no picks; no copy
  without weights and shared memory), and its operator drops the samples without a tap
  on its planes.
- In shared memory, where every worker is on the client's host and operators are kept
  (`clgrid.dask.exchange`): per set of points, the files through which each chunk's
  values reach its slab's task (written at the chunk's place in the task's file, so the
  task maps one array), through which the partial images' facets reach the worker that
  sums them, through which `dirty2vis`'s image reaches every task (written once by the
  client, not scattered to each worker, behind a stamp: a prediction computed after a
  later `dirty2vis` on the same points replaced it refuses, `exchange.taken`) and through
  which each slab's prediction reaches its chunks (behind the same stamp); and the
  client's box for the image (`clgrid.dask.delivery`).  Fresh pages cost more than the copies, so the files and
  the mappings are kept, and removed with the points' record (the last
  ``exchange.KEPT_PREFIXES``) or by `clear_cache`.  Elsewhere (workers on other hosts)
  the same values go through Dask.

So there is one API for major cycles: the functions, called again with the same uvw,
mask and frequencies (the same Dask keys, or the same numpy content) and keywords, find
what the first call left; the vis (or the image) may change from call to call.  Points
that change (new uvw or mask content, other chunks or keywords) are a new set of points:
planned, selected and kept anew, the oldest set dropped.

The sum.  Each imaging task cuts its image into n facets (row blocks; n the workers),
and facet f of all tasks is summed on worker f, pairwise in a tree fixed by the tasks'
numbers (`clgrid.dask.chunks.tree_sum`'s order), so the result does not depend on which
task finished first.  On a distributed cluster each facet's sum is one task
(`clgrid.dask.tasks.sum_facet`) that takes the parts (from shared memory where it can),
writes the sum into the client's box and counts its non-finite and non-zero pixels, so
the client receives one image and does not pass over it again; with Dask's local
schedulers, a tree of additions.  Each worker so sends and receives about one image per
call, not log2(n) of them; with shared memory, a reused call passes only a few hundred
bytes per task through Dask (each task's facets are picked on its own worker, `_items`,
so the facet it keeps for its own sum never leaves it: tested).

Memory, with one thread per worker: a task holds one chunk (the rows split's imaging;
the planes split's selection), or at most ``slab_samples`` samples (the planes split's
imaging), and one operator's grid and the image it returns.  Dask starts workers with
MALLOC_TRIM_THRESHOLD_=65536, which makes each large temporary fresh pages: the host
FFT's temporaries then cost page faults every call (docs/benchmarks/dask.md);
docs/user-guide/dask.md says how to start CPU workers without it.
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from . import chunks as chunking, exchange, tasks as worker_tasks
from .watch import compute, stall_seconds
from .chunks import ChunkLayout, check_device, chunk_sizes, prefer_worker, tree_sum, workers_to_prefer
from .delivery import collect, deliver, discard, forget_boxes, kept_box
from .slabs import Slab, chunk_groups, geometry_of, slab_bounds, slab_sizes
from .tasks import forget_operators
from ..device.host_threads import count_not_finite
from ..operators.checks import check_finite_result, check_output, precision_of

try:
    import dask
    import dask.array as da
except ImportError as error:     # pragma: no cover - exercised only without the extra
    raise ImportError("clgrid.dask needs dask and distributed: pip install 'clgrid[dask]'") from error

__all__ = ["vis2dirty", "dirty2vis", "clear_wgridders", "KEEP_OPERATORS", "SPLITS"]

KEEP_OPERATORS = 4
COPY_THREADS = 16            # host threads of the client's copies into shared memory
KEPT_LAYOUTS = 8             # sets of points whose first pass and persisted selections the client keeps
SPLITS = ("auto", "planes", "rows")
_layouts: OrderedDict = OrderedDict()       # on the client: (client id, token) -> SlabLayout
_lock = threading.Lock()

# keywords of ducc0.wgridder accepted and without effect, as clgrid.vis2dirty takes them
ACCEPTED_WITHOUT_EFFECT = ("allow_nshift", "double_precision_accumulation")


@dataclass
class SlabLayout:
    """The client's record of one set of points under the planes split: the geometry,
    the slabs' planes, the imaging tasks (`Slab`, in slab then group order), the samples
    each chunk gives each slab, and the selections and slab points persisted on the
    workers (None until made; never with ``keep_operators=0``)."""

    geometry: object
    bounds: list
    tasks: list
    sizes: list                  # by chunk, then slab
    selections: list | None = None
    points: list | None = None


def clear_wgridders() -> int:
    """Drop this process's kept operators (`clgrid.dask.tasks`), and on the client the
    records (and so the persisted selections and points) of earlier calls' data
    (`clgrid.dask.clear_cache` does too); returns how many operators were dropped."""
    with _lock:
        _layouts.clear()
    exchange.forget()
    exchange.release()
    forget_boxes()
    return forget_operators()



# -- on the client ---------------------------------------------------------------------

def _refuse_unknown(ignored: dict) -> None:
    unknown = set(ignored) - set(ACCEPTED_WITHOUT_EFFECT)
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")


def _shape(a) -> tuple:
    return a.shape if isinstance(a, da.Array) else np.shape(a)


def _local(a):
    """A small input (frequencies, the image) on the client."""
    return np.asarray(a.compute() if isinstance(a, da.Array) else a)


def _layout(uvw, freq, per_row: tuple, per_channel: tuple, row_chunks, channel_chunks) -> ChunkLayout:
    """Rows and channels of the call, checked, and their chunks: ``row_chunks`` /
    ``channel_chunks`` where given (an int or sizes), else those of the first dask array
    among ``per_row`` (axis 0) / ``per_channel`` (axis 1), or of ``freq``; else one block."""
    uvw_shape = _shape(uvw)
    if len(uvw_shape) != 2 or uvw_shape[1] != 3:
        raise ValueError(f"uvw must have shape (nrow, 3), got {uvw_shape}")
    nrow, nchan = uvw_shape[0], freq.size
    for name, a in per_channel:
        if a is not None and _shape(a) != (nrow, nchan):
            raise ValueError(f"{name} must have shape (nrow, nchan) = {(nrow, nchan)} (uvw's rows, freq's "
                             f"channels), got {_shape(a)}")
    if row_chunks is None:
        row_chunks = next((a.chunks[0] for _, a in per_row if isinstance(a, da.Array)), -1)
    if channel_chunks is None:
        channel_chunks = next((a.chunks[1] for _, a in per_channel if isinstance(a, da.Array)), -1)
    return ChunkLayout(chunk_sizes("row_chunks", row_chunks, nrow), chunk_sizes("channel_chunks", channel_chunks, nchan),
                  nrow, nchan)


def _frequencies(freq):
    """``freq`` (Hz, a scalar or 1-D, numpy or dask) as a 1-D float64 array, and its channel
    chunks where it is a dask array."""
    chunks = freq.chunks[0] if isinstance(freq, da.Array) and freq.ndim == 1 else None
    freq = _local(freq).astype(np.float64).reshape(-1)
    if freq.size == 0 or not np.all(np.isfinite(freq)) or np.any(freq <= 0):
        raise ValueError("freq must be a non-empty array of positive frequencies in Hz")
    return freq, chunks


def _options(npix_x, npix_y, pixsize_x, pixsize_y, epsilon, do_wgridding, flip_u, flip_v, flip_w, divide_by_n,
             center_x, center_y, sigma_min, sigma_max, precision, device, nthreads, verbosity, tuning,
             deterministic) -> dict:
    """`WGridder`'s keywords, as plain values (they key the workers' operators)."""
    return dict(npix_x=int(npix_x), npix_y=int(npix_y), pixsize_x=float(pixsize_x), pixsize_y=float(pixsize_y),
                epsilon=float(epsilon), do_wgridding=bool(do_wgridding), flip_u=bool(flip_u), flip_v=bool(flip_v),
                flip_w=bool(flip_w), divide_by_n=bool(divide_by_n), center_x=float(center_x),
                center_y=float(center_y), sigma_min=float(sigma_min), sigma_max=float(sigma_max),
                precision=precision, device=check_device(device), nthreads=int(nthreads),
                verbosity=int(verbosity), tuning=None if tuning is None else tuple(sorted(tuning.items())),
                deterministic=bool(deterministic))


def _check_wgt(wgt) -> None:
    dtype = None if wgt is None else getattr(wgt, "dtype", None) or np.asarray(wgt).dtype
    if dtype is not None and not np.issubdtype(dtype, np.floating):
        raise TypeError(f"wgt must be a float array, got {dtype}")


def _keep(keep_operators) -> int:
    if int(keep_operators) != keep_operators or keep_operators < 0:
        raise ValueError(f"keep_operators must be a non-negative integer, got {keep_operators!r}")
    return int(keep_operators)


def _slab_samples(slab_samples, layout: ChunkLayout) -> int:
    """The most samples a planes task takes: ``slab_samples``, or as many as the largest
    chunk holds."""
    if slab_samples is None:
        return max(layout.rows) * max(layout.channels)
    if isinstance(slab_samples, bool) or int(slab_samples) != slab_samples or slab_samples < 1:
        raise ValueError(f"slab_samples must be a positive integer or None (as many as the largest chunk "
                         f"holds), got {slab_samples!r}")
    return int(slab_samples)


def _split(split, slabs, do_wgridding, layout: ChunkLayout, workers, deterministic: bool = False) -> tuple:
    """(the split, the number of slabs): module docstring.  The number of slabs is None
    where it is to come from the data (`_data_slabs`): with ``deterministic`` and no
    ``slabs``, nothing that fixes the bits may depend on the cluster."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(map(repr, SPLITS))}, got {split!r}")
    if slabs is not None and (isinstance(slabs, bool) or int(slabs) != slabs or slabs < 1):
        raise ValueError(f"slabs must be a positive integer or None (one per worker), got {slabs!r}")
    if split == "planes" and not do_wgridding:
        raise ValueError("split='planes' needs do_wgridding=True: without w there is one plane to share")
    if slabs is not None:
        count = int(slabs)
    else:
        count = None if deterministic else len(workers or [None])
    if split == "auto":
        tasks = layout.shape[0] * layout.shape[1]
        split = "planes" if do_wgridding and ((count or 1) > 1 or tasks > 1) else "rows"
    return split, count


def _data_slabs(geometry, chunks: int) -> int:
    """The number of slabs ``deterministic=True`` takes without ``slabs``: one per chunk of
    the data (which the caller sizes for the cluster), but none thinner than the kernel's
    W planes (each sample is taken by every slab its W planes touch).  From the data alone:
    the slabs are where the sum is cut, so they fix its bits."""
    return max(1, min(chunks, geometry.num_planes // geometry.kernel.support))


def _task(function):
    return dask.delayed(function, pure=False)


def _key_of(piece):
    """A piece's name in the token of the points: its Dask key (content-derived for
    `dask.array.from_array`, stable for a persisted array), or a token of its value."""
    return getattr(piece, "key", None) or dask.base.tokenize(piece)


def _points_token(layout: ChunkLayout, uvw_pieces, mask_pieces, freq, options: dict, *more) -> str:
    """What fixes an operator's points: the uvw and mask blocks, the frequencies, every
    keyword and the chunks (the keys of the blocks, not their content: nothing large is
    hashed per call)."""
    return dask.base.tokenize("clgrid.dask.wgridding", [_key_of(p) for p in uvw_pieces],
                              [None if m is None else _key_of(m) for m in mask_pieces], freq,
                              sorted(options.items()), layout.rows, layout.channels, *more)


def _facet_count(workers, options: dict) -> int:
    return max(1, min(len(workers or [None]), options["npix_x"]))


def _slab_layout(token, pieces, options: dict, count, cap: int, keep: int, stall_timeout=None) -> SlabLayout:
    """The planes split's first pass for these points (kept on the client per token):
    the geometry of them all, the slabs' planes (``count`` of them; None: `_data_slabs`),
    the imaging tasks and each chunk's samples per slab; computed now (the imaging tasks
    depend on it), watched (`clgrid.dask.watch`)."""
    key = (id(chunking.client()), token)
    with _lock:
        found = _layouts.get(key)
        if found is not None:
            _layouts.move_to_end(key)
            return found
    reduced = _task(geometry_of)([_task(worker_tasks.chunk_extent)(*piece) for piece in pieces], options)
    geometry, weight, *counts = compute(reduced, _task(worker_tasks.split_weight)(options),
                                        *[_task(worker_tasks.chunk_counts)(*piece, reduced) for piece in pieces],
                                        stall_timeout=stall_timeout)
    bounds = slab_bounds(counts, geometry, _data_slabs(geometry, len(pieces)) if count is None else count,
                         sample_weight=weight)
    totals = [int(np.prod(worker_tasks.chunk_shape(piece[0]))) for piece in pieces]
    tasks = [Slab(s, planes, group)
             for s, (planes, groups) in enumerate(zip(bounds, chunk_groups(counts, geometry, bounds, cap, totals)))
             for group in groups]
    made = SlabLayout(geometry, bounds, tasks, [slab_sizes(c, geometry, bounds, t) for c, t in zip(counts, totals)])
    if keep > 0:
        with _lock:
            _layouts[key] = made
            while len(_layouts) > KEPT_LAYOUTS:
                _layouts.popitem(last=False)
    return made


def _busy(layout: SlabLayout, slab: Slab) -> bool:
    """Whether a slab task has samples (tasks without are left out)."""
    return any(layout.sizes[i][slab.index] for i in range(*slab.chunks))


def _slab_state(layout: SlabLayout, pieces, keep: int, workers, vis_pieces=None) -> tuple:
    """Each chunk's selection and each busy slab task's points (None for the others): the
    ones persisted on the workers by an earlier call with these points, else made now
    (and persisted where operators are kept: the selections where the chunks' vis blocks
    are, given ``vis_pieces``, else where their uvw blocks are; task t's points on worker
    t mod n).  A selection is about as large as its chunk's values: kept beside another
    worker's vis block, one of the two crossed between the workers in every later call
    (and Dask's memory manager drops the copy it leaves)."""
    if layout.selections is not None:
        return layout.selections, layout.points
    g, count = layout.geometry, len(layout.bounds)
    near = vis_pieces if vis_pieces is not None else [None] * len(pieces)
    selections = [_task(worker_tasks.chunk_selection)(chunk, u, f, m, g, layout.bounds, v)
                  for (chunk, u, f, m), v in zip(pieces, near)]
    parts = [dask.delayed(worker_tasks.chunk_parts, pure=False, nout=count)(chunk, u, f, taken)
             for (chunk, u, f, _), taken in zip(pieces, selections)]
    points = []
    for t, slab in enumerate(layout.tasks):
        if not _busy(layout, slab):
            points.append(None)
            continue
        with prefer_worker(t, workers):
            points.append(_task(worker_tasks.slab_points)(*[chunk[slab.index] for chunk in parts[slice(*slab.chunks)]]))
    if keep > 0:
        selections, points = dask.persist(selections, points)
        layout.selections, layout.points = selections, points
    return selections, points


def _summed(outputs: list, facets: int, workers, shape: tuple, dtype, stall_timeout=None, shared=None,
            threads: int = 1, out=None) -> tuple:
    """The image (``shape``, ``dtype``; into ``out`` where given) from the imaging tasks'
    outputs (``facets`` facets and the warnings each): facet f summed pairwise by task
    number on worker f, and handed to the client through shared memory where worker f
    is on its host (`clgrid.dask.delivery`, a box kept for later calls), else gathered;
    all facets at once.  On a distributed cluster each facet is one task
    (`clgrid.dask.tasks.sum_facet`: the tree's order, the same bits) that takes the parts
    (from shared memory where ``shared``, the call's `clgrid.dask.exchange` prefix: every
    worker on the client's host), adds them into the client's box and counts what the
    client would check; without one (Dask's local schedulers), a tree of additions."""
    if not outputs:
        return None, frozenset(), None
    box = kept_box(shape, dtype) if workers else None
    starts = [int(s) for s in np.cumsum([0] + [len(r) for r in np.array_split(np.arange(shape[0]), facets)])[:-1]]
    sums = []
    whole = shared is not None or workers is not None
    for f in range(facets):
        with prefer_worker(f, workers):
            if whole:
                sums.append(_task(worker_tasks.sum_facet)(box, starts[f], threads, *[out[f] for out in outputs]))
                continue
            total = tree_sum([out[f] for out in outputs], _task(worker_tasks.add_images))
            sums.append(_task(deliver)(total, box, starts[f]) if box is not None else total)
    try:
        *parts, said = compute(*sums, _task(worker_tasks.warnings_union)(*[out[facets] for out in outputs]),
                               stall_timeout=stall_timeout)
    except BaseException:
        discard(box)
        raise
    counts = None
    if whole:                                # (rows or None, non-finite pixels, any non-zero) per facet
        counts = (sum(p[1] for p in parts), any(p[2] for p in parts))
        parts = [p[0] for p in parts]
    return collect(box, parts, starts, out), said, counts


def _places(shared, task: int, facets: int, workers) -> tuple | None:
    """Where imaging task ``task`` leaves each facet in shared memory: a file for a facet
    summed on another worker than the task's (by `prefer_worker`), None for its own."""
    if shared is None:
        return None
    n = len(workers)
    return tuple(None if task % n == f % n else exchange.place(shared, f"i{task}-{f}") for f in range(facets))


def _rows_images(token, layout, uvw, freq, vis, wgt, mask, options, keep, workers, facets, shared=None) -> list:
    outputs = []
    for chunk, u, v, w, m in zip(layout.chunks(), layout.pieces(uvw, channels=False), layout.pieces(vis),
                                 layout.pieces(wgt), layout.pieces(mask)):
        with prefer_worker(chunk.index, workers):
            outputs.append(_items(dask.delayed(worker_tasks.image_chunk, pure=False, nout=facets + 1)(
                token, u, freq[slice(*chunk.channels)], v, w, m, chunk, options, keep, facets,
                _places(shared, chunk.index, facets, workers)), facets))
    return outputs


def _slab_pieces(layout: ChunkLayout, uvw, freq, mask) -> list:
    """Each chunk's (chunk, uvw, freq, mask) pieces."""
    chunks = layout.chunks()
    return list(zip(chunks, layout.pieces(uvw, channels=False), [freq[slice(*c.channels)] for c in chunks],
                    layout.pieces(mask)))


def _value_targets(slab_layout, shared) -> list | None:
    """Per chunk, per slab: where in shared memory the chunk's values for that slab go
    (its imaging task's file, at the chunk's place after the group's earlier chunks, and
    how many), None for a slab task without samples; None without ``shared``."""
    if shared is None:
        return None
    sizes, count = slab_layout.sizes, len(slab_layout.bounds)
    targets = [[None] * count for _ in sizes]
    for t, slab in enumerate(slab_layout.tasks):
        if not _busy(slab_layout, slab):
            continue
        offset = 0
        for i in range(*slab.chunks):
            targets[i][slab.index] = (exchange.place(shared, f"v{t}"), offset, sizes[i][slab.index])
            offset += sizes[i][slab.index]
    return targets


def _slab_images(slab_layout, pieces, vis_pieces, wgt_pieces, options, keep, workers, facets, shared=None) -> list:
    selections, points = _slab_state(slab_layout, pieces, keep, workers, vis_pieces)
    count = len(slab_layout.bounds)
    threads = max(1, options["nthreads"])
    targets = _value_targets(slab_layout, shared) or [None] * len(pieces)
    values = [dask.delayed(worker_tasks.chunk_values, pure=False, nout=count)(chunk, v, w, taken, threads, target)
              for (chunk, _, _, _), v, w, taken, target in zip(pieces, vis_pieces, wgt_pieces, selections, targets)]
    if shared is None:
        # each slab's values picked where the chunk's task ran (no worker annotation: Dask
        # runs a getitem where its input is), so only that slab's values travel
        values = [[chunk[s] for s in range(count)] for chunk in values]
    outputs = []
    for t, slab in enumerate(slab_layout.tasks):
        if points[t] is None:
            continue
        with prefer_worker(t, workers):
            # with shared memory each chunk's task returns a few bytes per slab (`Shared`):
            # the slab's task takes the chunk's whole result and picks its own (one task
            # fewer on the way, `image_slab`)
            task = dask.delayed(worker_tasks.image_slab, pure=False, nout=facets + 1)(
                points[t], slab_layout.geometry, slab, options, keep, facets, _places(shared, t, facets, workers),
                *[chunk if shared is not None else chunk[slab.index] for chunk in values[slice(*slab.chunks)]])
            outputs.append(_items(task, facets))
    return outputs


def _items(task, facets: int) -> tuple:
    """An imaging task's facets and warnings as separate nodes, made under the task's own
    worker preference: a facet the task keeps for its own worker's sum (an array) is
    picked there and stays there; only the few bytes of a facet left in shared memory
    (`Shared`), or a facet summed elsewhere without shared memory, go to the worker that
    sums it.  (Picked under the summing worker's preference, the whole result, the kept
    facet with it, went there: docs/benchmarks/dask.md, "Nothing large through Dask".)"""
    return tuple(task[i] for i in range(facets + 1))


def _sent(dirty: np.ndarray, shared: str | None = None, threads: int = 1):
    """The image as one dependency of every task: written once into a kept file in shared
    memory where ``shared`` (`clgrid.dask.exchange.publish`: every worker on this host),
    else `shared` (scattered to every worker once, sent as the graph that uses it is
    built: the scheduler may drop replicas that no task waits for yet)."""
    published = exchange.publish(shared, "d", dirty, threads)
    if published is not None:
        return published
    return chunking.shared(f"clgrid-dirty-{dask.base.tokenize(dirty)}", dirty)


def _rows_vis(token, layout, dirty, uvw, freq, wgt, mask, options, keep, workers, dtype, shared=None) -> list:
    image, pieces = _sent(dirty, shared, COPY_THREADS), []
    for chunk, u, w, m in zip(layout.chunks(), layout.pieces(uvw, channels=False), layout.pieces(wgt),
                              layout.pieces(mask)):
        with prefer_worker(chunk.index, workers):
            task = _task(worker_tasks.vis_chunk)(token, image, u, freq[slice(*chunk.channels)], w, m, chunk,
                                                 options, keep)
        pieces.append(da.from_delayed(task, shape=worker_tasks.chunk_shape(chunk), dtype=dtype))
    return pieces


def _slab_vis(slab_layout, pieces, dirty, wgt_pieces, options, keep, workers, dtype, shared=None) -> list:
    selections, points = _slab_state(slab_layout, pieces, keep, workers)
    image = _sent(dirty, shared, COPY_THREADS)
    count = len(slab_layout.bounds)
    shares = {}                                         # (slab, chunk) -> that chunk's share from the slab
    for t, slab in enumerate(slab_layout.tasks):
        if points[t] is None:
            continue
        a, b = slab.chunks
        place = exchange.place(shared, f"s{t}") if isinstance(image, exchange.Published) else None
        with prefer_worker(t, workers):
            out = dask.delayed(worker_tasks.vis_slab, pure=False, nout=b - a)(
                image, points[t], slab_layout.geometry, slab, options, keep, place)
        shares.update(((slab.index, i), out[i - a]) for i in range(a, b))
    out = []
    for i, ((chunk, _, _, m), w, taken) in enumerate(zip(pieces, wgt_pieces, selections)):
        task = _task(worker_tasks.chunk_assemble)(chunk, taken, [shares.get((s, i)) for s in range(count)], w, m, dtype,
                                                  max(1, options["nthreads"]))
        out.append(da.from_delayed(task, shape=worker_tasks.chunk_shape(chunk), dtype=dtype))
    return out


def vis2dirty(*, uvw, freq, vis, wgt=None, mask=None, npix_x, npix_y, pixsize_x, pixsize_y, epsilon,
              do_wgridding=False, flip_u=False, flip_v=False, flip_w=False, divide_by_n=True,
              center_x=0.0, center_y=0.0, sigma_min=1.1, sigma_max=2.6, nthreads=1, verbosity=0,
              dirty=None, device=None, tuning=None, row_chunks=None, channel_chunks=None,
              keep_operators=KEEP_OPERATORS, split="auto", slabs=None, slab_samples=None, deterministic=False,
              stall_timeout=None, **ignored):
    """`clgrid.vis2dirty` over Dask: the dirty image (npix_x, npix_y) of ``vis``.

    Keywords and meaning as `clgrid.vis2dirty` (ducc0.wgridder's).  ``uvw`` (nrow, 3),
    ``vis``, ``wgt`` and ``mask`` (nrow, nchan) may be dask or numpy arrays, ``freq`` too
    (nchan,).  The data's chunks are ``row_chunks`` / ``channel_chunks`` (an int or sizes)
    where given, else the chunks of the first dask array among uvw, vis, wgt, mask along
    rows, and among vis, wgt, mask (or ``freq``) along channels; without any, one chunk.
    ``split`` ("auto", "planes", "rows") and ``slabs`` (None: one per worker) choose how
    the work is cut (module docstring): by slabs of w-planes, each taking its samples
    from every chunk, or by chunks; ``slab_samples`` (None: as many as the largest chunk
    holds) is the most samples one imaging task of a slab takes, its chunks cut into
    groups, one task each, where it has more.  ``vis``'s dtype sets the precision.  ``device`` is a
    name each worker resolves (None: its ``$CLGRID_DEVICE``, else its first GPU, else
    PoCL); ``nthreads`` the host threads of each task.  ``keep_operators``: how many
    operators each worker keeps for later calls; ``deterministic``: the same bits from
    run to run and whatever the cluster (module docstring).  The partial images are summed
    pairwise by slab or chunk number, whatever order the tasks finish in.  A failing
    task's exception is raised here with a note naming its chunk (``clgrid.dask: chunk 3,
    rows 680:1020, channels 2:4``) or slab; a call that can make no progress for
    ``stall_timeout`` seconds (None: 120; workers paused for memory or gone) raises
    `clgrid.errors.ClusterStalledError` (`clgrid.dask.watch`).  ``dirty``, if given,
    receives the image.
    """
    _refuse_unknown(ignored)
    precision = precision_of(vis.dtype if hasattr(vis, "dtype") else np.asarray(vis).dtype, "vis",
                           {"single": np.complex64, "double": np.complex128})
    _check_wgt(wgt)
    freq, freq_chunks = _frequencies(freq)
    layout = _layout(uvw, freq, (("uvw", uvw), ("vis", vis), ("wgt", wgt), ("mask", mask)),
                     (("vis", vis), ("wgt", wgt), ("mask", mask)), row_chunks,
                     channel_chunks if channel_chunks is not None else freq_chunks)
    options = _options(npix_x, npix_y, pixsize_x, pixsize_y, epsilon, do_wgridding, flip_u, flip_v, flip_w,
                       divide_by_n, center_x, center_y, sigma_min, sigma_max, precision, device, nthreads,
                       verbosity, tuning, deterministic)
    if dirty is not None:
        check_output(dirty, "dirty", (options["npix_x"], options["npix_y"]),
                     np.float64 if precision == "double" else np.float32)
    stall_seconds(stall_timeout)
    keep = _keep(keep_operators)
    workers = workers_to_prefer(True)
    split, count = _split(split, slabs, do_wgridding, layout, workers, deterministic)
    cap = _slab_samples(slab_samples, layout)
    facets = _facet_count(workers, options)
    if split == "rows":
        token = _points_token(layout, layout.pieces(uvw, channels=False), layout.pieces(mask), freq, options)
    else:
        pieces = _slab_pieces(layout, uvw, freq, mask)
        token = _points_token(layout, [p[1] for p in pieces], [p[3] for p in pieces], freq, options, count, cap)
    # several workers, all on this host, operators kept: values and facets pass through
    # files in shared memory kept for these points (`clgrid.dask.exchange`)
    shared = (exchange.prefix(chunking.client(), workers, f"{token}-{facets}")
              if workers and len(workers) > 1 and keep > 0 else None)
    with exchange.using(shared):
        if split == "rows":
            outputs = _rows_images(token, layout, uvw, freq, vis, wgt, mask, options, keep, workers, facets, shared)
        else:
            slab_layout = _slab_layout(token, pieces, options, count, cap, keep, stall_timeout)
            outputs = _slab_images(slab_layout, pieces, layout.pieces(vis), layout.pieces(wgt), options, keep,
                                   workers, facets, shared)
        real = np.float64 if options["precision"] == "double" else np.float32
        image, said, counts = _summed(outputs, facets, workers, (options["npix_x"], options["npix_y"]), real,
                                      stall_timeout, shared, max(1, options["nthreads"]), dirty)
    if image is None:
        image = worker_tasks.zeros_image(options)
    bad, nonzero = counts if counts is not None else (np.count_nonzero(~np.isfinite(image)), np.any(image))
    check_finite_result(bad, f"the {image.dtype} image (the sum of the parts)",
                        precision, double="complex128 visibilities")     # each part was finite
    for message in sorted(said):
        warnings.warn(message, stacklevel=2)
    if not nonzero:
        warnings.warn("clgrid.dask: the image is zero: no chunk has an unmasked, non-zero visibility with "
                      "non-zero weight", stacklevel=2)
    if dirty is not None:
        if image is not dirty:
            dirty[...] = image
        return dirty
    return image


def dirty2vis(*, uvw, freq, dirty, wgt=None, mask=None, pixsize_x, pixsize_y, epsilon,
              do_wgridding=False, flip_u=False, flip_v=False, flip_w=False, divide_by_n=True,
              center_x=0.0, center_y=0.0, sigma_min=1.1, sigma_max=2.6, nthreads=1, verbosity=0,
              vis=None, device=None, npix_x=0, npix_y=0, tuning=None, row_chunks=None, channel_chunks=None,
              keep_operators=KEEP_OPERATORS, split="auto", slabs=None, slab_samples=None, deterministic=False,
              stall_timeout=None, **ignored):
    """`clgrid.dirty2vis` over Dask: the visibilities (nrow, nchan) of the image ``dirty``,
    as a lazy dask array chunked along rows and channels as the data are.

    Keywords and meaning as `clgrid.dirty2vis` (ducc0.wgridder's); ``dirty``'s dtype
    (float32 or float64, numpy or a dask array) sets the precision.  Chunks as for
    `vis2dirty`: ``row_chunks`` / ``channel_chunks``, else those of the first dask array
    among uvw, wgt, mask along rows, and among wgt, mask (or ``freq``) along channels;
    ``split``, ``slabs``, ``slab_samples``, ``keep_operators``, ``deterministic`` and
    ``stall_timeout`` as there (with the planes split, uvw and mask are read once when
    called, for the slabs and groups; the result is lazy: compute it with
    `clgrid.dask.compute` to have it watched too).  The image is
    sent to every worker once (scattered on a distributed cluster, one node of the graph
    otherwise), not once per task.  With the planes split, each slab's task (one per
    group of chunks) predicts its samples' share and each chunk adds its slabs' shares in
    slab order; a chunk without any
    unmasked visibility comes back as zeros.  ``vis``, if given (numpy), receives the
    computed visibilities and is returned instead of the dask array.
    """
    _refuse_unknown(ignored)
    dirty = _local(dirty)
    precision = precision_of(dirty.dtype, "dirty", {"single": np.float32, "double": np.float64})
    if dirty.ndim != 2:
        raise ValueError(f"dirty must be 2-D (npix_x, npix_y), got shape {dirty.shape}")
    for name, n, have in (("npix_x", npix_x, dirty.shape[0]), ("npix_y", npix_y, dirty.shape[1])):
        if n and n != have:
            raise ValueError(f"{name}={n} does not match dirty's shape {dirty.shape}")
    if count_not_finite(dirty, exchange.copy_threads(dirty.nbytes, COPY_THREADS)):
        raise ValueError("dirty has NaN or infinite entries")
    _check_wgt(wgt)
    freq, freq_chunks = _frequencies(freq)
    layout = _layout(uvw, freq, (("uvw", uvw), ("wgt", wgt), ("mask", mask)), (("wgt", wgt), ("mask", mask)),
                     row_chunks, channel_chunks if channel_chunks is not None else freq_chunks)
    options = _options(dirty.shape[0], dirty.shape[1], pixsize_x, pixsize_y, epsilon, do_wgridding, flip_u,
                       flip_v, flip_w, divide_by_n, center_x, center_y, sigma_min, sigma_max, precision, device,
                       nthreads, verbosity, tuning, deterministic)
    dtype = worker_tasks.complex_dtype(precision)
    if vis is not None:
        check_output(vis, "vis", (layout.nrow, layout.nchan), dtype)
    stall_seconds(stall_timeout)
    keep = _keep(keep_operators)
    workers = workers_to_prefer(True)
    split, count = _split(split, slabs, do_wgridding, layout, workers, deterministic)
    cap = _slab_samples(slab_samples, layout)
    if split == "rows":
        token = _points_token(layout, layout.pieces(uvw, channels=False), layout.pieces(mask), freq, options)
    else:
        chunks = _slab_pieces(layout, uvw, freq, mask)
        token = _points_token(layout, [p[1] for p in chunks], [p[3] for p in chunks], freq, options, count, cap)
    # workers on this host, operators kept: the image goes through a kept file in shared
    # memory, written once (`clgrid.dask.exchange.publish`), not scattered to each worker
    shared = exchange.prefix(chunking.client(), workers, f"{token}-dirty2vis") if workers and keep > 0 else None
    with exchange.using(shared):
        if split == "rows":
            pieces = _rows_vis(token, layout, dirty, uvw, freq, wgt, mask, options, keep, workers, dtype, shared)
        else:
            slab_layout = _slab_layout(token, chunks, options, count, cap, keep, stall_timeout)
            pieces = _slab_vis(slab_layout, chunks, dirty, layout.pieces(wgt), options, keep, workers, dtype,
                               shared)
    result = layout.assemble(pieces, channel_axis=1)
    if vis is not None:
        vis[...] = compute(result, stall_timeout=stall_timeout)[0]
        return vis
    return result
