"""Large arrays passed between the tasks of one `clgrid.dask.vis2dirty` call through the
host's shared memory, where every worker and the client are on one host (a
`LocalCluster`, the workers of a many-GPU node beside their client).

Dask moves a task's result to another worker through a socket: the result pickled,
sent, received into fresh memory.  For the planes split that is, in every call, each
chunk's values for the slabs imaged on other workers and each imaging task's partial
image for the facets summed on other workers (on two GPU workers, most of what a call
did besides imaging: docs/benchmarks/dask.md).  Here the producing task writes its array
once into a file in ``/dev/shm`` (`write_into`: its space reserved first with
``posix_fallocate``, so a write into the mapping cannot fail) and returns a `Shared`,
a few bytes naming the file's region; the consuming task maps that region (`read`): one
copy instead of three, and no pickling.  Several producers may fill one file at their
own regions (each chunk its values' place in its slab's file), so the consumer maps one
array without joining them.

Every file of a call is named under the call's `prefix`, made on the client; the client
removes them all once the call is over (`remove`), whatever happened, and the workers'
mappings keep their memory until dropped.  A producer that cannot make its file
(``/dev/shm`` full, absent) returns its array instead, and the consumers take either.
`prefix` is None (nothing shared) unless the client and every worker share the host (the
same boot of the same machine, asked once per set of workers).
"""

from __future__ import annotations

import glob
import mmap
import os
import socket
import threading
import uuid
from dataclasses import dataclass

import numpy as np

from ..device.host_threads import in_slices

__all__ = ["Shared", "prefix", "place", "write_into", "share", "read", "readable", "remove", "host_identity"]

SHARED_MEMORY = "/dev/shm"
_hosts: dict = {}            # on the client: (client id, worker addresses) -> all on this host
_lock = threading.Lock()


@dataclass(frozen=True)
class Shared:
    """``count`` elements of ``dtype`` at element ``offset`` of the file ``path``, shaped
    ``shape`` (None: 1-D): what a task returns in place of an array it wrote there."""

    path: str
    offset: int
    count: int
    dtype: str
    shape: tuple | None = None


def host_identity() -> tuple:
    """(host name, boot id, whether shared memory is there): equal in two processes on the
    same boot of the same host."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = None
    return socket.gethostname(), boot, os.path.isdir(SHARED_MEMORY) and hasattr(os, "posix_fallocate")


def prefix(client, workers: list | None) -> str | None:
    """A fresh path prefix in shared memory for one call's files, or None where some worker
    (or the client) is elsewhere, or there is no shared memory."""
    if client is None or not workers:
        return None
    key = (client.id, tuple(workers))
    with _lock:
        together = _hosts.get(key)
    if together is None:
        here = host_identity()
        try:
            theirs = client.run(host_identity, workers=list(workers))
        except Exception:                      # a worker gone: ask again next call
            return None
        together = bool(here[2]) and here[1] is not None and all(tuple(t) == here for t in theirs.values())
        with _lock:
            _hosts[key] = together
            while len(_hosts) > 16:
                _hosts.pop(next(iter(_hosts)))
    return os.path.join(SHARED_MEMORY, f"clgrid-x-{uuid.uuid4().hex}") if together else None


def place(call_prefix: str | None, name: str) -> str | None:
    """The path of one file of the call (None without a prefix)."""
    return None if call_prefix is None else f"{call_prefix}-{name}"


def _mapped(path: str, offset_bytes: int, nbytes: int, writable: bool):
    """(mmap, the region's start in it) for ``nbytes`` at ``offset_bytes`` of ``path``; the
    file made and its region reserved where ``writable``."""
    granularity = mmap.ALLOCATIONGRANULARITY
    start = offset_bytes - offset_bytes % granularity
    flags = os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY
    fd = os.open(path, flags, 0o600)
    try:
        if writable:
            os.posix_fallocate(fd, offset_bytes, nbytes)
        populate = getattr(mmap, "MAP_POPULATE", 0)
        m = mmap.mmap(fd, offset_bytes - start + nbytes, flags=mmap.MAP_SHARED | populate,
                      prot=mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0), offset=start)
    finally:
        os.close(fd)
    return m, offset_bytes - start


def write_into(path: str | None, offset: int, shape: tuple, dtype, fill):
    """An array of ``shape`` and ``dtype`` that ``fill(out)`` writes, made at element
    ``offset`` of the file ``path``: its `Shared`; without ``path``, or where the file
    cannot be made, the array itself."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    if path is not None and count:
        try:
            m, at = _mapped(path, offset * dtype.itemsize, count * dtype.itemsize, True)
        except (OSError, ValueError):
            m = None
        if m is not None:
            out = np.frombuffer(m, dtype, count, at).reshape(shape)
            fill(out)
            del out, m                        # unmapped when the last view goes
            return Shared(path, int(offset), count, dtype.str, tuple(int(n) for n in shape))
    out = np.empty(shape, dtype)
    fill(out)
    return out


def share(path: str | None, array: np.ndarray, threads: int = 1):
    """``array`` copied into the file ``path`` (on ``threads`` host threads): its `Shared`;
    without ``path``, or where the file cannot be made, the array itself (no copy)."""
    if path is None or array.size == 0:
        return array
    shared = write_into(path, 0, array.shape, array.dtype, lambda out: _copy(out, array, threads))
    return shared if isinstance(shared, Shared) else array


def _copy(out: np.ndarray, array: np.ndarray, threads: int) -> None:
    flat_out, flat_in = out.reshape(-1), np.ascontiguousarray(array).reshape(-1)
    in_slices(max(1, threads), flat_out.size, lambda r: np.copyto(flat_out[r], flat_in[r]))


def read(shared) -> np.ndarray:
    """A `Shared` region as a read-only array (the mapping, no copy); anything else as it is."""
    if not isinstance(shared, Shared):
        return shared
    dtype = np.dtype(shared.dtype)
    if shared.count == 0:
        return np.empty(shared.shape or (0,), dtype)
    m, at = _mapped(shared.path, shared.offset * dtype.itemsize, shared.count * dtype.itemsize, False)
    return np.frombuffer(m, dtype, shared.count, at).reshape(shared.shape or (shared.count,))


def readable(parts: list) -> np.ndarray | None:
    """Consecutive `Shared` regions of one file (each chunk's values for one slab task, in
    order) as one array, mapped once; None where they are not that."""
    parts = [p for p in parts if isinstance(p, Shared) or np.size(p)]      # a chunk that gives nothing
    if not parts or not all(isinstance(p, Shared) for p in parts):
        return None
    if any(p.path != parts[0].path or p.dtype != parts[0].dtype for p in parts):
        return None
    if any(b.offset != a.offset + a.count for a, b in zip(parts, parts[1:])):
        return None
    total = sum(p.count for p in parts)
    return read(Shared(parts[0].path, parts[0].offset, total, parts[0].dtype))


def remove(call_prefix: str | None) -> None:
    """On the client: remove every file of the call (their memory goes with the last mapping)."""
    if call_prefix is None:
        return
    for path in glob.glob(glob.escape(call_prefix) + "-*"):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
