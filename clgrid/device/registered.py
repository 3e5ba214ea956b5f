"""Host memory that a device copies to and from at the bus's speed though numpy did not
allocate it pinned: a kept mapping (a file in shared memory that several processes
read and write, `clgrid.dask.exchange`), registered with each context that copies it
through a buffer over it (``CL_MEM_USE_HOST_PTR``).

`clgrid.device.transfer`'s pinned blocks serve arrays the library allocates.  A Dask
worker's values, images and the client's box live in files in ``/dev/shm`` instead,
written by other processes, and each copy to or from a GPU went through the staging's
pinned pieces and a host copy: on an H100 a 268 MB image came down in 13-18 ms against 5
ms into a pinned block (docs/benchmarks/dask.md, "Two H100s, ninth session").  A buffer
made over the mapping with ``USE_HOST_PTR`` keeps the device's copy and the host's in
step only when it is mapped and unmapped (OpenCL's rule); NVIDIA's driver pins the host
memory when it makes the buffer, so those maps and unmaps cross the bus at the pinned
speed.  So an upload from a registered region maps its range for writing (invalidated:
nothing comes down) and unmaps it (the host's bytes go up), then copies that range into
the destination on the device; a download copies into the buffer on the device and maps
the range for reading (the bytes come down into the mapping).

The spec promises the host pointer the latest bits of a range only after it is mapped,
and a map for writing that invalidates the range lifts even that: that the bytes another
process wrote into the mapping outside any map go up at the unmap is what NVIDIA's,
PoCL's and Intel's CPU runtimes do (tests/test_registered.py changes the bytes between
copies, on each device it runs on), not what the spec says.  Its own way,
``clEnqueueWriteBuffer`` / ``ReadBuffer`` with the buffer's own host memory as the
pointer, is timed beside this one by benchmarks/host_registered.py, to be chosen where it
is as fast.

A region is `register` ed by whoever keeps the mapping (and `forget` ed when it drops
it).  A context's buffer over it is made on the region's second copy in that context
(making one pins the memory and copies it once: about 10 ms for 268 MB on an H100), and
kept until the region is forgotten, while the buffers in a context hold at most
`DEVICE_SHARE` of its device's memory (the driver keeps a device copy of each); on
devices that share the host's memory the staging is not used and neither is this.
"""

from __future__ import annotations

import threading

import numpy as np
import pyopencl as cl

__all__ = ["register", "forget", "registered_count", "copy_up", "copy_down"]

# Of a device's global memory the buffers over registered regions may hold (the driver
# keeps a device copy of each): beyond it, regions are copied through the staging.
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
        self.copying = threading.Lock()      # one copy at a time: the spec leaves maps of one buffer's
        # ranges from several threads at once undefined

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
            except cl.Error:
                self.buffers[key] = -1
                self._uncount(key)
                return None
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
    until it calls `forget`) through buffers over it (module docstring)."""
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


def _placed(host: np.ndarray, context):
    """(``host``'s region's buffer in ``context``, ``host``'s byte offset in it, the region's
    copy lock), or None
    where ``host`` lies in no registered region or the region has no buffer there yet."""
    if not host.flags.c_contiguous or host.nbytes == 0:
        return None
    at = host.__array_interface__["data"][0]
    with _lock:
        regions = list(_regions.values())
    for region in regions:
        if region.start <= at and at + host.nbytes <= region.start + region.nbytes:
            buffer = region.buffer(context)
            return None if buffer is None else (buffer, at - region.start, region.copying)
    return None


def copy_up(queue: cl.CommandQueue, host: np.ndarray, buffer: cl.Buffer) -> bool:
    """``host`` copied into the start of ``buffer`` through its registered region's buffer,
    done on return: True; False (nothing done) where it lies in no registered region with
    a buffer in ``queue``'s context."""
    placed = _placed(host, queue.context)
    if placed is None:
        return False
    over, offset, copying = placed
    with copying:
        mapped, _ = cl.enqueue_map_buffer(queue, over, cl.map_flags.WRITE_INVALIDATE_REGION, offset,
                                          (host.nbytes,), np.uint8)
        mapped.base.release(queue)           # (the host's bytes go up)
        cl.enqueue_copy(queue, buffer, over, byte_count=host.nbytes, src_offset=offset).wait()
    return True


def copy_down(queue: cl.CommandQueue, buffer: cl.Buffer, host: np.ndarray, wait_for=None) -> bool:
    """The start of ``buffer`` copied into ``host`` through its registered region's buffer,
    done on return: True; False (nothing done) as for `copy_up`."""
    placed = _placed(host, queue.context)
    if placed is None:
        return False
    over, offset, copying = placed
    with copying:
        cl.enqueue_copy(queue, over, buffer, byte_count=host.nbytes, dst_offset=offset, wait_for=wait_for)
        mapped, _ = cl.enqueue_map_buffer(queue, over, cl.map_flags.READ, offset, (host.nbytes,), np.uint8)
        mapped.base.release(queue)
        queue.finish()
    return True
