"""One pool of host threads for the library's numpy work, made once per process.

numpy releases the GIL in copies and elementwise loops on large arrays, so the library
splits such work (staged copies to and from the device, the w-gridding operator's
per-pixel passes on the host) over threads.  Starting threads for each pass cost a
visible part of a one-call `clgrid.vis2dirty` on 2 cores (docs/benchmarks/imaging.md);
the pool's threads are started once and kept.  A second, small pool runs whole jobs beside the
caller (`in_background`: an upload while the device plans), so that their own splits
can still use the first.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np

__all__ = ["in_slices", "in_background", "parallel_copy", "add_counting", "not_finite", "count_not_finite", "pick",
           "let_others_run"]

_pool = None
_background = None
_lock = threading.Lock()
_inside = threading.local()


def _threads() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max(1, os.cpu_count() or 1), thread_name_prefix="clgrid-host",
                                       initializer=_mark_pool_thread)
        return _pool


def _mark_pool_thread() -> None:
    _inside.flag = True


def in_slices(parts: int, n: int, fn) -> None:
    """``fn(slice)`` over ``parts`` consecutive slices of ``range(n)`` on the pool's threads;
    returns when all are done (their first exception raised).  Runs on the calling thread
    alone for one part, for tiny ``n``, or when called from a pool thread (no waiting on
    the pool from inside it)."""
    if parts <= 1 or n < 2 * parts or getattr(_inside, "flag", False):
        fn(slice(0, n))
        return
    bounds = np.linspace(0, n, parts + 1).astype(np.int64)
    futures = [_threads().submit(fn, slice(int(a), int(b))) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    wait(futures)                   # (all of them, also after one failed: callers clean up after)
    for f in futures:
        f.result()


def in_background(fn, *args):
    """``fn(*args)`` started on a background thread; returns its `concurrent.futures.Future`."""
    global _background
    with _lock:
        if _background is None:
            _background = ThreadPoolExecutor(4, thread_name_prefix="clgrid-background")
    return _background.submit(fn, *args)


def let_others_run() -> None:
    """Hand the GIL to a thread waiting for it, if any (a moment's sleep).  For loops that
    only enqueue device work and would otherwise hold the GIL for the interpreter's whole
    switch interval (5 ms) at a time: another thread's staged copy needs it for every
    slice it hands out and takes back (a device list's other devices)."""
    time.sleep(0)


def parallel_copy(dst: np.ndarray, src: np.ndarray, parts: int) -> None:
    """``dst[...] = src`` (arrays of one shape) in ``parts`` slices of their first axis on
    the pool's threads."""
    in_slices(parts, len(dst), lambda r: np.copyto(dst[r], src[r]))


def add_counting(dst: np.ndarray, src: np.ndarray, parts: int) -> int:
    """``dst += src`` (1-D arrays of one size) in ``parts`` slices on the pool's threads;
    how many of the sums are inf or NaN (real and imaginary parts apart), counted in the
    same pass: a sum of devices' shares checked for overflow without a second pass."""
    counts = []

    def add(r):
        out = dst[r]
        with np.errstate(over="ignore", invalid="ignore"):       # counted below
            np.add(out, src[r], out=out)
        reals = out.view(out.real.dtype) if np.iscomplexobj(out) else out
        counts.append(not_finite(reals))

    in_slices(parts, dst.size, add)
    return sum(counts)


def not_finite(a: np.ndarray) -> int:
    """How many entries of ``a`` are inf or NaN (a complex one once, whichever part), on
    the calling thread.  First their sum, one pass without a temporary (a NaN or inf
    entry makes it NaN or inf); only where that is not finite (such an entry, or finite
    ones whose sum overflowed) a count entry by entry.  A temporary as large as ``a``
    (a mask) would be fresh pages every call, whose faults stall every thread of the
    process."""
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(np.add.reduce(a, axis=None)):          # (any strides: no copy)
            return 0
    return a.size - int(np.count_nonzero(np.isfinite(a)))


def count_not_finite(a: np.ndarray, parts: int) -> int:
    """`not_finite` of ``a`` in ``parts`` slices on the pool's threads: a large input
    checked without a pass on one thread.  A C-contiguous ``a`` is sliced flat; any
    other (a Fortran-ordered or strided image) along its outermost axis in memory (its
    largest stride: rows of a C-ordered array, columns of a Fortran-ordered one), as it
    is: ``a.reshape(-1)`` would copy it whole first."""
    if a.ndim == 0 or a.flags.c_contiguous:
        flat = a.reshape(-1)
        counts = []
        in_slices(parts, flat.size, lambda r: counts.append(not_finite(flat[r])))
        return sum(counts)
    axis = max(range(a.ndim), key=lambda k: (a.shape[k] > 1, abs(a.strides[k])))
    outer = np.moveaxis(a, axis, 0)                  # a view
    counts = []
    in_slices(parts, len(outer), lambda r: counts.append(not_finite(outer[r])))
    return sum(counts)


def pick(a: np.ndarray, index: np.ndarray, out: np.ndarray | None = None, parts: int = 1) -> np.ndarray:
    """``a``'s flat entries at ``index`` (valid indices, numpy's index type), into ``out``
    (None: a new array), in ``parts`` slices of ``index`` on the pool's threads (1: on the
    calling thread), copied as bytes: `np.take` copies an unaligned ``a`` (a block that
    Dask deserialized at an odd offset) whole before every pick, and buffers ``out``
    unless its indices are clipped."""
    flat = a.reshape(-1)
    out = np.empty(len(index), flat.dtype) if out is None else out
    raw = np.dtype((np.void, flat.dtype.itemsize))
    source, target = flat.view(raw), out.reshape(-1).view(raw)
    in_slices(parts, len(index), lambda r: np.take(source, index[r], out=target[r], mode="clip"))
    return out
