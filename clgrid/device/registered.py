"""Host memory that a device copies to and from at the bus's speed though numpy did not
allocate it pinned: a kept mapping (a file in shared memory that several processes
read and write, `clgrid.dask.exchange`), registered with each context that copies it by
a buffer made over it with ``CL_MEM_USE_HOST_PTR`` that no command ever uses.

`clgrid.device.transfer`'s pinned blocks serve arrays the library allocates.  A Dask
worker's values, images and the client's box live in files in ``/dev/shm`` instead,
written by other processes, and each copy to or from a GPU went through the staging's
pinned pieces and a host copy.  NVIDIA's driver pins the host memory under a
``USE_HOST_PTR`` buffer when it makes the buffer, and unpins it when the buffer is
released; while it lives, plain copies between that memory and any device buffer cross
the bus at the pinned speed (docs/benchmarks/dask.md, "Two H100s, tenth session").  So a
registered range is copied with the plain ``clEnqueueWriteBuffer`` / ``ReadBuffer`` from
and to the host array itself, which is correct on any runtime; the buffer over the region
is only what makes the driver pin it.  Since no command uses that buffer, the spec's rules
for keeping a ``USE_HOST_PTR`` buffer's host and device copies in step (maps and unmaps)
never come into play.

A region is `register` ed by whoever keeps the mapping (and `forget` ed when it drops
it).  A context's buffer over it is made on the region's second copy in that context
(making one pins the memory, which costs about as much as a copy of it), and kept until the region is
forgotten, while the regions registered with a context hold at most `DEVICE_SHARE` of its
device's memory in bytes (each pins host memory, and a runtime may keep a device copy of
each buffer); on devices that share the host's memory the staging is not used and neither
is this.
"""

from __future__ import annotations

import threading

import numpy as np
import pyopencl as cl

__all__ = ["register", "forget", "registered_count", "copy_up", "copy_down"]

# Of a device's global memory, in bytes, the regions registered with one of its contexts
# may hold (each pins host memory; a runtime may keep a device copy of each buffer):
# beyond it, regions are copied through the staging.
DEVICE_SHARE = 0.125
_lock = threading.Lock()
# base address -> _Region
_regions: dict = {}
_held: dict = {}             # context int_ptr -> bytes of the buffers made over regions in it


class _Region:
    """A registered host array (1-D bytes, C-contiguous) and, per context, its buffer or
    how many copies asked for one (made on the second)."""

    def __init__(self, array: np.ndarray):
        self.array = array
        self.start = array.__array_interface__["data"][0]
        self.nbytes = array.nbytes
        self.buffers: dict = {}              # context int_ptr -> cl.Buffer, or the count of asks so far
        self.lock = threading.Lock()
        self.forgotten = False               # (`release`d: no buffer is made over it any more)

    def buffer(self, context):
        """This context's buffer over the region; None on its first ask, or where the
        context refuses one (then never asked again)."""
        key = context.int_ptr
        with self.lock:
            if self.forgotten:               # (looked up as it was forgotten: its share is given back)
                return None
            found = self.buffers.get(key, 0)
            if not isinstance(found, int):
                return found
            if found == 0:
                self.buffers[key] = 1
                return None
            if found < 0:
                return None
            room = min(d.global_mem_size for d in context.devices) * DEVICE_SHARE
            with _lock:
                if _held.get(key, 0) + self.nbytes > room:
                    return None
                _held[key] = _held.get(key, 0) + self.nbytes
            try:
                made = cl.Buffer(context, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR, hostbuf=self.array)
            except (cl.Error, ValueError):   # (refused by the runtime, or read-only memory by pyopencl)
                self.buffers[key] = -1
                self._uncount(key)
                return None
            except BaseException:
                self._uncount(key)
                raise
            self.buffers[key] = made
            return made

    def release(self) -> None:
        """Forgotten: its buffers' bytes no longer counted, and no buffer made after (under
        its lock: a buffer being made is counted first, then given back)."""
        with self.lock:
            self.forgotten = True
            for k, found in list(self.buffers.items()):
                if not isinstance(found, int):
                    self._uncount(k)

    def _uncount(self, key) -> None:
        """One buffer's bytes no longer counted in context ``key`` (the caller holds the lock)."""
        with _lock:
            _held[key] = max(0, _held.get(key, 0) - self.nbytes)


def register(array: np.ndarray) -> None:
    """Let devices copy to and from ``array`` (C-contiguous memory the caller keeps mapped
    until it calls `forget`) at the pinned speed, by buffers over it (module docstring).
    Only writable memory gets one (the buffer is read-write): a read-only ``array`` is
    copied through the staging, as an unregistered one."""
    region = _Region(np.asarray(array).reshape(-1).view(np.uint8))
    with _lock:
        _regions[region.start] = region


def forget(array: np.ndarray) -> None:
    """``array`` (as given to `register`) no longer registered: its buffers are released
    (a copy under way keeps its own until it ends)."""
    with _lock:
        region = _regions.pop(np.asarray(array).__array_interface__["data"][0], None)
    if region is not None:
        region.release()


def registered_count() -> int:
    """How many regions are registered (for tests and probes)."""
    with _lock:
        return len(_regions)


def _pinning(host: np.ndarray, context):
    """The buffer over ``host``'s registered region in ``context`` (what keeps it pinned:
    a copy holds it until it ends, so that a `forget` meanwhile unpins nothing under it),
    or None where ``host`` lies in no registered region or the region has no buffer there
    yet (this ask counted: the second makes it)."""
    if not host.flags.c_contiguous or host.nbytes == 0:
        return None
    at = host.__array_interface__["data"][0]
    with _lock:
        regions = list(_regions.values())
    for region in regions:
        if region.start <= at and at + host.nbytes <= region.start + region.nbytes:
            return region.buffer(context)
    return None


def copy_up(queue: cl.CommandQueue, host: np.ndarray, buffer: cl.Buffer) -> bool:
    """``host`` copied into the start of ``buffer`` straight from its registered region,
    done on return: True; False (nothing done) where it lies in no registered region with
    a buffer over it in ``queue``'s context."""
    pinning = _pinning(host, queue.context)
    if pinning is None:
        return False
    cl.enqueue_copy(queue, buffer, host).wait()
    del pinning                              # (held until the copy ended)
    return True


def copy_down(queue: cl.CommandQueue, buffer: cl.Buffer, host: np.ndarray, wait_for=None) -> bool:
    """The start of ``buffer`` copied straight into ``host`` (in a registered region), done
    on return: True; False (nothing done) as for `copy_up`."""
    pinning = _pinning(host, queue.context)
    if pinning is None:
        return False
    cl.enqueue_copy(queue, host, buffer, wait_for=wait_for).wait()
    del pinning                              # (held until the copy ended)
    return True
