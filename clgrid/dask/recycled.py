"""Large arrays that a worker's tasks return, recycled in the worker's process: each
chunk's predictions in a reused `clgrid.dask.dirty2vis` (`clgrid.dask.slabs.assemble`).

A new array of hundreds of megabytes is fresh pages (numpy takes it from the system, and
gives it back when it is dropped): the kernel zeroes each page at its first touch, and
the pass that fills the array pays for those faults on top of its own work.  A major
cycle's calls make arrays of the same sizes call after call, so here an array is a
`clgrid.device.host_blocks.LentBlock` over a kept buffer, as the client's result boxes
(`clgrid.dask.delivery`) and the pinned blocks of one process
(`clgrid.device.transfer.host_empty`) are: when the last view of it dies (Dask released
its key, the caller's copy went elsewhere), its buffer goes back to a pool, and a later
array of the same size takes it, its pages already there.  The pool keeps at most
``KEPT_FREE`` free buffers of a size, for as many chunks of that size on one worker as
there are while a result is held during the next call (a
`clgrid.device.free_lists.FreeList`); `forget_recycled` (run by `clgrid.dask.clear_cache`)
drops them.  Arrays below ``RECYCLED_BYTES`` are plain `np.empty`: small pages cost
little, and a pool of them would only hold memory.
"""

from __future__ import annotations

import numpy as np

from ..device.free_lists import FreeList
from ..device.host_blocks import LentBlock

__all__ = ["recycled_empty", "forget_recycled", "free_buffers", "recycled_counts", "KEPT_FREE", "RECYCLED_BYTES"]

KEPT_FREE = 2                # free buffers kept per size
RECYCLED_BYTES = 4 << 20     # smaller arrays are np.empty
_free = FreeList()           # bytes -> free buffers (uint8 arrays)
_counts = {"made": 0, "reused": 0}           # buffers of recycled arrays since `forget_recycled`


def recycled_empty(shape, dtype) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype``, as `np.empty` gives,
    over a recycled buffer where it is at least ``RECYCLED_BYTES`` (its contents are a
    dropped array's: write every entry)."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(n) for n in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes < RECYCLED_BYTES:
        return np.empty(shape, dtype)
    with _free.lock:
        buffer = _free.take(nbytes)
        _counts["made" if buffer is None else "reused"] += 1
        generation = _free.generation
    if buffer is None:
        buffer = np.empty(nbytes, np.uint8)
    return np.asarray(LentBlock(buffer, shape, dtype, _give_back, buffer, generation))


def _give_back(buffer: np.ndarray, generation: int) -> None:
    _free.give_back(buffer.nbytes, buffer, generation, per_key=KEPT_FREE)


def free_buffers() -> dict:
    """How many free buffers the pool holds, by size in bytes."""
    return {nbytes: len(free) for nbytes, free in _free.free_blocks().items()}


def recycled_counts() -> dict:
    """How many arrays of at least ``RECYCLED_BYTES`` this process made over a new
    buffer (``made``) and over a free one (``reused``) since `forget_recycled`."""
    with _free.lock:
        return dict(_counts)


def forget_recycled() -> None:
    """Drop the free buffers (their memory goes back to the system) and the counts;
    arrays still held are not taken back when they are dropped."""
    with _free.lock:
        _free.forget()
        _counts.update(made=0, reused=0)
