"""A large result handed to the client through the host's shared memory where the task
that makes it runs on the client's host (a `LocalCluster`, the workers of a many-GPU node
beside their client), instead of through the worker's socket.

Dask moves a task's result to the client through a socket: for a large image, a
sizeable part of what one GPU needs to make it (docs/benchmarks/dask.md).  Here the client makes a file of the result's size in
``/dev/shm`` (its space reserved up front, so that a write into its mapping cannot fail),
each task writes its rows into that file where it finds it (a file of a fresh random
name exists only on the client's host) and returns None, and the client's array is the
file's mapping (no copy); the file's name is removed once the call is over, its memory
freed with the array.  A task on another host, or any failure to make the file, falls
back to returning its rows as usual.

A call's box may be kept (`kept_box`): its file and the mappings on both sides are made
once (a fresh file's pages cost more than a copy out of it), and recycled as
`clgrid.device.transfer.host_empty` recycles pinned blocks (a
`clgrid.device.free_lists.FreeList`).  The result the client
returns is the box's mapping itself (no copy); when the caller drops that array (every
view of it), the box goes back to a pool for a later call's tasks to write, and a call
that finds none free (the caller still holds the earlier results) makes another.  Given
the caller's own array (``out``), the client copies the result into it and the box goes
back at once.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import numpy as np

from . import exchange
from ..device.free_lists import FreeList
from ..device.host_blocks import LentBlock
from ..device.host_threads import parallel_copy

__all__ = ["DropBox", "open_box", "kept_box", "forget_boxes", "deliver", "region", "collect", "discard", "retire"]

SHARED_MEMORY = "/dev/shm"
COPY_THREADS = 16            # host threads of the client's copies into and out of shared memory
KEPT_BOXES = 2               # free kept boxes per shape and dtype
_boxes = FreeList()          # on the client: (shape, dtype) -> free kept boxes
_made: set = set()           # on the client: the paths of every kept box not yet removed (under _boxes.lock)


@dataclass(frozen=True)
class DropBox:
    """Where the client waits for a result of ``shape`` and ``dtype``: a file in shared memory."""

    path: str
    shape: tuple
    dtype: str
    kept: bool = False


def open_box(shape: tuple, dtype) -> DropBox | None:
    """A file in shared memory for a result of ``shape`` and ``dtype``, its space reserved;
    None where there is no shared memory or no room in it."""
    if not os.path.isdir(SHARED_MEMORY) or not hasattr(os, "posix_fallocate"):
        return None
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    path = os.path.join(SHARED_MEMORY, f"clgrid-{uuid.uuid4().hex}")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return None
    try:
        os.posix_fallocate(fd, 0, max(nbytes, 1))
    except OSError:
        os.close(fd)
        os.unlink(path)
        return None
    os.close(fd)
    return DropBox(path, tuple(int(n) for n in shape), np.dtype(dtype).str)


def kept_box(shape: tuple, dtype) -> DropBox | None:
    """A box for a result of ``shape`` and ``dtype`` that the client keeps for later calls
    (its file and both sides' mappings made once: a fresh file's pages cost more than the
    copy out of it): a free one, else a new one; given back by `collect` (when the
    caller drops the array it returns) or `discard`.  None as `open_box`."""
    box = _boxes.take((tuple(int(n) for n in shape), np.dtype(dtype).str))
    if box is not None:
        return box
    box = open_box(shape, dtype)
    if box is None:
        return None
    with _boxes.lock:
        _made.add(box.path)
    return DropBox(box.path, box.shape, box.dtype, kept=True)


def forget_boxes() -> None:
    """On the client: remove every kept box's file, free or holding a result the caller
    has (its memory stays with that array; the box is not given back)."""
    with _boxes.lock:
        paths = list(_made)
        _made.clear()
        _boxes.forget()
    for path in paths:
        discard(DropBox(path, (), "u1"))      # (not kept: removed)


def _give_back(box: DropBox) -> None:
    """``box`` free for a later call, where it is still kept and its pool has room (given
    back twice, by a failing call's handlers: kept once); else its file removed."""
    with _boxes.lock:
        if box.path in _made and _boxes.give_back((box.shape, box.dtype), box, per_key=KEPT_BOXES):
            return
        _made.discard(box.path)
    discard(DropBox(box.path, box.shape, box.dtype))


def region(box: DropBox | None, start: int, shape: tuple):
    """In a task: rows ``start`` onwards (``shape``) of the client's file, writable, where
    this host has it (over a mapping the process keeps: `clgrid.dask.exchange`); else None."""
    if box is None or not os.path.exists(box.path):
        return None
    dtype = np.dtype(box.dtype)
    row = int(np.prod(box.shape[1:])) * dtype.itemsize
    try:
        room = exchange.region_of(box.path, start * row, int(np.prod(shape)) * dtype.itemsize)
    except (OSError, ValueError):
        return None
    return room.view(dtype).reshape(shape)


def deliver(rows: np.ndarray, box: DropBox | None, start: int):
    """In a task: ``rows`` written at row ``start`` of the client's file where this host has
    it (then None), else ``rows`` themselves."""
    part = region(box, start, rows.shape)
    if part is None:
        return rows
    parallel_copy(part, rows, exchange.copy_threads(rows.nbytes, COPY_THREADS))
    return None


def collect(box: DropBox | None, parts: list, starts: list, out: np.ndarray | None = None) -> np.ndarray:
    """On the client: the result, from the file (rows delivered there) and the rows that
    came back, into ``out`` where given.  A box of `open_box`: the file's name removed,
    the result its mapping (no copy); a kept box (`kept_box`): the result its mapping too
    (a `LentBlock`: the box given back when the array is dropped), or, with ``out``,
    copied there and the box given back.  Without a box, the rows joined."""
    if box is None:
        result = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
        if out is not None:
            out[...] = result
            return out
        return result
    if box.kept:
        nbytes = int(np.prod(box.shape)) * np.dtype(box.dtype).itemsize
        try:
            mapped = exchange.region_of(box.path, 0, nbytes)
        except BaseException:
            _give_back(box)
            raise
        if out is None:
            result = np.asarray(LentBlock(mapped, box.shape, box.dtype, _give_back, box))
        else:
            try:
                result = out
                parallel_copy(result, mapped.view(np.dtype(box.dtype)).reshape(box.shape),
                              exchange.copy_threads(result.nbytes, COPY_THREADS))
            finally:
                _give_back(box)
    else:
        try:
            result = np.memmap(box.path, dtype=np.dtype(box.dtype), mode="r+", shape=box.shape)
        finally:
            discard(box)
    for part, start in zip(parts, starts):
        if part is not None:
            result[start:start + part.shape[0]] = part
    if out is not None and result is not out:
        out[...] = result
        return out
    return result if box.kept else np.asarray(result)   # a plain array over the mapping (kept alive by it)


def discard(box: DropBox | None) -> None:
    """Remove the file's name (its memory goes when the last mapping does); a kept box is
    given back instead."""
    if box is not None and box.kept:
        _give_back(box)
        return
    if box is not None:
        try:
            os.unlink(box.path)
        except FileNotFoundError:
            pass


def retire(box: DropBox | None) -> None:
    """Remove the file's name, a kept box's too, never given back: the box of a call that
    failed, whose tasks may still be running (Dask does not stop a running task when
    another fails, nor one the stall watch cancels) and would write into a later call's
    result.  (Their mappings keep the memory until they end.)"""
    if box is not None and box.kept:
        with _boxes.lock:
            _made.discard(box.path)
            _boxes.remove((box.shape, box.dtype), box)
        box = DropBox(box.path, box.shape, box.dtype)
    discard(box)


exchange.at_exit(forget_boxes)
