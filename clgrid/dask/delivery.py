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
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import numpy as np

from ..device.host_threads import in_slices

__all__ = ["DropBox", "open_box", "deliver", "region", "collect", "discard"]

SHARED_MEMORY = "/dev/shm"
COPY_THREADS = 16


@dataclass(frozen=True)
class DropBox:
    """Where the client waits for a result of ``shape`` and ``dtype``: a file in shared memory."""

    path: str
    shape: tuple
    dtype: str


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


def deliver(rows: np.ndarray, box: DropBox | None, start: int):
    """In a task: ``rows`` written at row ``start`` of the client's file where this host has
    it (then None), else ``rows`` themselves."""
    if box is None or not os.path.exists(box.path):
        return rows
    try:
        target = np.memmap(box.path, dtype=np.dtype(box.dtype), mode="r+", shape=box.shape)
    except (OSError, ValueError):
        return rows
    part = target[start:start + rows.shape[0]]
    in_slices(min(COPY_THREADS, os.cpu_count() or 1), rows.shape[0],
              lambda r: np.copyto(part[r], rows[r]))
    del part, target
    return None


def region(box: DropBox | None, start: int, shape: tuple):
    """In a task: rows ``start`` onwards (``shape``) of the client's file, writable, where
    this host has it; else None."""
    if box is None or not os.path.exists(box.path):
        return None
    try:
        target = np.memmap(box.path, dtype=np.dtype(box.dtype), mode="r+", shape=box.shape)
    except (OSError, ValueError):
        return None
    return target[start:start + shape[0]]


def collect(box: DropBox | None, parts: list, starts: list) -> np.ndarray:
    """On the client: the result, from the file (rows delivered there) and the rows that
    came back; the file's name removed.  Without a box, the rows joined."""
    if box is None:
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
    try:
        result = np.memmap(box.path, dtype=np.dtype(box.dtype), mode="r+", shape=box.shape)
    finally:
        discard(box)
    for part, start in zip(parts, starts):
        if part is not None:
            result[start:start + part.shape[0]] = part
    return np.asarray(result)           # a plain array over the mapping (kept alive by it)


def discard(box: DropBox | None) -> None:
    """Remove the file's name (its memory goes when the last mapping does)."""
    if box is not None:
        try:
            os.unlink(box.path)
        except FileNotFoundError:
            pass
