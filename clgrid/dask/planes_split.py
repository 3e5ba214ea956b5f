"""The planes split of `clgrid.dask.vis2dirty` / `dirty2vis` (``split="planes"``, with
w-gridding): the graph the client builds, and the first pass over the data that it keeps
per set of points.  `clgrid.imaging.split` and `clgrid.dask.slabs` say why and how the
planes are cut; the tasks are `clgrid.dask.tasks`'.

One geometry for all the data (the |w| range and number of samples reduced over the
chunks first), the w-planes cut into ``slabs`` slabs of about equal work (default: one
per worker), and each slab's task images the samples with a tap on its planes, taken
from every chunk, with a `WGridder` over those planes only.  Each direction has its own
slabs (`clgrid.imaging.split.direction_slabs`, its own weight, as a device list's): a
slab's tasks hold the samples of both of its slabs and each call takes its own
direction's planes, so the two directions share one set of operators.  The FFTs and per-pixel work
are the planes', once per slab (or group, below): n workers share them.  Samples crowd
at small |w|, so a low slab may take most of the data: an imaging task takes at most
``slab_samples`` (default: as many as the largest chunk holds, or on GPU workers as the
worker's GPU holds where more: `clgrid.dask.tasks.slab_capacity`).  Where a slab's samples
from all chunks are more, its chunks are cut into contiguous groups within that
(`clgrid.dask.slabs.chunk_groups`, counted exactly from each chunk's histogram of first
planes), one task per slab and group; a chunk's samples are never cut.  Each group
repeats its slab's FFTs and per-pixel work: raise ``slab_samples`` where the workers'
memory allows (on GPU workers the default does).

What the client keeps, per set of points (the call's token of the uvw and mask blocks'
Dask keys, ``freq``, the keywords and the chunks, `clgrid.dask.wgridding`'s): the first
pass (`first_pass`: geometry, slabs, groups), and, unless ``keep_operators=0``, two sets
of results persisted on the workers (`_slab_state`): each chunk's selection for the
slabs (the flat indices of its samples with a tap on each slab, 8 bytes a sample, on the
chunk's worker) and each slab task's points (its samples' rows, row and channel numbers,
about 5 bytes a sample, on the worker that images the slab: task t prefers worker t mod
n).  A later call with the same points moves only values: each chunk's task picks its
samples' weighted values for each slab with its kept selection (where its vis block is),
and each slab's task finds its `WGridder` kept on its worker (or builds it again there
from its kept points), so nothing is planned, selected or tokenised again.  The last
``KEPT_LAYOUTS`` sets are kept; `clgrid.dask.clear_cache` drops them (`forget_layouts`).
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from . import chunks as chunking, exchange, tasks as worker_tasks
from .chunks import ChunkLayout, prefer_address, prefer_worker, started, task_of
from .delivery import COPY_THREADS
from .images import image_place, outputs_of, sent
from .slabs import Slab, chunk_groups, geometry_of, slab_sizes
from .watch import compute
from ..imaging.split import direction_slabs

try:
    import dask
except ImportError as error:     # pragma: no cover - exercised only without the extra
    raise ImportError("clgrid.dask needs dask and distributed: pip install 'clgrid[dask]'") from error

__all__ = ["SlabLayout", "KEPT_LAYOUTS", "forget_layouts", "chunk_pieces", "first_pass", "slab_images", "slab_vis"]

KEPT_LAYOUTS = 8             # sets of points whose first pass and persisted selections the client keeps
_layouts: OrderedDict = OrderedDict()       # on the client: (client id, token) -> SlabLayout
_lock = threading.Lock()


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


def forget_layouts() -> None:
    """Drop the client's records of earlier calls' points (and so their persisted
    selections and points: the workers may then release them)."""
    with _lock:
        _layouts.clear()


def chunk_pieces(layout: ChunkLayout, uvw, freq, mask) -> list:
    """Each chunk's (chunk, uvw, freq, mask) pieces, in chunk order: what `first_pass`
    and the selections read."""
    chunks = layout.chunks()
    return list(zip(chunks, layout.pieces(uvw, channels=False), [freq[slice(*c.channels)] for c in chunks],
                    layout.pieces(mask)))


def _data_slabs(geometry, chunks: int) -> int:
    """The number of slabs ``deterministic=True`` takes without ``slabs``: one per chunk of
    the data (which the caller sizes for the cluster), but none thinner than the kernel's
    W planes (each sample is taken by every slab its W planes touch).  From the data alone:
    the slabs are where the sum is cut, so they fix its bits."""
    return max(1, min(chunks, geometry.num_planes // geometry.kernel.support))


def first_pass(token, pieces, options: dict, count, cap: int | None, keep: int, stall_timeout=None,
               workers: int = 1) -> SlabLayout:
    """The planes split's first pass for these points (``pieces``: `chunk_pieces`; kept on
    the client per ``token`` where ``keep``):
    the geometry of them all, the slabs' planes (``count`` of them; None: `_data_slabs`),
    the imaging tasks (at most ``cap`` samples each; None: as many as the largest chunk
    holds, or as a worker's GPU holds where more, for its share of the slabs over
    ``workers`` workers: `clgrid.dask.tasks.slab_capacity`) and each chunk's samples per
    slab; computed now (the imaging tasks depend on it), watched (`clgrid.dask.watch`)."""
    key = (id(chunking.client()), token)
    with _lock:
        found = _layouts.get(key)
        if found is not None:
            _layouts.move_to_end(key)
            return found
    reduced = task_of(geometry_of)([task_of(worker_tasks.chunk_extent)(*piece) for piece in pieces], options)
    threads = max(1, options["nthreads"])
    # (with no cap given, how many samples a worker's GPU holds: the cap where more than a chunk)
    each = -(-(count or 1) // max(1, workers))             # (slab tasks a worker runs, at least)
    room = [task_of(worker_tasks.slab_capacity)(options, reduced, each)] if cap is None else []
    geometry, weights, *found = compute(reduced, task_of(worker_tasks.split_weight)(options), *room,
                                        *[task_of(worker_tasks.chunk_counts)(*piece, reduced, threads)
                                          for piece in pieces], stall_timeout=stall_timeout)
    capacity, counts = (found[0], found[1:]) if room else (None, found)
    # each direction's slabs; a slab's tasks hold the samples of both and each call takes
    # its own direction's planes (as a device list's devices do)
    slabs = direction_slabs(counts, geometry, _data_slabs(geometry, len(pieces)) if count is None else count, weights)
    bounds = [held for held, _ in slabs]
    calls = [() if len(set(each.values())) == 1 else tuple(each.items()) for _, each in slabs]
    totals = [int(np.prod(worker_tasks.chunk_shape(piece[0]))) for piece in pieces]
    if cap is None:               # (a GPU worker's room, where more than a chunk)
        cap = max(max(totals), capacity or 0)
    tasks = [Slab(s, planes, group, calls[s])
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


def _slab_state(layout: SlabLayout, pieces, keep: int, workers, vis_pieces=None, threads: int = 1,
                homes=None) -> tuple:
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
    selections = []
    for (chunk, u, f, m), v, home in zip(pieces, near, homes or [None] * len(pieces)):
        with prefer_address(home):           # (where the vis block is, where that is known)
            selections.append(task_of(worker_tasks.chunk_selection)(chunk, u, f, m, g, layout.bounds, v, threads))
    parts = [dask.delayed(worker_tasks.chunk_parts, pure=False, nout=count)(chunk, u, f, taken)
             for (chunk, u, f, _), taken in zip(pieces, selections)]
    points = []
    for t, slab in enumerate(layout.tasks):
        if not _busy(layout, slab):
            points.append(None)
            continue
        with prefer_worker(t, workers):
            points.append(task_of(worker_tasks.slab_points)(*[chunk[slab.index]
                                                              for chunk in parts[slice(*slab.chunks)]]))
    if keep > 0:
        selections, points = dask.persist(selections, points)
        layout.selections, layout.points = selections, points
    return selections, points


def _value_targets(slab_layout: SlabLayout, shared, imaged: list) -> list | None:
    """Per chunk, per slab: where in shared memory the chunk's values for that slab go
    (its imaging task's file, at the chunk's place after the group's earlier chunks, and
    how many), None for a slab task not ``imaged`` (by task: it has samples and vis2dirty
    planes); None without ``shared``."""
    if shared is None:
        return None
    sizes, count = slab_layout.sizes, len(slab_layout.bounds)
    targets = [[None] * count for _ in sizes]
    for t, slab in enumerate(slab_layout.tasks):
        if not imaged[t]:
            continue
        offset = 0
        for i in range(*slab.chunks):
            targets[i][slab.index] = (exchange.place(shared, f"v{t}"), offset, sizes[i][slab.index])
            offset += sizes[i][slab.index]
    return targets


def slab_images(slab_layout: SlabLayout, pieces, vis_pieces, wgt_pieces, options: dict, keep: int, workers,
                facets: int, shared=None, box=None, homes=None) -> list:
    """`vis2dirty`'s imaging tasks, one per slab task of ``slab_layout`` with samples (in
    slab then group order): each one's ``facets`` facets and warnings
    (`clgrid.dask.images.outputs_of`), for `clgrid.dask.images.summed`.  Each chunk's task
    picks its weighted values for every slab (``vis_pieces``, ``wgt_pieces``: the
    chunk's blocks) with its selection; ``shared`` is the call's `clgrid.dask.exchange`
    prefix (the values and the images go through shared memory) or None; ``box`` the
    client's box for the image (`clgrid.dask.images.result_box`: a call's only imaging
    task writes its image there) or None; ``homes`` (`clgrid.dask.chunks.holders`: by
    chunk, the worker that holds its vis block, or None) where each chunk's selection and
    values tasks go."""
    selections, points = _slab_state(slab_layout, pieces, keep, workers, vis_pieces, max(1, options["nthreads"]),
                                     homes)
    count = len(slab_layout.bounds)
    threads = max(1, options["nthreads"])
    # the tasks with samples and vis2dirty planes (where the directions' slabs differ, a
    # slab's vis2dirty slab may be empty: its task and its values are left out)
    imaged = [points[t] is not None and slab.takes("vis2dirty") for t, slab in enumerate(slab_layout.tasks)]
    wanted = tuple(any(imaged[t] for t, slab in enumerate(slab_layout.tasks) if slab.index == s) for s in range(count))
    targets = _value_targets(slab_layout, shared, imaged) or [None] * len(pieces)
    values = []
    # each chunk's values task where its vis block is, where that is known (persisted):
    # left to the scheduler, one could run on another worker while the block's own is busy
    # and move the block there (on two GPU workers 256 MB, 85 ms, in some calls)
    for (chunk, _, _, _), v, w, taken, target, home in zip(pieces, vis_pieces, wgt_pieces, selections, targets,
                                                         homes or [None] * len(pieces)):
        with prefer_address(home):
            values.append(dask.delayed(worker_tasks.chunk_values, pure=False, nout=count)(chunk, v, w, taken,
                                                                                          threads, target, wanted))
    if shared is None:
        # each slab's values picked where the chunk's task ran (no worker annotation: Dask
        # runs a getitem where its input is), so only that slab's values travel
        values = [[chunk[s] for s in range(count)] for chunk in values]
    outputs = []
    alone = sum(imaged) == 1                 # (one imaging task: its image into the box)
    for t, slab in enumerate(slab_layout.tasks):
        if not imaged[t]:
            continue
        with prefer_worker(t, workers):
            # with shared memory each chunk's task returns a few bytes per slab (`Shared`):
            # the slab's task takes the chunk's whole result and picks its own (one task
            # fewer on the way, `image_slab`)
            task = dask.delayed(worker_tasks.image_slab, pure=False, nout=facets + 1)(
                points[t], slab_layout.geometry, slab, options, keep, facets,
                image_place(shared, box, t, alone, workers), tuple(p[0] for p in pieces[slice(*slab.chunks)]),
                *[chunk if shared is not None else chunk[slab.index] for chunk in values[slice(*slab.chunks)]])
            outputs.append(outputs_of(task, facets, shared, workers))
    return outputs


def slab_vis(slab_layout: SlabLayout, layout: ChunkLayout, pieces, dirty, wgt_pieces, options: dict, keep: int,
             workers, dtype, shared=None):
    """`dirty2vis`'s predictions, one lazy Dask array (rows, channels) of ``dtype`` whose
    blocks are the chunks' tasks (`clgrid.dask.chunks.ChunkLayout.array_of`: no task
    after them): each slab task predicts its samples from the image ``dirty`` (sent to
    the workers once, `clgrid.dask.images.sent`), and each chunk of ``layout`` adds its
    slabs' shares in slab order (a chunk without any unmasked visibility: zeros).
    ``shared`` as for `slab_images`."""
    selections, points = _slab_state(slab_layout, pieces, keep, workers, threads=max(1, options["nthreads"]))
    image = sent(dirty, shared, COPY_THREADS)
    whole = isinstance(image, exchange.Published)      # the shares written into shared memory
    count = len(slab_layout.bounds)
    shares = {}                                         # (slab, chunk) -> (that chunk's share, its pick)
    busy = [(t, slab) for t, slab in enumerate(slab_layout.tasks) if points[t] is not None and slab.takes("dirty2vis")]
    predictions = []
    for t, slab in busy:
        place = exchange.place(shared, f"s{t}") if whole else None
        with prefer_worker(t, workers):
            predictions.append(dask.delayed(worker_tasks.vis_slab, pure=False, nout=slab.chunks[1] - slab.chunks[0])(
                image, points[t], slab_layout.geometry, slab, options, keep, place))
    # started now, each on its slab's worker (where its operator is kept): in the array
    # below, Dask's optimization would drop the preference (`clgrid.dask.chunks.started`)
    for (t, slab), out in zip(busy, started(predictions)):
        a, b = slab.chunks
        # through shared memory the slab task returns a few bytes per chunk (`Shared`):
        # each chunk's task takes its whole result and picks its own (no getitem task on
        # the way, a scheduler hop per chunk); arrays are picked where the slab's task
        # ran (a getitem, no worker annotation), so only the chunk's share travels
        shares.update(((slab.index, i), (out, i - a) if whole else (out[i - a], None)) for i in range(a, b))
    name, tasks = f"chunk_assemble-{uuid.uuid4().hex}", []
    for i, ((chunk, _, _, m), w, taken) in enumerate(zip(pieces, wgt_pieces, selections)):
        mine = [shares.get((s, i), (None, None)) for s in range(count)]
        tasks.append(task_of(worker_tasks.chunk_assemble)(chunk, taken, w, m, dtype, max(1, options["nthreads"]),
                                                          tuple(p for _, p in mine), *[s for s, _ in mine],
                                                          dask_key_name=layout.block_key(name, chunk)))
    return layout.array_of(name, tasks, dtype)
