"""The rows split of `clgrid.dask.vis2dirty` / `dirty2vis` (``split="rows"``): the graph the
client builds, a task per chunk.

Each task images one chunk (rows ``a:b``, channels ``c:d``) with an operator of its own,
on a grid and w-planes of its own; with w, each chunk pays every plane's FFT, so this is
for 2-D imaging (one plane), and for data one task holds whole.  The tasks are
`clgrid.dask.tasks`' (``image_chunk``, ``vis_chunk``: each worker keeps its operators,
keyed by the call's token and the chunk); task i prefers worker i mod n.  The partial
images go to `clgrid.dask.images.summed`.
"""

from __future__ import annotations

from . import tasks as worker_tasks
from .chunks import ChunkLayout, prefer_worker, started, task_of
from .delivery import COPY_THREADS
from .images import image_place, outputs_of, sent

try:
    import dask
    import dask.array as da
except ImportError as error:     # pragma: no cover - exercised only without the extra
    raise ImportError("clgrid.dask needs dask and distributed: pip install 'clgrid[dask]'") from error

__all__ = ["rows_images", "rows_vis"]


def rows_images(token, layout: ChunkLayout, uvw, freq, vis, wgt, mask, options: dict, keep: int, workers,
                facets: int, shared=None, box=None) -> list:
    """`vis2dirty`'s imaging tasks, one per chunk of ``layout`` (in chunk order): each one's
    ``facets`` facets and warnings (`clgrid.dask.images.outputs_of`), for
    `clgrid.dask.images.summed`.  ``token`` keys the workers' kept operators; ``shared``
    is the call's `clgrid.dask.exchange` prefix (the images go through shared memory) or
    None; ``box`` the client's box for the image (a call of one chunk writes its image
    there) or None."""
    outputs, alone = [], len(layout.chunks()) == 1
    for chunk, u, v, w, m in zip(layout.chunks(), layout.pieces(uvw, channels=False), layout.pieces(vis),
                                 layout.pieces(wgt), layout.pieces(mask)):
        with prefer_worker(chunk.index, workers):
            task = dask.delayed(worker_tasks.image_chunk, pure=False, nout=facets + 1)(
                token, u, freq[slice(*chunk.channels)], v, w, m, chunk, options, keep, facets,
                image_place(shared, box, chunk.index, alone, workers))
            outputs.append(outputs_of(task, facets, shared, workers))
    return outputs


def rows_vis(token, layout: ChunkLayout, dirty, uvw, freq, wgt, mask, options: dict, keep: int, workers, dtype,
             shared=None) -> list:
    """`dirty2vis`'s predictions, one lazy Dask array (the chunk's shape, ``dtype``) per
    chunk of ``layout``, in chunk order, for `clgrid.dask.chunks.ChunkLayout.assemble`;
    the image ``dirty`` goes to the workers once (`clgrid.dask.images.sent`, through
    shared memory where ``shared``)."""
    image, tasks = sent(dirty, shared, COPY_THREADS), []
    for chunk, u, w, m in zip(layout.chunks(), layout.pieces(uvw, channels=False), layout.pieces(wgt),
                              layout.pieces(mask)):
        with prefer_worker(chunk.index, workers):
            tasks.append(task_of(worker_tasks.vis_chunk)(token, image, u, freq[slice(*chunk.channels)], w, m, chunk,
                                                         options, keep))
    # started now, each on its chunk's worker (`clgrid.dask.chunks.started`)
    return [da.from_delayed(task, shape=worker_tasks.chunk_shape(chunk), dtype=dtype)
            for chunk, task in zip(layout.chunks(), started(tasks))]
