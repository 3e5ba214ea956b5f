"""The image of a `clgrid.dask.vis2dirty` / `dirty2vis` call between the client and the
workers: ``vis2dirty``'s partial images cut into facets and summed on the workers, the
sum handed to the client (`summed`); ``dirty2vis``'s image sent to every worker once
(`sent`).  Both splits' graphs (`clgrid.dask.planes_split`, `clgrid.dask.rows_split`)
end here.

The sum.  Each imaging task cuts its image into n facets (row blocks; n the workers,
`facet_count`), and facet f of all tasks is summed on worker f, pairwise in a tree fixed
by the tasks' numbers (`clgrid.dask.chunks.tree_sum`'s order), so the result does not
depend on which task finished first.  On a distributed cluster each facet's sum is one
task (`clgrid.dask.tasks.sum_facet`) that takes the parts (from shared memory where it
can), writes the sum into the client's box and counts its non-finite and non-zero
pixels, so the client receives one image and does not pass over it again; with Dask's
local schedulers, a tree of additions.  Each worker so sends and receives about one
image per call, not log2(n) of them; with shared memory, a reused call passes only a few
hundred bytes per task through Dask (each task's facets are picked on its own worker,
`items`, so the facet it keeps for its own sum never leaves it: tested).
"""

from __future__ import annotations

import numpy as np

from . import chunks as chunking, exchange, tasks as worker_tasks
from .chunks import prefer_worker, task_of, tree_sum
from .delivery import collect, deliver, discard, kept_box
from .watch import compute

try:
    import dask
except ImportError as error:     # pragma: no cover - exercised only without the extra
    raise ImportError("clgrid.dask needs dask and distributed: pip install 'clgrid[dask]'") from error

__all__ = ["facet_count", "places", "items", "summed", "sent"]


def facet_count(workers, options: dict) -> int:
    """How many facets (row blocks) each imaging task cuts its image into: one per worker
    (one without a distributed cluster), at most one per row of the image."""
    return max(1, min(len(workers or [None]), options["npix_x"]))


def places(shared, task: int, facets: int, workers) -> tuple | None:
    """Where imaging task ``task`` leaves each facet in shared memory: a file for a facet
    summed on another worker than the task's (by `prefer_worker`), None for its own."""
    if shared is None:
        return None
    n = len(workers)
    return tuple(None if task % n == f % n else exchange.place(shared, f"i{task}-{f}") for f in range(facets))


def items(task, facets: int) -> tuple:
    """An imaging task's facets and warnings as separate nodes, made under the task's own
    worker preference: a facet the task keeps for its own worker's sum (an array) is
    picked there and stays there; only the few bytes of a facet left in shared memory
    (`Shared`), or a facet summed elsewhere without shared memory, go to the worker that
    sums it.  (Picked under the summing worker's preference, the whole result, the kept
    facet with it, went there: docs/benchmarks/dask.md, "Nothing large through Dask".)"""
    return tuple(task[i] for i in range(facets + 1))


def summed(outputs: list, facets: int, workers, shape: tuple, dtype, stall_timeout=None, shared=None,
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
                sums.append(task_of(worker_tasks.sum_facet)(box, starts[f], threads, *[out[f] for out in outputs]))
                continue
            total = tree_sum([out[f] for out in outputs], task_of(worker_tasks.add_images))
            sums.append(task_of(deliver)(total, box, starts[f]) if box is not None else total)
    try:
        *parts, said = compute(*sums, task_of(worker_tasks.warnings_union)(*[out[facets] for out in outputs]),
                               stall_timeout=stall_timeout)
    except BaseException:
        discard(box)
        raise
    counts = None
    if whole:                                # (rows or None, non-finite pixels, any non-zero) per facet
        counts = (sum(p[1] for p in parts), any(p[2] for p in parts))
        parts = [p[0] for p in parts]
    return collect(box, parts, starts, out), said, counts


def sent(dirty: np.ndarray, shared: str | None = None, threads: int = 1):
    """The image as one dependency of every task: written once into a kept file in shared
    memory where ``shared`` (`clgrid.dask.exchange.publish`: every worker on this host),
    else `clgrid.dask.chunks.shared` (scattered to every worker once, sent as the graph
    that uses it is built: the scheduler may drop replicas that no task waits for yet).  An
    image the caller published already (`clgrid.dask.exchange.Published`) as it is."""
    if isinstance(dirty, exchange.Published):
        return dirty
    published = exchange.publish(shared, "d", dirty, threads)
    if published is not None:
        return published
    return chunking.shared(f"clgrid-dirty-{dask.base.tokenize(dirty)}", dirty)
