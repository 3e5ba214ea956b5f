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
image per call, not log2(n) of them.

Where the images go (`image_place`).  With shared memory (every worker on the client's
host, `clgrid.dask.exchange`) each imaging task writes its image straight into a kept
file of its own (its device's image comes down there), and the facet sums read them and
write the client's box (`clgrid.dask.delivery.kept_box`).  A call of one imaging task
writes its image into the box itself where its worker can read it (shared memory, or one
worker), and its sum only counts.  Never more in place than that: Dask runs a task again
after its worker died, and a sum that had added into the box would add again, a first
image written there again would undo the sums; reading parts and writing the box, a task
run twice writes the same.  The client returns the box's mapping itself
(`clgrid.dask.delivery.collect`), so a reused call copies no image on the host but the
sum's.  Where every image goes to shared memory, each task's result is a few bytes
(`Shared` facets), and the sums and the warnings take it whole: no node per facet on
the way; so too on a cluster of one worker, where nothing moves.  Otherwise each task's facets are picked on its own worker (`items`), so a
facet summed there never leaves it (tested).
"""

from __future__ import annotations

import numpy as np

from . import chunks as chunking, exchange, tasks as worker_tasks
from .chunks import prefer_worker, task_of, tree_sum
from .delivery import DropBox, collect, deliver, discard, kept_box, retire
from .watch import compute

try:
    import dask
except ImportError as error:     # pragma: no cover - exercised only without the extra
    raise ImportError("clgrid.dask needs dask and distributed: pip install 'clgrid[dask]'") from error

__all__ = ["facet_count", "result_box", "image_place", "outputs_of", "items", "summed", "sent"]


def facet_count(workers, options: dict) -> int:
    """How many facets (row blocks) each imaging task cuts its image into: one per worker
    (one without a distributed cluster), at most one per row of the image."""
    return max(1, min(len(workers or [None]), options["npix_x"]))


def result_box(workers, shape: tuple, dtype) -> DropBox | None:
    """The client's box for the call's image (`clgrid.dask.delivery.kept_box`) on a
    distributed cluster; None otherwise (or without room in shared memory)."""
    return kept_box(shape, dtype) if workers else None


def image_place(shared, box: DropBox | None, task: int, alone: bool, workers=None):
    """Where imaging task ``task`` writes its whole image: the client's ``box`` where it is
    the call's only imaging task (``alone``: its sum then only counts, so either may run
    twice) and its worker can read the box (``shared``: all on the client's host; or one
    worker); else a file of its own under the call's ``shared`` prefix; None (a new array
    on its worker) without either.  (A worker on another host than the client's could not
    read the box.)"""
    if alone and box is not None and (shared is not None or (workers is not None and len(workers) == 1)):
        return box
    return exchange.place(shared, f"i{task}")


def outputs_of(task, facets: int, shared, workers):
    """What the sums take from an imaging task (a Dask node of ``facets`` facets and the
    warnings): the task whole where ``shared`` (its facets are a few bytes each in shared
    memory) or on a cluster of one worker (nothing moves), else its entries picked on its
    worker (`items`)."""
    return task if shared is not None or (workers is not None and len(workers) == 1) else items(task, facets)


def items(task, facets: int) -> tuple:
    """An imaging task's facets and warnings as separate nodes, made under the task's own
    worker preference: a facet the task keeps for its own worker's sum (an array) is
    picked there and stays there; only the few bytes of a facet left in shared memory
    (`Shared`), or a facet summed elsewhere without shared memory, go to the worker that
    sums it.  (Picked under the summing worker's preference, the whole result, the kept
    facet with it, went there: docs/benchmarks/dask.md, "Nothing large through Dask".)"""
    return tuple(task[i] for i in range(facets + 1))


def summed(outputs: list, facets: int, workers, shape: tuple, dtype, stall_timeout=None, shared=None,
           threads: int = 1, out=None, box: DropBox | None = None) -> tuple:
    """The image (``shape``, ``dtype``; into ``out`` where given) from the imaging tasks'
    outputs (`outputs_of`: ``facets`` facets and the warnings each, whole or picked):
    facet f summed pairwise by task number on worker f, and handed to the client through
    ``box`` (`result_box`, whose memory the result is) where worker f is on its host
    (`clgrid.dask.delivery`), else gathered; all facets at once.  On a distributed
    cluster each facet is one task (`clgrid.dask.tasks.sum_facet`: the tree's order, the
    same bits) that takes the parts (from shared memory where ``shared``, the call's
    `clgrid.dask.exchange` prefix: every worker on the client's host; the first task's
    from the box itself), adds them into the box and counts what the client would check;
    without one (Dask's local schedulers), a tree of additions.  The box becomes the
    result, or is given back; where the tasks failed it is removed instead
    (`clgrid.dask.delivery.retire`: some may still be writing it)."""
    if not outputs:
        discard(box)
        return None, frozenset(), None
    starts = [int(s) for s in np.cumsum([0] + [len(r) for r in np.array_split(np.arange(shape[0]), facets)])[:-1]]
    sums = []
    whole = shared is not None or workers is not None

    def entry(output, f):
        return output[f] if isinstance(output, tuple) else output

    try:
        for f in range(facets):
            with prefer_worker(f, workers):
                if whole:
                    sums.append(task_of(worker_tasks.sum_facet)(box, starts[f], threads, f,
                                                                *[entry(o, f) for o in outputs]))
                    continue
                total = tree_sum([o[f] for o in outputs], task_of(worker_tasks.add_images))
                sums.append(task_of(deliver)(total, box, starts[f]) if box is not None else total)
        *parts, said = compute(*sums, task_of(worker_tasks.warnings_union)(*[entry(o, facets) for o in outputs]),
                               stall_timeout=stall_timeout)
    except BaseException:
        retire(box)
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
